"""LV[CT]: dependency DAG from markers, cycle detection, marker shift; multi-table anomalies vs LV[R]."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lv_core
from lv_core import events as ev
from lv_core.delta.writer import write_data_files
from lv_core.engine.arrow_io import read_data_files
from lv_core.protocol.dag import Edge, closes_cycle, find_path, has_cycle, invert, shift_tables
from lv_core.protocol.markers import read_version
from lv_core.txn.ops import Operation, OpResult
from tests.helpers.bank import add_kv, committed_kv, make_kv, read_kv, write_kv

CT = "repeatable_read"  # R + CT

# issue 18: the marker-shift scenarios run under the log-immutability checker (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("log_immutability")


# ---------------------------------------------------------------- pure DAG logic


def _graph(*edges: Edge):
    def out(node, via):
        return [e for e in edges if e.src == node]
    return out


def test_find_path_and_cycle_closing():
    a_b = Edge("A", "B", "x", 1)
    b_c = Edge("B", "C", "y", 4)
    c_a = Edge("C", "A", "z", 7)
    out = _graph(a_b, b_c)
    assert find_path("A", "C", out) == [a_b, b_c]
    assert find_path("C", "A", out) is None
    # C about to wait behind A: closes C -> A -> B -> C
    cyc = closes_cycle("C", [c_a], out)
    assert cyc == [c_a, a_b, b_c]
    assert shift_tables("C", cyc) == {"y"}  # the cycle enters C through its marker in y
    assert has_cycle([a_b, b_c, c_a]) and not has_cycle([a_b, b_c])


def test_shift_inverts_incoming_edges_and_breaks_the_cycle():
    """Paper Lemma 1: after C shifts in the tables where the cycle enters it, no cycle remains."""
    a_b, b_c, c_a = Edge("A", "B", "x", 1), Edge("B", "C", "y", 4), Edge("C", "A", "z", 7)
    after = invert("C", [a_b, b_c, c_a], shift_tables("C", [c_a, a_b, b_c]))
    assert not has_cycle(after)
    assert Edge("C", "B", "y", -1) in after


def test_depth_bound_stops_search():
    chain = [Edge(f"T{i}", f"T{i + 1}", "t", i) for i in range(20)]
    assert find_path("T0", "T20", _graph(*chain), max_depth=8) is None
    assert find_path("T0", "T5", _graph(*chain), max_depth=8) is not None


# ---------------------------------------------------------------- with a store


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    make_kv(lh, "bank_x", {1: 1000.0, 2: 1000.0})
    make_kv(lh, "bank_y", {3: 1000.0, 4: 1000.0})
    return lh


def test_figure5_opposite_transfers_complete_without_deadlock(lh):
    """Paper Figure 5: T1 moves 50 from acc 1 (bank x) to acc 3 (bank y), T2 moves 70 from acc 3 to acc 1."""
    t1, t2 = lh.begin(CT, timeout_s=20), lh.begin(CT, timeout_s=20)
    add_kv(t1, "bank_x", 1, -50)       # P1: T1 in bank x
    add_kv(t2, "bank_y", 3, -70)       # P1: T2 in bank y
    add_kv(t2, "bank_x", 1, +70)       # P2: T2 behind T1 in bank x (edge T2 -> T1)
    x1 = t1.marker_versions()["bank_x"]
    add_kv(t1, "bank_y", 3, +50)       # P3: would close the cycle -> T1 shifts its marker in bank x
    assert any(isinstance(e, ev.CycleFound) for e in t1.events.history)
    assert read_version(lh.store, "bank_x", x1).kind == "freed"
    assert t1.marker_versions()["bank_x"] > t2.marker_versions()["bank_x"]
    dag = t1.dag().to_json()
    assert dag["cycles"] and dag["shifts"][0]["reason"] == "cycle"
    assert {e["dst"] for e in dag["edges"]} == {t2.id}
    fut = t1.commit_async()          # waits for T2 in both tables
    r2 = t2.commit()
    r1 = fut.result(timeout=30)
    assert r1.versions["bank_x"] > r2.versions["bank_x"] and r1.versions["bank_y"] > r2.versions["bank_y"]
    x, y = committed_kv(lh, "bank_x"), committed_kv(lh, "bank_y")
    assert x == {1: 1020.0, 2: 1000.0} and y == {3: 980.0, 4: 1000.0}  # = T2 then T1, serially


def _g0(lh, preset):
    """Write cycle across tables: T1 and T2 both write x and y in opposite orders."""
    t1, t2 = lh.begin(preset, timeout_s=20), lh.begin(preset, timeout_s=20)
    write_kv(t1, "bank_x", 1, 1)
    write_kv(t2, "bank_x", 1, 2)
    write_kv(t2, "bank_y", 3, 2)
    write_kv(t1, "bank_y", 3, 1)
    f1 = t1.commit_async()
    f2 = t2.commit_async()
    f1.result(timeout=60), f2.result(timeout=60)
    return committed_kv(lh, "bank_x")[1], committed_kv(lh, "bank_y")[3]


def test_g0_mt_prevented_with_ct(lh):
    x, y = _g0(lh, CT)
    assert x == y  # both values from the transaction that committed last


def test_g0_mt_not_prevented_with_r_alone(tmp_path, lh):
    lh_r = lv_core.connect(lh.store.url())
    t_preset = {"preset": "repeatable_read", "features": {"R"}}
    t1, t2 = lh_r.begin(**t_preset, timeout_s=20), lh_r.begin(**t_preset, timeout_s=20)
    write_kv(t1, "bank_x", 1, 1)
    write_kv(t2, "bank_x", 1, 2)
    write_kv(t2, "bank_y", 3, 2)
    write_kv(t1, "bank_y", 3, 1)
    f1, f2 = t1.commit_async(), t2.commit_async()
    f1.result(timeout=60), f2.result(timeout=60)
    x, y = committed_kv(lh_r, "bank_x")[1], committed_kv(lh_r, "bank_y")[3]
    assert (x, y) == (2.0, 1.0)  # T2 last in x, T1 last in y: a write cycle


def _copy(src: str, key: int, dst: str, tag: int) -> Operation:
    """INSERT INTO dst SELECT tag, val FROM src WHERE id = key (a read whose result stays inside)."""

    def run(ctx) -> OpResult:
        snap = ctx.snapshot(src)
        files = list(ctx.files(src).values())
        data = read_data_files(ctx.store, src, files, snap.schema, snap.partition_columns)
        val = data.filter(pc.equal(data["id"], key))["val"].to_pylist()[0]
        row = pa.table({"id": pa.array([tag], pa.int64()), "val": pa.array([val], pa.float64())})
        adds = write_data_files(ctx.store, dst, ctx.snapshot(dst), row, new_path=lambda v: ctx.new_path(dst, v))
        return OpResult(value=1, adds={dst: adds}, reads={src: {f.path for f in files}}, scans={src})

    return Operation("copy", (src, dst), run, logical={"sql": f"INSERT INTO {dst} SELECT {tag}, val FROM {src}"})


def _g1c(lh, **kw):
    """Circular information flow: T1 writes x and reads y, T2 writes y and reads x."""
    lh.create_table("seen", "id BIGINT, val DOUBLE")
    t1, t2 = lh.begin(timeout_s=20, **kw), lh.begin(timeout_s=20, **kw)
    write_kv(t1, "bank_x", 1, 11)
    write_kv(t2, "bank_y", 3, 22)
    t1.execute(_copy("bank_y", 3, "seen", 1))
    t2.execute(_copy("bank_x", 1, "seen", 2))
    f1, f2 = t1.commit_async(), t2.commit_async()
    f1.result(timeout=60), f2.result(timeout=60)
    return committed_kv(lh, "seen")


def test_g1c_mt_prevented_with_ct(lh):
    seen = _g1c(lh, preset=CT)
    saw_other = [seen[1] == 22.0, seen[2] == 11.0]
    assert saw_other.count(True) <= 1  # at most one saw the other: a serial order exists


def test_g1c_mt_not_prevented_with_r_alone(lh):
    seen = _g1c(lh, preset="repeatable_read", features={"R"})
    # no serial order explains it: T1 then T2 would give {1: 1000, 2: 11}, T2 then T1 {1: 22, 2: 1000};
    # LV[R] alone reads a table it does not write without a marker, so each saw the other's old value
    assert seen == {1: 1000.0, 2: 1000.0}


def test_waiting_too_long_triggers_a_preemptive_shift(tmp_path, monkeypatch):
    """A cycle the markers do not show yet (delayed exposure) is broken by a shift after waiting too long."""
    from lv_core.txn import waiting

    lh = lv_core.connect(str(tmp_path), lease_s=10.0, cycle_check_s=0.05, shift_after_s=0.3)
    lazy_lh = lv_core.connect(str(tmp_path), lease_s=10.0, cycle_check_s=1000, shift_after_s=1000)
    make_kv(lh, "a", {1: 0.0})
    make_kv(lh, "b", {1: 0.0})
    t1 = lh.begin(CT, timeout_s=20)
    add_kv(t1, "a", 1, 1)
    lazy = lazy_lh.begin(CT, timeout_s=20)
    expose = waiting.expose_predecessors  # lazy's edges object writes are delayed: nobody sees its edges
    monkeypatch.setattr(waiting, "expose_predecessors", lambda core: None if core.id == lazy.id else expose(core))
    add_kv(lazy, "b", 1, 1)
    add_kv(lazy, "a", 1, 1)  # lazy waits behind t1 in a
    add_kv(t1, "b", 1, 1)    # t1 waits behind lazy in b: a cycle no marker reveals
    assert not any(isinstance(e, ev.CycleFound) for e in t1.events.history)
    f = lazy.commit_async()
    r1 = t1.commit()
    f.result(timeout=30)
    assert any(isinstance(e, ev.Shifted) and e.reason == "waited too long" for e in t1.events.history)
    assert committed_kv(lh, "a") == {1: 2.0} and committed_kv(lh, "b") == {1: 2.0}
    assert r1.versions["a"] > lazy.marker_versions()["a"]


def test_r_alone_redo_bound_counts_per_table_not_per_transaction(tmp_path):
    """LV[R] alone settles table by table; one final redo per conflicting table must not exhaust the bound."""
    lh = lv_core.connect(str(tmp_path))
    tables = [f"kv{i}" for i in range(7)]
    for t in tables:
        make_kv(lh, t, {1: 1.0, 2: 2.0})
    t1 = lh.begin("repeatable_read", features={"R"})
    for t in tables:
        add_kv(t1, t, 1, 1)
    t2 = lh.begin("repeatable_read", features={"R"})
    for t in tables:
        add_kv(t2, t, 1, 1)  # every table conflicts with t1
    t1.commit()
    res = t2.commit()  # 7 tables, 7 redos: more than retries=5 in total, one per table
    assert res.redo_count == 7
    assert all(committed_kv(lh, t) == {1: 3.0, 2: 2.0} for t in tables)


def test_a_written_part_lost_after_the_read_only_frees_claims_the_read_tables_again(lh):
    """A group with read and written tables frees its read-only markers first, then writes its part
    (the decision). When the part's version was taken meanwhile (a writer ignoring markers), nothing
    is published; the read-only table's marker is already freed, so nothing protects what was read
    there: it is claimed again and re-checked with the written table (docs/PROTOCOL.md, "Special
    cases"). The explorer's G1a schedule is the same ordering seen from a pause."""
    import deltalake

    t1 = lh.begin(CT)
    assert read_kv(t1, "bank_y", 3) == {3: 1000.0}
    add_kv(t1, "bank_x", 1, -10)
    before = dict(t1.marker_versions())
    # a plain Delta writer takes the version of t1's marker on bank_x
    deltalake.write_deltalake(lh.store.url("bank_x"), pa.table({"id": pa.array([9], pa.int64()),
                                                                  "val": pa.array([9.0], pa.float64())}),
                              mode="append")
    r1 = t1.commit()
    placed = [e for e in t1.events.history if isinstance(e, ev.MarkerPlaced) and e.table == "bank_y"]
    lost = {e.table for e in t1.events.history if isinstance(e, ev.MarkerLost)}
    assert lost == {"bank_x"}
    assert [e.version for e in placed][-1] > before["bank_y"] and len(placed) == 2
    assert r1.versions["bank_x"] > before["bank_x"]
    assert committed_kv(lh, "bank_x") == {1: 990.0, 2: 1000.0, 9: 9.0}
    assert read_version(lh.store, "bank_y", before["bank_y"]).kind == "freed"


def test_a_stale_edge_into_a_moved_marker_closes_no_cycle(tmp_path):
    """Issue 38: edges objects outlive what they say, and a waiter must not shift for a dead cycle:
    one naming our marker from before a shift (until rewritten), one of a transaction that ended (its
    markers freed, its edges object deleted later in the background). A live cycle still is one."""
    from lv_core.protocol.edges import write_edges
    from lv_core.txn import cleaner, waiting

    lh = lv_core.connect(str(tmp_path), lease_s=10.0, cycle_check_s=1000, shift_after_s=1000)
    make_kv(lh, "a", {1: 0.0})
    make_kv(lh, "b", {1: 0.0})
    t1 = lh.begin(CT, timeout_s=20)
    add_kv(t1, "a", 1, 1)
    add_kv(t1, "b", 1, 1)
    core, held = t1.core, t1.marker_versions()
    ended = lh.begin(CT, timeout_s=20)
    add_kv(ended, "b", 1, 1)  # its marker in b, behind t1's
    ended_at = ended.marker_versions()["b"]
    ended.rollback()
    cleaner.drain(10)
    t2 = lh.begin(CT, timeout_s=20)
    add_kv(t2, "b", 1, 1)
    t2_at = t2.marker_versions()["b"]

    def check(on: str, at: int) -> None:
        waiting._check_while_waiting(core, core.book.tables["b"], at, on, waited_s=0.0)

    # (t1 waiting behind ``on``'s marker in b, as far as the search goes)
    write_edges(lh.store, t2.id, [Edge(t2.id, t1.id, "a", held["a"] - 1)], {"b": t2_at})  # not t1's marker
    check(t2.id, t2_at)
    write_edges(lh.store, ended.id, [Edge(ended.id, t1.id, "a", held["a"])], {"b": ended_at})  # ended
    check(ended.id, ended_at)
    assert not core.book.shifts and t1.marker_versions() == held
    write_edges(lh.store, t2.id, [Edge(t2.id, t1.id, "a", held["a"])], {"b": t2_at})  # live: a cycle
    with pytest.raises(waiting.Restart):
        check(t2.id, t2_at)
    assert core.book.shifts and t1.marker_versions()["a"] > held["a"]
    t1.rollback()
    t2.rollback()
