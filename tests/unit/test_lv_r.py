"""LV[R]: markers, sublogs, redo instead of abort; single-table anomalies vs the plain Delta baseline."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest

import lv_core
from lv_core import events as ev
from lv_core.engine import arrow_ops as ops
from lv_core.errors import TableNotFound, TransactionAborted, TransactionError
from lv_core.protocol import layout
from lv_core.protocol.markers import read_version
from lv_core.txn.cleaner import drain
from tests.helpers.bank import add_kv, committed_kv, make_kv, read_kv, write_kv

LV = "repeatable_read"  # features R+CT; LV[I] lands separately


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    make_kv(lh, "kv", {1: 10.0, 2: 20.0})
    return lh


def _kinds(txn: lv_core.Transaction) -> list[str]:
    return [e.kind for e in txn.events.history]


def test_commit_overwrites_marker_with_actions_and_cleans_up(lh):
    txn = lh.begin(LV)
    add_kv(txn, "kv", 1, 5)
    v = txn.marker_versions()["kv"]
    st = read_version(lh.store, "kv", v)
    assert st.pending and st.txn == txn.id
    assert committed_kv(lh, "kv") == {1: 10.0, 2: 20.0}  # plain readers see the marker as empty
    res = txn.commit()
    assert res.versions == {"kv": v}
    st = read_version(lh.store, "kv", v)
    assert st.kind == "commit" and st.txn == txn.id
    assert committed_kv(lh, "kv") == {1: 15.0, 2: 20.0}
    drain(60.0)  # the clean-up runs in the background
    assert list(lh.store.list(layout.txn_prefix(txn.id))) == []  # sublog, lease gone
    assert _kinds(txn)[:3] == ["Began", "MarkerPlaced", "SnapshotRead"] and _kinds(txn)[-1] == "Committed"


def test_read_your_writes_and_rollback_deletes_staged_files(lh):
    txn = lh.begin(LV)
    add_kv(txn, "kv", 2, 1)
    assert read_kv(txn, "kv") == {1: 10.0, 2: 21.0}
    staged = [m.key for m in lh.store.list("kv/") if txn.id in m.key]
    assert staged
    v = txn.marker_versions()["kv"]
    txn.rollback()
    drain(60.0)  # staged files are deleted in the background
    assert read_version(lh.store, "kv", v).kind == "freed"
    assert not [m.key for m in lh.store.list("kv/") if txn.id in m.key]
    assert committed_kv(lh, "kv") == {1: 10.0, 2: 20.0}
    with pytest.raises(TransactionError):
        add_kv(txn, "kv", 1, 1)


def test_read_only_marker_is_freed_at_commit(lh):
    txn = lh.begin(LV)
    assert read_kv(txn, "kv") == {1: 10.0, 2: 20.0}
    res = txn.commit()
    assert res.versions == {} and set(res.freed) == {"kv"}
    assert read_version(lh.store, "kv", res.freed["kv"]).kind == "freed"


def test_unknown_table_is_a_clear_error_and_places_nothing(lh):
    txn = lh.begin(LV)
    with pytest.raises(TableNotFound, match="nope"):
        read_kv(txn, "nope")
    assert txn.marker_versions() == {}
    txn.rollback()


def test_concurrent_increments_redo_instead_of_abort(lh):
    t1, t2 = lh.begin(LV), lh.begin(LV)
    add_kv(t1, "kv", 1, 1)
    add_kv(t2, "kv", 1, 1)  # placed behind t1's marker: logical sublog
    waiting = threading.Event()
    t2.events.subscribe(lambda e: waiting.set() if isinstance(e, ev.Waiting) else None)
    fut = t2.commit_async()
    assert waiting.wait(timeout=30)  # t2's commit waits for t1, which is still active
    r1 = t1.commit()
    r2 = fut.result(timeout=30)
    assert r2.versions["kv"] > r1.versions["kv"]
    assert r2.redo_count == 1 and r1.redo_count == 0
    assert committed_kv(lh, "kv")[1] == 12.0
    kinds = _kinds(t2)
    assert "Waiting" in kinds and "ConflictFound" in kinds and "Redo" in kinds
    sub = [e for e in t2.events.history if isinstance(e, ev.OperationDone)]
    assert sub[0].sublog == "logical"
    assert [e for e in t1.events.history if isinstance(e, ev.OperationDone)][0].sublog == "physical"


def test_non_conflicting_predecessor_costs_no_redo(lh):
    t1, t2 = lh.begin(LV), lh.begin(LV)
    add_kv(t1, "kv", 1, 1)
    # t2 only appends (blind): never conflicts
    t2.execute(ops.append("kv", pa.table({"id": pa.array([3], pa.int64()), "val": [30.0]})))
    fut = t2.commit_async()
    t1.commit()
    assert fut.result(timeout=30).redo_count == 0
    assert committed_kv(lh, "kv") == {1: 11.0, 2: 20.0, 3: 30.0}


def test_sublog_entries_record_files_and_compensation(lh):
    t1, t2 = lh.begin(LV), lh.begin(LV)
    add_kv(t1, "kv", 1, 1)
    add_kv(t2, "kv", 2, 1)
    # t1 holds the only marker before its files: they need no entry (the marker protects them, their
    # names identify them); t2 runs behind t1's marker: its entry records the statement to redo
    assert list(lh.store.list(layout.sublog_prefix(t1.id))) == []
    e2 = json.loads(lh.store.get(layout.sublog_key(t2.id, 0)).data)
    assert e2["mode"] == "logical" and "UPDATE kv" in e2["logical"]["sql"]
    assert e2["compensation"]["remove"]["kv"] == e2["adds"]["kv"]
    assert e2["compensation"]["add"]["kv"] == e2["removes"]["kv"]
    t1.commit()
    t2.commit()


# ---------------------------------------------------------------- anomalies: LV prevents, delta shows


def _p4(lh, preset):
    """Lost update: two read-modify-write transactions on the same row, interleaved."""
    t1, t2 = lh.begin(preset), lh.begin(preset)
    v1 = read_kv(t1, "kv", 1)[1]
    v2 = read_kv(t2, "kv", 1)[1]
    write_kv(t1, "kv", 1, v1 + 1)
    write_kv(t2, "kv", 1, v2 + 1)
    committed = 0
    t1.commit()
    committed += 1
    try:
        t2.commit()
        committed += 1
    except TransactionAborted as e:
        assert e.rule == "exposed_read"
    return committed, committed_kv(lh, "kv")[1]


def test_p4_lost_update_prevented(lh):
    committed, final = _p4(lh, LV)
    assert final == 10.0 + committed  # every committed increment is there


def test_p4_lost_update_shows_under_delta(lh):
    committed, final = _p4(lh, "delta")
    assert committed == 2 and final == 11.0  # two increments committed, one lost


def _g1a(lh, preset):
    t1, t2 = lh.begin(preset), lh.begin(preset)
    write_kv(t1, "kv", 1, 99)
    seen = read_kv(t2, "kv", 1)[1]
    t1.rollback()
    t2.commit()
    return seen, committed_kv(lh, "kv")[1]


def test_g1a_aborted_read_prevented(lh):
    assert _g1a(lh, LV) == (10.0, 10.0)


def test_g1a_aborted_read_shows_under_delta(lh):
    seen, final = _g1a(lh, "delta")
    assert seen == 99.0 and final == 99.0  # read (and kept) a write its transaction rolled back


def _g1b(lh, preset):
    t1, t2 = lh.begin(preset), lh.begin(preset)
    write_kv(t1, "kv", 1, 50)
    seen = read_kv(t2, "kv", 1)[1]
    write_kv(t1, "kv", 1, 60)
    t1.commit()
    try:
        t2.commit()
    except TransactionAborted as e:
        assert e.rule == "exposed_read"  # it read the pre-T1 state but would serialise after T1
    return seen


def test_g1b_intermediate_read_prevented(lh):
    assert _g1b(lh, LV) == 10.0  # never the intermediate 50


def test_g1b_intermediate_read_shows_under_delta(lh):
    assert _g1b(lh, "delta") == 50.0


def _otv(lh, preset):
    """Observed transaction vanishes (Hermitage): T3 must not see x from T1 and y from T2."""
    t1, t2, t3 = lh.begin(preset), lh.begin(preset), lh.begin(preset)
    write_kv(t1, "kv", 1, 11)
    write_kv(t1, "kv", 2, 19)
    t1.commit()
    write_kv(t2, "kv", 2, 18)
    x = read_kv(t3, "kv", 1)[1]
    write_kv(t2, "kv", 1, 12)
    t2.commit()
    y = read_kv(t3, "kv", 2)[2]
    outcome = "committed"
    try:
        t3.commit()
    except TransactionAborted as e:
        outcome = e.rule
    return (x, y), outcome


def test_otv_prevented(lh):
    (x, y), outcome = _otv(lh, LV)
    assert (x, y) == (11.0, 19.0)  # one consistent state
    assert outcome in ("committed", "exposed_read")


def test_otv_shows_under_delta(lh):
    (x, y), _ = _otv(lh, "delta")
    assert (x, y) == (11.0, 18.0)


def test_delta_reader_only_sees_committed_states(tmp_path):
    """Every version a plain Delta reader can load is a valid table with the total conserved (LV);
    the same transfers under the delta baseline leave versions with a broken total."""
    import deltalake

    def run(preset: str) -> list[float]:
        lh = lv_core.connect(str(tmp_path / preset))
        make_kv(lh, "kv", {1: 100.0, 2: 100.0})
        stop = threading.Event()
        seen: list[float] = []

        def poll() -> None:
            while not stop.is_set():
                t = deltalake.DeltaTable(lh.store.url("kv")).to_pyarrow_table()
                seen.append(sum(t["val"].to_pylist()))

        reader = threading.Thread(target=poll)
        reader.start()
        for _ in range(6):
            txn = lh.begin(preset)
            add_kv(txn, "kv", 1, -10)
            add_kv(txn, "kv", 2, +10)
            txn.commit()
        stop.set()
        reader.join()
        latest = deltalake.DeltaTable(lh.store.url("kv")).version()
        totals = [sum(deltalake.DeltaTable(lh.store.url("kv"), version=v).to_pyarrow_table()["val"].to_pylist())
                  for v in range(3, latest + 1)]
        assert seen, "the polling reader never loaded the table"
        return totals + seen

    assert set(run(LV)) == {200.0}
    assert any(t != 200.0 for t in run("delta"))


def test_foreign_checkpoint_while_a_marker_is_pending_cannot_hide_the_commit(lh):
    """Markers live beside the log: a checkpoint a plain Delta writer takes while our marker is pending
    covers only versions below it, so the commit lands at the marker's version and every reader sees it."""
    import deltalake

    txn = lh.begin(LV)
    add_kv(txn, "kv", 1, 5)
    v = txn.marker_versions()["kv"]
    dt = deltalake.DeltaTable(lh.store.url("kv"))
    assert dt.version() == v - 1  # the pending marker is not a version of the log
    dt.create_checkpoint()  # a plain Delta writer checkpoints
    res = txn.commit()
    assert res.versions["kv"] == v
    assert "MarkerLost" not in _kinds(txn)
    assert committed_kv(lh, "kv") == {1: 15.0, 2: 20.0}
    assert deltalake.DeltaTable(lh.store.url("kv")).version() == v
    fresh = lv_core.connect(lh.store.url())
    assert fresh.snapshot("kv").version == res.versions["kv"]


def test_request_counts_per_transaction(tmp_path):
    """Exact requests of a warm single-table transaction on the instrumented store.

    read-only: 1 PUT-create marker (beside the log) + 1 HEAD (the log does not hold the marker's version
    already) + 1 GET previous version (resolved view) + 2 GET data files + 1 PUT-create of the marker's
    version in the log (an empty commit); no heartbeat object (short-lived), no sublog.
    write (update of one row): the same, but the marker's version in the log gets the commit and the
    new data file costs 1 PUT-create (no sublog entry: the marker covers it); no GET of
    ``_last_checkpoint`` (a checkpoint can no longer cover a pending marker: markers are not in the log).
    """
    from lv_core import Lakehouse
    from lv_core.storage.instrumented import InstrumentedStore

    st = InstrumentedStore(lv_core.connect(str(tmp_path)).store)
    lh = Lakehouse(st)
    make_kv(lh, "kv", {1: 1.0, 2: 2.0})
    warm = lh.begin(LV)
    read_kv(warm, "kv")
    warm.commit()
    drain(60.0)
    st.reset()
    r = lh.begin(LV)
    read_kv(r, "kv")
    res = r.commit()
    drain(60.0)
    # a read-only transaction: marker placed (PUT-create, HEAD of the log), read, marker version written
    # into the log as an empty commit; no sublog (nothing staged), no heartbeat object (short-lived)
    assert st.counts() == {"GET": 3, "PUT": 0, "PUT-create": 2, "PUT-if-match": 0, "HEAD": 1, "DELETE": 0, "LIST": 0,
                           "COPY": 0}
    assert res.requests == {k: v for k, v in st.counts().items() if v}  # the transaction counts its own
    assert [e.counts for e in r.events.history if isinstance(e, ev.Requests)] == [res.requests]
    drain(60.0)
    st.reset()
    w = lh.begin(LV)
    add_kv(w, "kv", 1, 1)  # reads both files (scan), rewrites one
    w.commit()
    drain(60.0)
    # + the rewritten file (PUT-create); no sublog entry (the marker covers the file)
    assert st.counts() == {"GET": 3, "PUT": 0, "PUT-create": 3, "PUT-if-match": 0, "HEAD": 1, "DELETE": 0, "LIST": 0,
                           "COPY": 0}


def test_lost_marker_is_reclaimed_and_the_owner_continues(tmp_path):
    from lv_core.protocol.lease import keeper, lease_expired

    lh = lv_core.connect(str(tmp_path), lease_s=0.5)
    make_kv(lh, "kv", {1: 10.0, 2: 20.0})
    t1 = lh.begin(LV)
    add_kv(t1, "kv", 1, 1)
    v1 = t1.marker_versions()["kv"]
    keeper().pause(t1.id)  # t1 hangs: its lease runs out
    while not lease_expired(lh.store, t1.id, None):
        time.sleep(0.05)
    t2 = lh.begin(LV)
    add_kv(t2, "kv", 2, 1)
    r2 = t2.commit()  # frees t1's expired marker instead of waiting forever
    assert read_version(lh.store, "kv", v1).kind == "freed"
    assert any(isinstance(e, ev.MarkerFreed) and e.by == t2.id for e in t2.events.history)
    r1 = t1.commit()  # t1 comes back: its overwrite fails, it claims a new marker and continues
    assert r1.versions["kv"] > r2.versions["kv"] > v1
    assert "MarkerLost" in _kinds(t1)
    assert committed_kv(lh, "kv") == {1: 11.0, 2: 21.0}


def test_a_stale_claimer_reads_forward_instead_of_walking(tmp_path):
    """Others claimed ten versions past a client's hint: after losing two races it lists the claims
    (1 LIST) and takes the version above the highest, instead of ten more PUT-create + HEAD rounds."""
    from lv_core.delta import create_table
    from lv_core.protocol.markers import MarkerInfo, place_marker
    from lv_core.storage.instrumented import InstrumentedStore

    st = InstrumentedStore(lv_core.connect(str(tmp_path)).store)
    create_table(st, "t", "id BIGINT")
    for k in range(10):
        assert place_marker(st, "t", 1, MarkerInfo(f"other{k}"))[0] == 1 + k
    st.reset()
    v, _etag, attempts = place_marker(st, "t", 1, MarkerInfo("late"))
    c = st.counts()
    assert (v, attempts) == (11, 3) and c["LIST"] == 1 and c["PUT-create"] == 3 and c["HEAD"] == 3
