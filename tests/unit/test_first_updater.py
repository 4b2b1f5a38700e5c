"""Issue 19: first updater wins across markers (Hermitage G-single-write-2 on one table).

Markers order the transactions of a table by their first write. When a transaction queued behind
ours already rewrote rows our operation now rewrites, and a result it returned depends on data we
changed, one of the two must abort; PostgreSQL aborts the later updater, and so do we (before, the
earlier updater aborted at its commit with ``exposed_read``). When the queued transaction can still
be redone after us, nobody aborts.
"""

from __future__ import annotations

import json

import pytest

import lv_core
from lv_core.errors import TransactionAborted
from lv_core.protocol import layout
from lv_core.protocol.conflicts import first_updater
from lv_core.protocol.markers import Footprint, MarkerInfo, classify, encode_marker
from lv_core.txn.core import FOOTPRINT_MAX
from tests.helpers import oracle as O
from tests.reliability.anomalies import BY_NAME, Anomaly, C, Form, run_case, setup_tables

# ------------------------------------------------------------------------------------------ pure


def test_first_updater_needs_a_file_both_rewrote_and_a_doomed_read():
    ours = {"t": {"x.parquet", "y.parquet"}}
    theirs_reads = {"t": {"x.parquet"}}
    hit = first_updater("t", {"y.parquet"}, ours, theirs_reads, {"t": {"y.parquet"}}, "T1", 5)
    assert hit is not None and hit.files == ("y.parquet",) and hit.doomed_by == ("t/x.parquet",)
    assert hit.txn == "T1" and hit.version == 5
    # they rewrote something else: no row both updated
    assert first_updater("t", {"y.parquet"}, ours, theirs_reads, {"t": {"z.parquet"}}, "T1", 5) is None
    # nothing they returned depends on what we rewrote: they can be redone after us
    assert first_updater("t", {"y.parquet"}, ours, {"t": {"z.parquet"}}, {"t": {"y.parquet"}}, "T1", 5) is None
    # the same file name on another table is another file
    assert first_updater("t", {"y.parquet"}, ours, {"u": {"x.parquet"}}, {"t": {"y.parquet"}}, "T1", 5) is None


def test_footprint_round_trips_through_the_marker_and_tolerates_garbage():
    fp = Footprint({"t": frozenset({"a.parquet"})}, {"t": frozenset({"b.parquet"}), "u": frozenset()})
    raw = encode_marker(MarkerInfo(txn="T1", footprint=fp))
    st = classify(3, raw, "e", filled=False)
    assert st.pending and st.marker is not None
    assert st.marker.footprint == Footprint({"t": frozenset({"a.parquet"})}, {"t": frozenset({"b.parquet"})})
    assert classify(3, encode_marker(MarkerInfo(txn="T1")), "e", filled=False).marker.footprint is None  # type: ignore[union-attr]
    for bad in ([], {"reads": []}, {"reads": {"t": "a"}}, {"removes": {"t": [1]}}):
        assert Footprint.from_json(bad) is None


# ------------------------------------------------------------------------------------------ schedules


def _run(tmp_path, steps, config: str = "serializable"):
    r = run_case(str(tmp_path), Anomaly("case", "", ("x", "y"), steps), "ST", config)
    assert r.ok, r.describe()
    return {t.name: t.outcome for t in r.history}, r


def test_g_single_write_2_aborts_the_later_updater_like_postgresql(tmp_path):
    out, r = _run(tmp_path, BY_NAME["G-single-write-2"].schedule)
    assert out == {"T1": "committed", "T2": "conflict"}, r.describe()
    assert r.final == {"t": [(1, 10.0)]}  # T1's delete of y; T2's writes gone


def test_the_earlier_updater_keeps_going_when_it_wrote_first(tmp_path):
    """T2 rewrites y before T1 deletes it: T1 is the later updater and aborts (PostgreSQL: T1 blocks on
    T2's row lock, then fails)."""
    def steps(F: Form):
        return [("T1", F.r("x")), ("T2", F.scan()), ("T2", F.w("x", 12)), ("T2", F.w("y", 18)),
                ("T1", F.delete(O.eq(20))), ("T2", C), ("T1", C)]

    out, r = _run(tmp_path, steps)
    assert out == {"T1": "exposed_read", "T2": "committed"}, r.describe()


def test_nobody_aborts_when_the_queued_transaction_can_be_redone(tmp_path):
    """T1 returned nothing T2 changed: T2 commits first and T1 redoes its delete on T2's rows."""
    def steps(F: Form):
        return [("T2", F.scan()), ("T2", F.w("x", 12)), ("T1", F.delete(O.eq(20))), ("T2", F.w("y", 18)),
                ("T2", C), ("T1", C)]

    out, r = _run(tmp_path, steps)
    assert out == {"T1": "committed", "T2": "committed"}, r.describe()
    assert r.final == {"t": [(1, 12.0), (2, 18.0)]}


def test_snapshot_isolation_keeps_the_old_order(tmp_path):
    """The check belongs to the policies with file-level R1; under snapshot the earlier updater still fails."""
    out, r = _run(tmp_path, BY_NAME["G-single-write-2"].schedule, "snapshot")
    assert out["T2"] == "committed" and out["T1"] != "committed", r.describe()


def test_the_abort_names_the_first_updater_and_its_marker_carries_the_footprint(tmp_path):
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05, shift_after_s=2.0)
    F = Form("ST", ("x", "y"))
    setup_tables(lh, F.initial())
    t1 = lh.begin("serializable", name="T1")
    t2 = lh.begin("serializable", name="T2")
    O.run_op(t1, F.r("x")[0])
    O.run_op(t2, F.scan()[0])
    O.run_op(t2, F.w("x", 12)[0])
    O.run_op(t1, F.delete(O.eq(20))[0])
    v1 = t1.marker_versions()["t"]
    lv = json.loads(lh.store.get(layout.marker_key("t", v1)).data)["commitInfo"]["lakevilla"]
    assert lv["footprint"]["removes"]["t"] and lv["footprint"]["reads"]["t"]
    before = t2.requests().get("GET", 0)
    with pytest.raises(TransactionAborted) as e:
        O.run_op(t2, F.w("y", 18)[0])
    assert e.value.rule == "conflict" and t1.id in str(e.value) and "first updater" in str(e.value)
    assert t2.state == "aborted"
    assert t2.requests().get("GET", 0) - before <= 4  # the op's data reads and the marker above it
    t1.commit()
    assert O.table_rows(lh.store.url("t")) == [(1, 10.0)]
    lh.close()


def test_a_huge_footprint_is_left_out(tmp_path):
    lh = lv_core.connect(str(tmp_path / "wh"))
    t = lh.begin("serializable")
    from lv_core.txn.ops import Operation, OpResult

    many = {f"f{i}.parquet" for i in range(FOOTPRINT_MAX + 1)}
    t.core.book.claiming = (Operation("read", ("t",), lambda ctx: OpResult(), exposed=True),
                            OpResult(reads={"t": many}))
    assert t.core.marker_info().footprint is None
    t.core.book.claiming = None
    assert t.core.marker_info().footprint == Footprint({}, {})
    t.rollback()
    lh.close()
