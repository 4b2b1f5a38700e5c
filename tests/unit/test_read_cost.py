"""Issue 38: a serializable read costs what a plain Delta read costs (lv_core/txn/current.py), and
stays serializable and fresh: a table found moved is read at the newest global version, two tables
are read at one global version, commits the global log does not know still abort the reader once."""

from __future__ import annotations

import pandas as pd
import pytest

from lv_core import Lakehouse
from lv_core import events as ev
from lv_core.errors import TransactionAborted
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, committed_kv, logged_xy, read_kv
from tests.helpers.spy import record_requests

WRITES = ("PUT", "PUT-create", "PUT-if-match", "DELETE")


@pytest.fixture
def two(tmp_path) -> tuple[Lakehouse, Lakehouse, InstrumentedStore]:
    """Two lakehouses on one warehouse (two kernels): ``a`` counted, ``b`` the other writer."""
    path = str(tmp_path / "wh")
    b = logged_xy(path, {1: 100.0, 2: 100.0})  # both tables in the global log
    st = InstrumentedStore(b.store)
    a = Lakehouse(st, lease_s=5.0)
    warm = a.begin("serializable")  # a learns the head and caches both snapshots
    read_kv(warm, "x")
    read_kv(warm, "y")
    warm.commit()
    return a, b, st


def _delta_read_requests(a: Lakehouse, st: InstrumentedStore) -> dict[str, int]:
    st.reset()
    t = a.begin("delta")
    read_kv(t, "x", 1)
    t.commit()
    return {k: v for k, v in st.counts().items() if v}


def test_a_serializable_point_read_costs_what_a_plain_delta_read_costs(two):
    a, _b, st = two
    plain = _delta_read_requests(a, st)
    st.reset()
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 100.0}
    executed = {k: v for k, v in st.counts().items() if v}
    res = r.commit()
    # one HEAD finds the latest version, then one GET per data file (ops.read does no data skipping)
    assert {k: v for k, v in st.counts().items() if v} == executed == plain == {"HEAD": 1, "GET": 2}
    # the commit made no request; it still reports a validation (compatible, nothing after its read)
    assert res.validation["compatible"] and res.validation["tables"]["x"]["r"] == res.validation["tables"]["x"]["h"]
    assert [e.compatible for e in r.events.history if isinstance(e, ev.Validated)] == [True]


def test_a_table_moved_by_another_kernel_is_read_at_the_newest_global_version(two):
    """The cached head is stale: the look past it finds the other kernel's commit, so the head is read
    (the reader sees the commit: as fresh as before), and the commit looks once more."""
    a, b, st = two
    w = b.begin("serializable")
    add_kv(w, "x", 1, 5)
    w.commit()
    st.reset()
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 105.0}
    r.commit()
    c = st.counts()
    assert c["HEAD"] == 2 and sum(c[k] for k in WRITES) == 0  # the look at first access, and at commit
    # a busy table gets the head and the look at once the next time: one round trip
    w = b.begin("serializable")
    add_kv(w, "x", 1, 5)
    w.commit()
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 110.0}
    r.commit()


def test_a_moved_tables_head_is_read_as_soon_as_the_look_finds_it_moved_beside_the_first_run(two, monkeypatch):
    """The read runs beside the look (the cached head said the table was still there); the look finds the
    other kernel's commit and reads the global log's head at once, while the first run still reads its
    data, not after it (the rerun needs that head). Held until a GET of the global log is under way, the
    first run's data GET waits out its gate on the code before (the head was read when settling)."""
    import threading

    a, b, st = two
    w = b.begin("serializable")
    add_kv(w, "x", 1, 5)
    w.commit()
    head_read = threading.Event()
    waited: list[bool] = []
    get = st.get

    def gated(key, *args, **kw):
        if key.startswith("_lakevilla/gvl/"):
            head_read.set()
        elif key.startswith("x/") and key.endswith(".parquet") and not waited:
            waited.append(head_read.wait(5.0))
        return get(key, *args, **kw)

    monkeypatch.setattr(st, "get", gated)
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 105.0}  # the rerun, at the newest head
    r.commit()
    assert waited == [True]


def test_two_tables_are_read_at_one_global_version_when_a_writer_commits_in_between(two):
    """Read skew is impossible: the first table is found unmoved (the cached head is used), a writer
    then moves both tables; the second table is read at the same global version (its old value), and
    the reader commits (it is ordered before the writer)."""
    a, b, st = two
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 100.0}
    w = b.begin("serializable")
    add_kv(w, "x", 1, -10)
    add_kv(w, "y", 1, +10)
    w.commit()
    assert read_kv(r, "y", 1) == {1: 100.0}  # not 110: the sum stays 200 in what r saw
    r.commit()
    assert committed_kv(b, "x")[1] + committed_kv(b, "y")[1] == 200.0


def test_a_commit_outside_the_global_log_still_aborts_the_reader_once(two):
    """Freshness as before: a plain Delta commit the log does not know changed what the reader read,
    so its commit-time look finds the table moved, validates, aborts with R1 and catches the log up."""
    import deltalake

    a, b, _st = two
    deltalake.write_deltalake(b.store.url("x"), pd.DataFrame({"id": [3], "val": [1.0]}), mode="append")
    r = a.begin("serializable")
    assert read_kv(r, "x") == {1: 100.0, 2: 100.0}  # the global log does not know the new row yet
    with pytest.raises(TransactionAborted) as ei:
        r.commit()
    assert ei.value.rule == "R1"
    again = a.begin("serializable")
    assert read_kv(again, "x") == {1: 100.0, 2: 100.0, 3: 1.0}
    again.commit()


def test_a_read_only_transaction_whose_table_moved_after_its_read_commits_ordered_before(two):
    """The table moves (another kernel's validated commit) between the read and the commit: the reader
    read one global version, so it commits with its old value, ordered before the writer."""
    a, b, _st = two
    r = a.begin("serializable")
    assert read_kv(r, "x", 2) == {2: 100.0}
    w = b.begin("serializable")
    add_kv(w, "x", 2, 1)
    w.commit()
    res = r.commit()
    assert res.validation["compatible"]


def test_a_first_update_runs_beside_the_look_and_reads_no_global_version(two, monkeypatch):
    """The first operation runs on the cached head while the HEAD of the table's next log version is
    under way; the look confirms it, so the global log is only written (the plan's publish), never read."""
    a, _b, st = two
    seen = record_requests(monkeypatch, st)
    w = a.begin("serializable")
    add_kv(w, "x", 1, 1)
    w.commit()
    gvl = [(k, key) for k, key in seen if key.startswith("_lakevilla/gvl/")]
    assert [k for k, _ in gvl if k in ("GET", "HEAD")] == []
    v = a.global_state().tables["x"]
    assert ("HEAD", f"x/_delta_log/{v:020d}.json") in seen  # the look, past the version read (v - 1)
    assert committed_kv(a, "x")[1] == 101.0


def test_an_update_on_a_moved_table_runs_again_on_the_newest_head_and_leaves_no_file(two):
    """The look finds the other kernel's commit: what the first run staged is deleted and the update
    runs again on the newest head (no lost update, no orphan data file)."""
    a, b, _st = two
    w = b.begin("serializable")
    add_kv(w, "x", 1, 5)
    w.commit()
    t = a.begin("serializable")
    assert add_kv(t, "x", 1, 1) == 1
    t.commit()
    assert committed_kv(a, "x") == {1: 106.0, 2: 100.0}
    mine = [m.key for m in a.store.list("x/") if f"part-{t.id}-" in m.key]
    live = {f"x/{p}" for p in a.snapshot("x").files}
    assert mine and set(mine) <= live  # only the committed file of the second run is left


def test_an_update_run_again_on_a_moved_table_keeps_the_marker_placed_beside_its_first_run(two):
    """The first run's marker lies past the other kernel's commit (its claim there was lost, so the next
    version was claimed and checked in the log): the second run commits there, and the log holds no empty
    commit of a given-up marker between the two commits."""
    from lv_core.protocol.markers import read_version

    a, b, _st = two
    v = a.snapshot("x").version  # the version a's cached head names
    w = b.begin("serializable")
    add_kv(w, "x", 1, 5)
    w.commit()  # at v + 1, which a does not know
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)
    t.commit()
    placed = [e.version for e in t.events.history if isinstance(e, ev.MarkerPlaced)]
    assert placed == [v + 2]  # placed once, beside the first run
    assert [read_version(a.store, "x", u).txn for u in (v + 1, v + 2)] == [w.id, t.id]
    assert read_version(a.store, "x", v + 2).kind == "commit"
    assert committed_kv(a, "x") == {1: 106.0, 2: 100.0}


def test_a_kept_marker_waits_for_a_pending_marker_between_the_newer_head_and_it(two):
    """Between the newer version the second run read and the kept marker lies another writer's pending
    marker: the kept marker commits after it, redone over it (no lost update)."""
    from lv_core.protocol.markers import read_version

    a, b, _st = two
    v = a.snapshot("x").version
    w1 = b.begin("serializable")
    add_kv(w1, "x", 1, 5)
    w1.commit()
    w2 = b.begin("serializable")
    add_kv(w2, "x", 1, 10)  # its marker at v + 2, pending
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)
    assert [e.version for e in t.events.history if isinstance(e, ev.MarkerPlaced)] == [v + 3]
    w2.commit()
    t.commit()
    assert committed_kv(a, "x") == {1: 116.0, 2: 100.0}
    assert [read_version(a.store, "x", u).txn for u in (v + 1, v + 2, v + 3)] == [w1.id, w2.id, t.id]


def test_a_marker_right_after_the_stale_version_is_given_up_when_the_table_moved(two):
    """A plain Delta writer (no marker object) took the version right after the one a's head names, so a's
    claim there wins without the log being checked: the second run must not commit there. Its marker is
    given up and the commit lands on the next version."""
    from lv_core.protocol.markers import read_version

    a, b, _st = two
    v = a.snapshot("x").version
    w = b.begin("delta")
    add_kv(w, "x", 1, 5)
    w.commit()  # at v + 1, no marker object
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)
    t.commit()
    placed = [e.version for e in t.events.history if isinstance(e, ev.MarkerPlaced)]
    assert placed[0] == v + 1 and placed[-1] > v + 1
    assert read_version(a.store, "x", v + 1).txn != t.id
    assert read_version(a.store, "x", placed[-1]).txn == t.id
    assert committed_kv(a, "x") == {1: 106.0, 2: 100.0}


def _names_a_file_then(outcome: str):
    """An operation on ``x`` that names (and writes) a data file, then fails or records nothing."""
    from lv_core.storage.base import CREATE
    from lv_core.txn.ops import Operation, OpResult

    def run(ctx):
        ctx.store.put(f"x/{ctx.new_path('x')}", b"not parquet", mode=CREATE)
        if outcome == "fail":
            raise ValueError("the operation failed after writing a file")
        return OpResult(value=0)

    return Operation("update", ("x",), run)


@pytest.mark.parametrize("preset", ["serializable", "LV[R]"])
@pytest.mark.parametrize("outcome", ["fail", "nothing-written"])
def test_a_marker_placed_beside_an_operation_that_wrote_nothing_is_given_up(two, preset, outcome):
    """The marker a first write claims is placed while the operation still runs (EarlyMarkers): when
    the operation fails or records no change, that marker is given up, and the next writer commits."""
    from lv_core.protocol.markers import read_version

    a, b, _st = two
    features = {"features": {"R"}} if preset == "LV[R]" else {}
    v = a.snapshot("x").version + 1
    t = a.begin("repeatable_read" if preset == "LV[R]" else preset, **features)
    if outcome == "fail":
        with pytest.raises(ValueError):
            t.execute(_names_a_file_then(outcome))
        t.rollback()
    else:
        t.execute(_names_a_file_then(outcome))
        t.commit()
    st = read_version(a.store, "x", v)
    assert not (st.kind == "marker" and st.txn == t.id)  # never left pending
    if outcome == "fail":  # a failed operation's files are deleted (one it did not report is its own)
        assert not [m.key for m in a.store.list("x/") if f"part-{t.id}-" in m.key]
    w = b.begin("serializable")
    add_kv(w, "x", 2, 1)
    w.commit()
    assert committed_kv(b, "x") == {1: 100.0, 2: 101.0}


def test_a_table_known_to_have_moved_has_its_log_read_beside_the_global_head(two, monkeypatch):
    """The process knows a version of x past the one its cached head names (a claim it learnt of, as the
    LIST of a lost marker claim tells it), so the transaction reads the global log's head; x's log up to
    the version the cached head names is read beside it, since whichever head comes back names x there or
    later. The head's GET is held until a GET of x's log is under way: sent one after the other, it would
    wait out the 10 s and the test fails."""
    import threading

    a, b, _st = two
    for d in (1.0, 2.0):  # b moves x twice; a then learns the newer head through y, not through x's versions
        w = b.begin("serializable")
        add_kv(w, "x", 1, d)
        add_kv(w, "y", 1, 0)
        w.commit()
    ry = a.begin("serializable")
    assert read_kv(ry, "y", 1) == {1: 100.0}
    ry.commit()
    known = a.global_log.known_state()
    assert known is not None
    v = known.table_version("x")
    assert v is not None and (a.logs.resolved_version("x") or 0) < v
    a.logs.note_claimed("x", v + 1)
    log_read = threading.Event()
    together: list[bool] = []
    request = _st._request

    def gate(kind, key, call):
        if kind == "GET" and key.startswith("x/_delta_log/"):
            log_read.set()
        if kind == "GET" and key.startswith("_lakevilla/gvl/") and not together:
            together.append(log_read.wait(10))
        return request(kind, key, call)

    monkeypatch.setattr(_st, "_request", gate)
    r = a.begin("serializable")
    assert read_kv(r, "x", 1) == {1: 103.0}
    r.commit()
    assert together == [True]
