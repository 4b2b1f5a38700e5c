"""Module #4.2: rules R1-R3 (pure) and the probe of table logs beyond the global log (hidden versions)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lv_core.delta import CommitInfo, DeltaLog, commit, create_table, write_data_files
from lv_core.errors import ConfigError, TransactionAborted
from lv_core.protocol.gvl import EMPTY, GlobalLog, GvlState
from lv_core.protocol.hidden import collect, needs_tail, probe_tail
from lv_core.protocol.markers import MarkerInfo, free_marker, place_marker, read_version
from lv_core.protocol.validation import (
    SERIALIZABLE,
    SNAPSHOT,
    WRITE_SERIALIZABLE,
    LogTail,
    Policy,
    TableAccess,
    TableInputs,
    derive,
    r1_outdated_read,
    r2_version_taken,
    r3_lost_update,
    validate,
)
from lv_core.storage.base import ObjectStore
from lv_core.storage.instrumented import InstrumentedStore


def inputs(table: str = "t", *, r: int | None = 5, h: int | None = 5, w: int | None = None, l: int | None = 5,
           written_logs: int = 0, read: bool = True, blind: bool = False, top: int | None = None) -> TableInputs:
    return TableInputs(table, read, w is not None, blind, r, h, w, l, written_logs, top if top is not None else h)


# ------------------------------------------------------------------------------------------ rules
def test_rule_functions() -> None:
    assert r1_outdated_read(3, 5) and not r1_outdated_read(5, 5) and not r1_outdated_read(6, 5)
    assert not r1_outdated_read(3, 5, slack=2) and r1_outdated_read(3, 5, slack=1)
    assert r2_version_taken(5, 5) and r2_version_taken(4, 5) and not r2_version_taken(6, 5)
    assert r3_lost_update(4, 0, 6) and not r3_lost_update(4, 1, 6) and not r3_lost_update(5, 0, 6)


def test_r1_fires_on_an_outdated_read_and_not_on_a_current_one() -> None:
    out = validate([inputs(r=3, h=5)])
    assert not out.compatible and out.rule == "R1" and out.table == "t"
    rule = out.tables["t"].rules["R1"]
    assert rule.applies and not rule.passed and rule.detail == "r=3 < h-slack=5"
    assert "read at version 3" in out.reason and "version 5 is committed" in out.reason
    err = out.to_abort()
    assert isinstance(err, TransactionAborted) and err.rule == "R1" and err.reason == out.reason
    assert err.details["validation"]["tables"]["t"]["r"] == 3
    json.dumps(err.details)  # data a widget can ship as is

    ok = validate([inputs(r=5, h=5)])
    assert ok.compatible and ok.rule is None and ok.tables["t"].rules["R1"].detail == "r=5 >= h-slack=5"
    with pytest.raises(ValueError):
        ok.to_abort()


def test_slack_lets_a_stale_read_pass() -> None:
    assert validate([inputs(r=3, h=5)], Policy(slack=2)).compatible
    out = validate([inputs(r=3, h=5)], Policy(slack=1))
    assert out.rule == "R1" and "slack of 1" in out.reason
    assert Policy.for_preset("serializable", slack=2) == Policy(slack=2, r1_files=True, snapshot_read_only=True)


def test_r2_fires_when_the_write_version_is_taken() -> None:
    out = validate([inputs(r=4, h=5, w=5, l=4, written_logs=0, read=False)])  # written, not read, not blind
    assert out.rule == "R2" and out.tables["t"].rules["R2"].detail == "w=5 <= h=5"
    assert not out.tables["t"].rules["R1"].applies
    both = validate([inputs(r=4, h=5, w=5, l=4, written_logs=0)])  # read too: R1 fires first
    assert both.rule == "R1" and not both.tables["t"].rules["R2"].passed
    out = validate([inputs(r=4, h=5, w=5, l=4, written_logs=0)], SNAPSHOT)
    assert out.rule == "R2" and "version 5 of table 't'" in out.reason and out.to_abort().rule == "R2"
    ok = validate([inputs(r=5, h=5, w=6, l=5, written_logs=0)])
    assert ok.compatible and ok.tables["t"].rules["R2"].detail == "w=6 > h=5"


def test_r3_fires_on_a_lost_update() -> None:
    # The log moved to 4 (a validated write at 4); the transaction writes 6, believing one log (5) between.
    out = validate([inputs(r=5, h=5, w=6, l=3, written_logs=1)], SNAPSHOT)
    assert out.rule == "R3" and out.tables["t"].rules["R3"].detail == "l+written_logs+1=3+1+1=5 != w=6"
    assert "lost update" in out.reason and out.to_abort().rule == "R3"
    ok = validate([inputs(r=5, h=5, w=6, l=4, written_logs=1)], SNAPSHOT)
    assert ok.compatible and ok.tables["t"].rules["R3"].passed


def test_snapshot_isolation_does_not_check_r1() -> None:
    out = validate([inputs(r=1, h=9)], SNAPSHOT)
    assert out.compatible
    r1 = out.tables["t"].rules["R1"]
    assert not r1.applies and r1.detail == "snapshot isolation"
    assert Policy.for_preset("snapshot") == SNAPSHOT


def test_write_serializable_lets_read_only_transactions_pass() -> None:
    stale = inputs("a", r=1, h=9)
    ro = validate([stale], WRITE_SERIALIZABLE)
    assert ro.compatible and ro.tables["a"].rules["R1"].detail == "read-only transaction"
    rw = validate([stale, inputs("b", r=5, h=5, w=6, l=5, read=False)], WRITE_SERIALIZABLE)
    assert rw.rule == "R1" and rw.table == "a"
    assert Policy.for_preset("write_serializable") == WRITE_SERIALIZABLE
    with pytest.raises(ConfigError):
        Policy.for_preset("nope")


def test_blind_append_takes_the_next_free_version() -> None:
    # Planned at 5 (read base 4) but the log is at 6 and version 7 exists: R2 and R3 would fire.
    blind = inputs(r=4, h=7, w=5, l=6, read=False, blind=True, top=7)
    out = validate([blind], SERIALIZABLE)
    v = out.tables["t"]
    assert out.compatible and v.moved_from == 5 and v.w == 8 and v.written_logs == 1
    assert out.write_versions() == {"t": 8}
    not_blind = validate([inputs(r=4, h=7, w=5, l=6, read=False, top=7)], SNAPSHOT)
    assert not_blind.rule == "R3" and not not_blind.tables["t"].rules["R2"].passed  # both fire: lost update


def test_a_table_new_to_the_log_is_always_compatible() -> None:
    out = validate([inputs("new", r=2, h=None, l=None), inputs("w", r=0, h=9, w=3, l=None, read=False)])
    assert out.compatible and out.tables["new"].new_table and out.tables["w"].new_table
    assert not any(c.applies for c in out.tables["new"].rules.values())
    assert out.additions() == {"new": 2} and out.write_versions() == {"w": 3}


def test_first_failure_in_table_order_names_the_outcome() -> None:
    out = validate([inputs("a"), inputs("b", r=1, h=4), inputs("c", r=1, h=9)])
    assert out.rule == "R1" and out.table == "b"
    assert [t for t, v in out.tables.items() if not v.compatible] == ["b", "c"]


# ------------------------------------------------------------------------------------------ derive (pure)
def test_derive_without_marker_moves_past_versions_unknown_to_the_log() -> None:
    # log at 5, read at 5; beyond it a foreign commit (6), a pending marker (7), a freed marker (8).
    tail = LogTail(5, ("commit", "marker", "freed"))
    inp = derive(TableAccess("t", read=True, written=True, read_version=5), 5, tail)
    assert (inp.r, inp.h, inp.w, inp.l, inp.written_logs, inp.top) == (5, 6, 9, 5, 3, 8)
    assert inp.foreign == (6,) and inp.pending == (7,)
    assert validate([inp], SERIALIZABLE).rule == "R1"  # the foreign commit changed what it read
    assert validate([inp], SNAPSHOT).compatible
    # pending and freed markers alone are no newer data
    inp = derive(TableAccess("t", read=True, written=True, read_version=5), 5, LogTail(5, ("marker", "freed")))
    assert (inp.h, inp.w, inp.written_logs) == (5, 8, 2) and validate([inp]).compatible


def test_derive_without_marker_when_the_log_moved_past_the_read() -> None:
    inp = derive(TableAccess("t", read=True, written=True, read_version=3), 5, LogTail(5, ()))
    assert (inp.r, inp.h, inp.w, inp.l, inp.written_logs) == (3, 5, 4, 5, 0)
    out = validate([inp], SNAPSHOT)
    assert out.rule == "R3" and out.tables["t"].rules["R2"].passed is False
    blind = derive(TableAccess("t", written=True, read_version=3), 5, LogTail(5, ()))
    out = validate([blind], SNAPSHOT)
    assert out.compatible and out.write_versions() == {"t": 6}


def test_derive_with_marker() -> None:
    # marker at 8, log at 5: versions 6, 7 are resolved (counted), nothing after the marker.
    inp = derive(TableAccess("t", read=True, written=True, marker=8), 5, LogTail(8, ()))
    assert (inp.r, inp.h, inp.w, inp.l, inp.written_logs) == (7, 7, 8, 5, 2)
    assert validate([inp]).compatible
    # a plain writer committed after the marker (9), ignoring it: version order no longer holds.
    inp = derive(TableAccess("t", read=True, written=True, marker=8), 5, LogTail(8, ("commit",)))
    assert inp.h == 9 and validate([inp]).rule == "R1" and validate([inp], SNAPSHOT).rule == "R2"
    # a marker-less writer moved past the pending marker and was validated at 10: R3.
    inp = derive(TableAccess("t", read=True, written=True, marker=8), 10, LogTail(10, ()))
    assert (inp.w, inp.l, inp.written_logs) == (8, 10, 0)
    assert validate([inp], SNAPSHOT).rule == "R3" and validate([inp], SNAPSHOT).tables["t"].rules["R2"].passed is False
    blind = derive(TableAccess("t", written=True, marker=8), 10, LogTail(10, ()))
    assert validate([blind]).write_versions() == {"t": 11}


def test_derive_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match="no read version"):
        derive(TableAccess("t", read=True), 5, LogTail(5))
    with pytest.raises(ValueError, match="log tail is needed"):
        derive(TableAccess("t", written=True, read_version=5), 5, None)
    with pytest.raises(ValueError, match="must start at the log version"):
        derive(TableAccess("t", read=True, read_version=5), 4, LogTail(5))


def test_needs_tail() -> None:
    ro = TableAccess("t", read=True, read_version=3)
    assert needs_tail(ro, 3, SERIALIZABLE, txn_writes=False)
    assert not needs_tail(ro, 3, SNAPSHOT, txn_writes=True)
    assert not needs_tail(ro, 3, WRITE_SERIALIZABLE, txn_writes=False)
    assert needs_tail(ro, 3, WRITE_SERIALIZABLE, txn_writes=True)
    assert not needs_tail(ro, None, SERIALIZABLE, txn_writes=True)
    assert needs_tail(TableAccess("t", written=True, read_version=3), None, SNAPSHOT, txn_writes=True)
    assert not needs_tail(TableAccess("t", written=True, marker=4), None, SNAPSHOT, txn_writes=True)


# ------------------------------------------------------------------------------------------ probing real logs
def _append(store: ObjectStore, table: str, rows: list[int]) -> int:
    log = DeltaLog(store, table)
    snap = log.snapshot(method="probe")
    adds = write_data_files(store, table, snap, pa.table({"id": rows}))
    commit(store, table, snap.version + 1, [CommitInfo.create("WRITE", {"mode": "Append"}), *adds])
    return snap.version + 1


def test_plain_delta_writer_behind_the_log_is_detected_and_counted(store: ObjectStore) -> None:
    create_table(store, "acct", "id BIGINT")
    _append(store, "acct", [1])
    gvl = GlobalLog(store).publish(EMPTY, {"acct": 1}, "t-setup")
    # a plain Delta writer (delta-rs) appends twice, ignoring the global log
    opts = store.storage_options_for_deltalake()
    for i in (2, 3):
        write_deltalake(store.url("acct"), pa.table({"id": [i]}), mode="append", storage_options=opts or None)
    assert DeltaLog(store, "acct").latest_version_by_probe(1) == 3

    inst = InstrumentedStore(store)
    (rw,) = collect(inst, gvl, [TableAccess("acct", read=True, written=True, read_version=1)], SERIALIZABLE)
    assert (rw.r, rw.h, rw.w, rw.l, rw.written_logs, rw.foreign) == (1, 3, 4, 1, 2, (2, 3))
    # 2, 3, then 4 is free: neither in the log nor reserved by a marker object (2 GETs)
    assert inst.counts()["GET"] == 4 and inst.total() == 4 and inst.counts()["LIST"] == 0
    out = validate([rw], SERIALIZABLE)
    assert out.rule == "R1" and out.table == "acct" and "read at version 1" in out.reason
    assert validate([rw], SNAPSHOT).compatible  # SI: moves to 4 and counts the unknown logs
    assert validate([rw], SNAPSHOT).write_versions() == {"acct": 4}
    # a blind append of the same table passes any preset
    (blind,) = collect(store, gvl, [TableAccess("acct", written=True, read_version=1)], SERIALIZABLE)
    assert validate([blind]).compatible and validate([blind]).write_versions() == {"acct": 4}


def test_markers_occupy_versions_but_are_not_commits(store: ObjectStore) -> None:
    create_table(store, "t", "id BIGINT")
    gvl = GlobalLog(store).publish(EMPTY, {"t": 0}, "t-setup")
    v1, _, _ = place_marker(store, "t", 1, MarkerInfo("other-pending"))
    v2, etag, _ = place_marker(store, "t", 1, MarkerInfo("other-freed"))
    free_marker(store, "t", read_version(store, "t", v2), "rollback")
    assert (v1, v2) == (1, 2)
    (inp,) = collect(store, gvl, [TableAccess("t", read=True, written=True, read_version=0)], SERIALIZABLE)
    assert (inp.h, inp.w, inp.written_logs, inp.pending, inp.foreign) == (0, 3, 2, (1,), ())
    assert validate([inp]).compatible


def test_marker_transactions_probe_only_after_their_marker(store: ObjectStore) -> None:
    create_table(store, "a", "id BIGINT")
    create_table(store, "b", "id BIGINT")
    for _ in range(3):
        _append(store, "a", [1])
    gvl = GlobalLog(store).publish(EMPTY, {"a": 1, "b": 0}, "t-setup")
    mv, _, _ = place_marker(store, "a", 4, MarkerInfo("me"))
    assert mv == 4
    inst = InstrumentedStore(store)
    accesses = [TableAccess("a", read=True, written=True, marker=4), TableAccess("b", read=True, read_version=0)]
    a, b = collect(inst, gvl, accesses, SERIALIZABLE, own_txn="me")
    assert (a.r, a.h, a.w, a.l, a.written_logs) == (3, 3, 4, 1, 2)
    assert (b.r, b.h, b.l) == (0, 0, 0)
    # a: the marker's own version 4 (not taken: 1 log miss), then the log's tail at 5 (1 miss: markers
    # above our own do not matter); b (only read): the log's tail at 1 (1 miss)
    assert inst.counts()["GET"] == 3 and inst.total() == 3
    assert validate([a, b]).compatible
    inst.reset()
    collect(inst, gvl, accesses, SNAPSHOT, own_txn="me")  # SI: the read-only table is not probed
    assert inst.total() == 2  # a only


def test_unknown_tables_cost_nothing_to_read_and_are_added(store: ObjectStore) -> None:
    create_table(store, "new", "id BIGINT")
    _append(store, "new", [1])
    inst = InstrumentedStore(store)
    gvl = GvlState(3, {"other": 7})
    (inp,) = collect(inst, gvl, [TableAccess("new", read=True, read_version=1)], SERIALIZABLE)
    assert inst.total() == 0 and inp.l is None
    out = validate([inp])
    assert out.compatible and out.additions() == {"new": 1}
    # written without marker: probed from its read version to find the next free version
    _append(store, "new", [2])
    (w,) = collect(inst, gvl, [TableAccess("new", written=True, read_version=1)], SERIALIZABLE)
    assert w.w == 3 and validate([w]).write_versions() == {"new": 3}
    assert probe_tail(store, "new", 0).kinds == ("commit", "commit")
