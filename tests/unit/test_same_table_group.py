"""Same-table group commit (issue 38): writers of one table queue before their predecessors resolved, and a
holder commits those it can certify after its own entry, in marker order, in one global version."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pyarrow.compute as pc
import pytest

import lv_core
from lv_core import Lakehouse
from lv_core.delta import create_table
from lv_core.delta.actions import AddFile, RemoveFile
from lv_core.delta.schema import DeltaSchema
from lv_core.engine.arrow_io import read_data_files
from lv_core.engine.skipping import FileFilter, file_filter
from lv_core.protocol import samegroup as sg
from lv_core.protocol.commitplan import (
    CREATE_MODE,
    OVERWRITE_MARKER,
    InvalidPlan,
    PlannedCommit,
    check_plan,
    execute_plan,
    parse_group,
)
from lv_core.protocol.conflicts import OpFootprint, PredecessorCommit
from lv_core.protocol.gvl import EMPTY, GlobalLog, GvlState
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import MarkerInfo, place_marker
from lv_core.protocol.validation import Policy, TableAccess
from lv_core.protocol.vlock import COMMITTING, LOCK_KEY, LockRecord, ValidationLock
from lv_core.protocol.vqueue import VQ_PREFIX, Request, RequestCommit
from lv_core.storage.base import CREATE, ObjectStore
from lv_core.txn.ops import Operation, OpResult
from tests.helpers.bank import add_kv, committed_kv, make_kv
from tests.unit.test_vlock import commit_bytes, rows

pytestmark = pytest.mark.timeout(120)

SCHEMA = DeltaSchema.from_json({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})


def _file(path: str, lo: int, hi: int) -> AddFile:
    return AddFile(path=path, partition_values={}, size=1, modification_time=0, data_change=True,
                   stats=json.dumps({"numRecords": 1, "minValues": {"id": lo}, "maxValues": {"id": hi},
                                     "nullCount": {"id": 0}}))


def _commit(table: str, version: int, txn: str, adds: list[AddFile] = (), removes: list[str] = ()) -> PredecessorCommit:
    return PredecessorCommit(table, version, txn, [*adds, *(RemoveFile(p, deletion_timestamp=0) for p in removes)])


def _cand(txn: str, marker: int, read: int, key: int, inside: tuple[int, ...] = (), reads: tuple[str, ...] = ()) \
        -> sg.Candidate:
    op = OpFootprint(1, reads={"t": frozenset(reads)}, scans=frozenset({"t"}),
                     may_match={"t": file_filter(f"id = {key}", SCHEMA)})
    return sg.Candidate(txn, "t", marker, read, inside, (op,), _commit("t", marker, txn, [_file(f"{txn}.parquet",
                                                                                                 key, key)]))


# ------------------------------------------------------------------------------------ the pure decision
def test_members_join_in_marker_order_after_the_holders_entry() -> None:
    top = _commit("t", 5, "h", [_file("h.parquet", 9, 9)])
    log = {3: _commit("t", 3, "x", [_file("x.parquet", 7, 7)]), 4: _commit("t", 4, "y")}
    links = sg.chain(top, [_cand("c", 7, 4, 3), _cand("a", 6, 2, 1), _cand("b", 8, 5, 2)], log)
    assert [(ln.candidate.txn, ln.why) for ln in links] == [("a", None), ("c", None), ("b", None)]


def test_a_gap_stops_the_chain_there() -> None:
    top = _commit("t", 5, "h")
    links = sg.chain(top, [_cand("a", 6, 4, 1), _cand("b", 8, 4, 2)], {})
    assert links[0].why is None and links[1].why is not None and "not next" in links[1].why


def test_a_stale_request_below_the_holders_entry_stops_nothing() -> None:
    """A request still queued after its marker resolved below the holder's entry (its owner committed or
    moved on, the withdraw still in flight) is not after the holder: it is skipped, and the members after
    the holder still join (it used to stop the chain at once, being first in marker order)."""
    top = _commit("t", 5, "h")
    log = {3: _commit("t", 3, "s"), 4: _commit("t", 4, "y")}
    links = sg.chain(top, [_cand("s", 3, 2, 7), _cand("a", 6, 4, 1), _cand("b", 7, 4, 2)], log)
    assert [(ln.candidate.txn, ln.why is None) for ln in links] == [("s", False), ("a", True), ("b", True)]
    assert links[0].why is not None and "below the holder's entry" in links[0].why


def test_a_conflict_leaves_that_member_and_every_later_one_to_their_owners() -> None:
    top = _commit("t", 5, "h", [_file("h.parquet", 1, 1)])  # the holder added a file that may hold id 1
    links = sg.chain(top, [_cand("a", 6, 4, 1), _cand("b", 7, 4, 2)], {})
    assert links[0].why is not None and "conflicts with t@5" in links[0].why
    assert links[1].why is not None and links[1].why.startswith("after a@6")
    # a file it read, rewritten by an earlier member: the same
    a = _cand("a", 6, 4, 2)
    b = _cand("b", 7, 4, 3, reads=("old.parquet",))
    a = sg.Candidate(a.txn, a.table, a.marker, a.read, a.inside, a.footprints,
                     _commit("t", 6, "a", removes=["old.parquet"]))
    assert [ln.why is None for ln in sg.chain(_commit("t", 5, "h"), [a, b], {})] == [True, False]


def test_versions_it_did_not_read_are_certified_pending_ones_included_and_unknown_ones_stop_it() -> None:
    top = _commit("t", 5, "h")
    hit = {3: _commit("t", 3, "x", [_file("x.parquet", 1, 1)]), 4: _commit("t", 4, "y")}
    assert sg.chain(top, [_cand("a", 6, 2, 1)], hit)[0].why is not None  # version 3 (after its read) matches
    assert sg.chain(top, [_cand("a", 6, 3, 1)], hit)[0].why is None  # it read version 3
    assert sg.chain(top, [_cand("a", 6, 3, 1, inside=(3,))], hit)[0].why is not None  # read 3 as a pending marker
    assert "unknown" in (sg.chain(top, [_cand("a", 6, 3, 1)], {3: hit[3]})[0].why or "")  # 4 not resolved
    assert sg.needs(_cand("a", 6, 2, 1, inside=(1,)), 5) == {1, 3, 4}


def test_footprints_travel_as_data_and_a_predicate_that_is_not_a_filter_makes_a_request_owner_only() -> None:
    f = file_filter("id = 3", SCHEMA, [], {"id": "col-1"})
    g = FileFilter.from_spec(json.loads(json.dumps(f.spec())))
    assert g.where == "id = 3" and g.spec() == f.spec()
    op = OpFootprint(2, reads={"t": frozenset({"a"})}, removes={"t": frozenset({"a"})}, scans=frozenset({"t"}),
                     may_match={"t": file_filter("id = 3", SCHEMA)})
    (back,) = sg.decode_footprints(json.loads(json.dumps(sg.encode_footprints([op]))))
    assert (back.step, back.reads, back.removes, back.scans) == (op.step, op.reads, op.removes, op.scans)
    for fl in (_file("p", 3, 3), _file("q", 4, 9)):
        assert back.may_match["t"](fl) == op.may_match["t"](fl)
    assert sg.encode_footprints([OpFootprint(1, scans=frozenset({"t"}), may_match={"t": lambda a: True})]) is None


def _request(txn: str, table: str, marker: int, *, unsettled: Any = None, tables: tuple[str, ...] = ()) -> Request:
    accesses = (TableAccess(table, read=True, written=True, marker=marker),
                *(TableAccess(t, read=True) for t in tables))
    return Request(txn, 0, accesses, Policy(), {table: RequestCommit(b'{"commitInfo":{}}\n', {}, False)},
                   {table: (marker, "e")}, unsettled)


def test_candidates_are_one_table_requests_and_a_settled_one_read_below_its_marker() -> None:
    un = sg.unsettled(2, [1], [])
    got = sg.candidate(Request.decode(_request("a", "t", 6, unsettled=un).encode()))
    assert isinstance(got, sg.Candidate) and (got.marker, got.read, got.inside) == (6, 2, (1,))
    settled = sg.candidate(_request("b", "t", 6))
    assert isinstance(settled, sg.Candidate) and settled.read == 5 and settled.footprints == ()
    assert sg.candidate(_request("c", "t", 6, unsettled=un, tables=("u",))) == "not one table"
    assert sg.candidate(_request("d", "t", 6, unsettled=sg.unsettled(2, [], None))) == "owner only"
    assert sg.candidate(_request("e", "t", 6, unsettled=sg.unsettled(6, [], []))) == "malformed (versions)"


# ------------------------------------------------------------------------------------ plans of one table
def _table_a(store: ObjectStore) -> GvlState:
    create_table(store, "a", "id BIGINT")
    return GlobalLog(store).publish(EMPTY, {"a": 0}, "setup")


def _markers(store: ObjectStore, owners: list[str]) -> list[tuple[int, str]]:
    return [place_marker(store, "a", 2, MarkerInfo(m, lease_expires=time.time() + 60))[:2] for m in owners]


def _same_table_plan(store: ObjectStore) -> tuple[list[PlannedCommit], dict[str, Any]]:
    """The holder's commit at a@1, members m1 and m2 at their markers a@2 and a@3."""
    (v1, e1), (v2, e2) = _markers(store, ["m1", "m2"])
    assert (v1, v2) == (2, 3)
    plan = [PlannedCommit("a", 1, commit_bytes(store, "a", "holder", [1]), CREATE_MODE),
            PlannedCommit("a", 2, commit_bytes(store, "a", "m1", [2]), OVERWRITE_MARKER, e1),
            PlannedCommit("a", 3, commit_bytes(store, "a", "m2", [3]), OVERWRITE_MARKER, e2)]
    group = {"m1": {"tables": ["a"], "at": {"a": 2}, "validation": {"compatible": True}},
             "m2": {"tables": ["a"], "at": {"a": 3}, "validation": {"compatible": True}}}
    return plan, group


def test_a_same_table_group_is_written_in_marker_order_and_published_as_one_version(local_store: ObjectStore) -> None:
    base = _table_a(local_store)
    plan, group = _same_table_plan(local_store)
    res = execute_plan(local_store, GlobalLog(local_store), plan, txn="holder", gvl_base=base.version, base=base,
                       group=group)
    assert res.committed and res.versions == {"a": 1}
    assert res.group["m1"]["versions"] == {"a": 2} and res.group["m2"]["versions"] == {"a": 3}
    head = GlobalLog(local_store).head()
    assert dict(head.tables) == {"a": 3} and set(head.group) == {"m1", "m2"}
    assert rows(local_store, "a") == [1, 2, 3]


def test_a_member_after_an_entry_that_did_not_land_is_never_written(local_store: ObjectStore) -> None:
    base = _table_a(local_store)
    plan, group = _same_table_plan(local_store)
    local_store.put(commit_key("a", 2), commit_bytes(local_store, "a", "other", [9]), mode=CREATE)  # m1's taken
    res = execute_plan(local_store, GlobalLog(local_store), plan, txn="holder", gvl_base=base.version, base=base,
                       group=group)
    assert res.committed and res.group["m1"]["rule"] == "R2" and res.group["m2"]["rule"] == "R2"
    assert "did not land" in res.group["m2"]["reason"]
    assert not local_store.exists(commit_key("a", 3))  # certified after m1's commit, which is not there: not written
    head = GlobalLog(local_store).head()
    assert dict(head.tables) == {"a": 1}  # the holder's commit; never a version past one that is not its plan's
    assert rows(local_store, "a") == [1, 9]


def test_a_crashed_holders_same_table_group_is_rolled_forward_whole(local_store: ObjectStore) -> None:
    base = _table_a(local_store)
    plan, group = _same_table_plan(local_store)
    # the crashed holder wrote its own commit only
    local_store.put(commit_key("a", 1), plan[0].data, mode=CREATE)
    rec = LockRecord("holder", COMMITTING, 1.0, time.time() - 5, "dead:1", time.time() - 10, base.version,
                     tuple(plan), "holder", group=group)
    back = LockRecord.decode(rec.encode())
    assert back.group["m2"]["at"] == {"a": 3} and not back.invalid
    local_store.put(LOCK_KEY, rec.encode(), mode=CREATE)
    with ValidationLock(local_store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        (tk,) = held.takeovers
        assert tk.action == "rolled-forward" and tk.result is not None
    head = GlobalLog(local_store).head()
    assert dict(head.tables) == {"a": 3} and head.group["m2"]["versions"] == {"a": 3}
    assert rows(local_store, "a") == [1, 2, 3]


def test_several_entries_on_one_table_must_be_at_increasing_versions_and_named_by_version() -> None:
    data = b'{"commitInfo":{}}\n'
    with pytest.raises(InvalidPlan):
        check_plan([PlannedCommit("a", 2, data), PlannedCommit("a", 1, data)])
    with pytest.raises(InvalidPlan):
        check_plan([PlannedCommit("a", 1, data), PlannedCommit("a", 2, data, blind=True)])
    plan = [PlannedCommit("a", 1, data), PlannedCommit("a", 2, data)]
    check_plan(plan)
    with pytest.raises(InvalidPlan):  # which of the two is the member's?
        parse_group({"m": {"tables": ["a"], "validation": {}}}, plan)
    with pytest.raises(InvalidPlan):
        parse_group({"m": {"tables": ["a"], "at": {"a": 3}, "validation": {}}}, plan)
    with pytest.raises(InvalidPlan):
        parse_group({"m": {"tables": ["a"], "at": {"a": 2}, "validation": {}},
                     "n": {"tables": ["a"], "at": {"a": 2}, "validation": {}}}, plan)
    assert parse_group({"m": {"tables": ["a"], "at": {"a": 2}, "validation": {}}}, plan)["m"]["at"] == {"a": 2}


# ------------------------------------------------------------------------------------ end to end
def bump(key: int) -> Operation:
    """``UPDATE kv SET val = val + 1 WHERE id = key``, its predicate a FileFilter (data a holder can judge)."""
    from lv_core.delta.writer import write_data_files

    def run(ctx: Any) -> OpResult:
        snap = ctx.snapshot("kv")
        match = file_filter(f"id = {key}", snap.schema, snap.partition_columns)
        res = OpResult(value=0, reads={"kv": set()}, scans={"kv"}, adds={"kv": []}, removes={"kv": []},
                       may_match={"kv": match})
        for f in [f for f in ctx.files("kv").values() if match(f)]:
            data = read_data_files(ctx.store, "kv", [f], snap.schema, snap.partition_columns)
            res.reads["kv"].add(f.path)
            mask = pc.equal(data["id"], key)
            if not pc.sum(mask).as_py():
                continue
            i = data.schema.get_field_index("val")
            out = data.set_column(i, "val", pc.if_else(mask, pc.add(data["val"], 1.0), data["val"]))
            res.adds["kv"].extend(write_data_files(ctx.store, "kv", snap, out,
                                                   new_path=lambda v: ctx.new_path("kv", v)))
            res.removes["kv"].append(f.remove())
            res.value += 1
        return res

    return Operation("update", ("kv",), run, logical={"sql": f"UPDATE kv SET val = val + 1 WHERE id = {key}"})


def _queued(store: ObjectStore) -> int:
    return sum(1 for _ in store.list(VQ_PREFIX))


def _writers_behind_one(tmp_path: Any, keys: list[int]) -> tuple[Lakehouse, Any, list[Any], dict[int, Any], int]:
    """Table kv (rows 1-4, one file each) in the global log; a transaction D holding the marker right after
    it (bumped row 4, not committed) and one writer per key of ``keys`` behind it, each in its own lakehouse
    (another process), markers in that order, committing in threads: returns once each queued its request
    (before its predecessors resolved)."""
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=30.0)
    make_kv(lh, "kv", {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0})
    warm = lh.begin("serializable")
    add_kv(warm, "kv", 4, 0.0)
    warm.commit()
    first = lh.begin("serializable", timeout_s=60)
    first.execute(bump(4))
    txns = []
    for k in keys:
        t = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
        t.execute(bump(k))
        txns.append(t)
    out: dict[int, Any] = {}

    def commit(i: int) -> None:
        try:
            out[i] = txns[i].commit()
        except BaseException as e:  # the test inspects it
            out[i] = e

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(len(txns))]
    for th in threads:
        th.start()
    end = time.monotonic() + 30
    while _queued(lh.store) < len(keys):
        assert time.monotonic() < end, "every writer queues before its predecessor committed"
        time.sleep(0.01)
    before = lh.global_log.head().version
    first.commit()
    for th in threads:
        th.join(60)
    return lh, first, txns, out, before


def _named(lh: Lakehouse, after: int) -> list[set[str]]:
    head = lh.global_log.head()
    return [{s.txn, *s.group} for s in (lh.global_log.at(v) for v in range(after + 1, head.version + 1))]


def test_three_writers_of_one_table_are_committed_in_one_global_version(tmp_path: Any) -> None:
    lh, first, txns, out, before = _writers_behind_one(tmp_path, [1, 2, 3])
    assert all(not isinstance(r, BaseException) for r in out.values()), out
    assert committed_kv(lh, "kv") == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    named = _named(lh, before)
    ids = {t.id for t in txns}
    assert any(ids <= s for s in named), named  # (the first's holder session serves them after its own version)
    for t in txns:
        assert t.core.validation is not None and t.core.validation["compatible"] is True
    head = lh.global_log.head()
    assert head.table_version("kv") == max(r.versions["kv"] for r in out.values())


def test_a_conflicting_member_is_left_to_its_owner_which_redoes_and_commits_itself(tmp_path: Any) -> None:
    # the second writer bumps row 1 too: certified after the first's commit it conflicts (the file it read was
    # rewritten), so it and the third are left to their owners; the second redoes on the first's commit
    lh, first, txns, out, before = _writers_behind_one(tmp_path, [1, 1, 3])
    assert all(not isinstance(r, BaseException) for r in out.values()), out
    assert committed_kv(lh, "kv") == {1: 2.0, 2: 0.0, 3: 1.0, 4: 1.0}
    assert out[1].redo_count >= 1 and out[0].redo_count == 0
    named = _named(lh, before)
    assert not any({txns[0].id, txns[1].id} <= s for s in named), named


def two_writers(tmp_path: Any, m_row: int) -> tuple[Lakehouse, Any, Any]:
    """A warehouse whose ``kv`` has rows 1 and 4 (row 4 in a file of its own), transaction D bumping row 4
    (its marker placed, not committed) and M, of another client, bumping ``m_row`` behind it."""
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=30.0)
    make_kv(lh, "kv", {1: 0.0, 4: 0.0})
    warm = lh.begin("serializable")
    add_kv(warm, "kv", 4, 0.0)
    warm.commit()
    d = lh.begin("serializable", timeout_s=60)
    d.execute(bump(4))
    m = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
    m.execute(bump(m_row))
    return lh, d, m


def _behind_a_holder(tmp_path: Any, settle: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Lakehouse, Any, Any, Any]:
    """Row 4 bumped by D (marker first, not committed), row 1 by M behind it, whose settling is ``settle``
    (wrapping the real one); M commits in a thread and queues early; then D commits. Returns (lh, M's
    outcome or error, M, D's result)."""
    from lv_core.txn import isolation

    lh, d, m = two_writers(tmp_path, 1)
    real = isolation.settle_markers
    monkeypatch.setattr(isolation, "settle_markers", lambda core, deadline: settle(real, core, deadline)
                        if core.id == m.id else real(core, deadline))
    res, got = _queued_then_committed(lh, d, m)
    return lh, res, m, got


def _queued_then_committed(lh: Lakehouse, d: Any, m: Any) -> tuple[Any, Any]:
    """M commits in a thread and queues early (behind D's marker); then D commits. Returns (M's outcome or
    error, D's result)."""
    out: list[Any] = []

    def commit() -> None:
        try:
            out.append(m.commit())
        except BaseException as e:  # the test inspects it
            out.append(e)

    th = threading.Thread(target=commit)
    th.start()
    end = time.monotonic() + 30
    while _queued(lh.store) < 1 and not out:  # (queued early, or already given up)
        assert time.monotonic() < end
        time.sleep(0.01)
    got = d.commit()
    th.join(60)
    return out[0], got


def test_an_owner_whose_settling_fails_after_a_holder_committed_it_ends_committed(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its settling gives up (here: as if its deadline passed) once the holder published its commit: the
    abort would free a marker and delete files that a published commit uses. It retracts its request,
    learns the holder's decision and ends committed."""
    published = threading.Event()

    def late(real: Any, core: Any, deadline: float) -> Any:
        published.wait(30)
        raise TransactionAborted("timed out waiting for a predecessor", "timeout")

    from lv_core.errors import TransactionAborted
    from lv_core.txn import behind

    join = behind._join  # noqa: SLF001 - observed, not changed

    def joined(*a: Any) -> None:
        join(*a)
        published.set()  # (the commit is planned; the publish follows while the owner retracts)

    monkeypatch.setattr(behind, "_join", joined)
    lh, res, m, _d = _behind_a_holder(tmp_path, late, monkeypatch)
    assert not isinstance(res, BaseException), res
    assert m.core.state == "committed" and res.versions["kv"] == lh.global_log.head().table_version("kv")
    assert committed_kv(lh, "kv") == {1: 1.0, 4: 1.0}
    assert _queued(lh.store) == 0


def test_an_owner_whose_settling_fails_before_any_holder_committed_it_aborts_and_is_never_committed(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from lv_core.errors import TransactionAborted

    def fails(real: Any, core: Any, deadline: float) -> Any:
        raise TransactionAborted("timed out waiting for a predecessor", "timeout")

    lh, res, m, _d = _behind_a_holder(tmp_path, fails, monkeypatch)
    assert isinstance(res, TransactionAborted) and m.core.state == "aborted"
    assert committed_kv(lh, "kv") == {1: 0.0, 4: 1.0}
    head = lh.global_log.head()
    assert all(m.id not in lh.global_log.at(v).group for v in range(head.version + 1))


def test_a_member_whose_markers_cannot_be_read_is_left_to_its_owner_and_the_holder_commits(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The holder's read of a queued member's marker fails (the store; a malformed marker reads the same): the
    member is left to its owner, which commits itself; neither the holder's commit nor its serving session
    fails over it (here the session: before, it ended with "serving the queue failed" logged as an error)."""
    from lv_core.errors import StorageError
    from lv_core.txn import behind

    lh, d, m = two_writers(tmp_path, 1)
    real = behind._live  # noqa: SLF001 - a store fault injected for one transaction's markers
    failed = threading.Event()

    def flaky(req: Any, read: Any) -> float:
        if req.txn == m.id:
            failed.set()
            raise StorageError("injected: GET of a member's marker failed")
        return real(req, read)

    monkeypatch.setattr(behind, "_live", flaky)
    before = lh.global_log.head().version
    res, got = _queued_then_committed(lh, d, m)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text  # (fails on the code before)
    assert failed.is_set()  # the holder did try to serve M
    assert not isinstance(res, BaseException), res
    assert got.versions["kv"] < res.versions["kv"]
    assert all(m.id not in lh.global_log.at(v).group for v in range(before + 1, lh.global_log.head().version + 1))
    assert committed_kv(lh, "kv") == {1: 1.0, 4: 1.0}


# ------------------------------------------------------------------------------------ read ahead by a serving holder
def test_a_holder_reads_the_requests_behind_its_plan_while_the_plan_is_written(local_store: ObjectStore) -> None:
    """The look made while a plan is written prepares the requests behind its entries (the plan's own versions
    taken from the plan, not read), so the next round starts as soon as the plan is published; the markers'
    liveness read then is judged against the clock when the chain is made."""
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.txn import group as gc
    from lv_core.txn.behind import Group, serve_same

    base = _table_a(local_store)
    plan, members = _same_table_plan(local_store)
    ((m4, e4),) = _markers(local_store, ["m4"])
    assert m4 == 4
    req = Request("m4", 0, (TableAccess("a", read=True, written=True, marker=4),), Policy(),
                  {"a": RequestCommit(commit_bytes(local_store, "a", "m4", [4]), {}, False)}, {"a": (4, e4)},
                  sg.unsettled(0, [], []))  # read the table at 0: certified against 1-3, which it did not read
    local_store.put(req.key, req.encode(), mode=CREATE)
    rec = LockRecord("holder", COMMITTING, 30.0, time.time() + 30, "here:1", time.time(), base.version,
                     tuple(plan), "holder", group=members)
    store = InstrumentedStore(local_store)
    found = gc._look(store, frozenset({"holder", "m1", "m2"}), rec)  # (before the plan is written)
    assert [r.txn for r in found] == ["m4"] and isinstance(found, gc.Looked) and found.ahead is not None
    tops, preparing = found.ahead
    behind = preparing.result()
    assert tops == {"a": 3}
    assert {v: (c.txn if c else None) for (_t, v), c in behind.log.items()} == {1: "holder", 2: "m1"}  # (3: the top)
    counts = store.counts()  # the request and m4's marker read; versions 1-2 (not written yet) from the plan
    assert (counts["LIST"], counts["GET"], store.total()) == (1, 2, 3), counts
    res = execute_plan(local_store, GlobalLog(local_store), plan, txn="holder", gvl_base=base.version, base=base,
                       group=members)
    head = GlobalLog(local_store).head()
    assert res.committed and head.table_version("a") == 3
    top = [PlannedCommit("a", 3, plan[2].data, OVERWRITE_MARKER, plan[2].etag)]
    joined = Group()
    serve_same(local_store, head, "holder", top, behind, joined)
    assert joined.members["m4"]["at"] == {"a": 4}
    # a marker whose lease ran out since it was read is not followed, however recently the read was
    behind.live["m4"] = lv_core.concurrency.done(time.time() - 0.001)
    lapsed = Group()
    serve_same(local_store, head, "holder", top, behind, lapsed)
    assert lapsed.members == {}


def test_plan_tops_skip_blind_appends_and_plan_versions_name_each_committer() -> None:
    from lv_core.txn import group as gc

    plan = (PlannedCommit("a", 1, b"x", CREATE_MODE), PlannedCommit("a", 2, b"y", OVERWRITE_MARKER, "e"),
            PlannedCommit("b", 5, b"z", CREATE_MODE, blind=True), PlannedCommit("c", 7, b"w", CREATE_MODE))
    rec = LockRecord("h", COMMITTING, 30.0, time.time() + 30, "here:1", time.time(), 0, plan, "h",
                     group={"m": {"tables": ["a"], "at": {"a": 2}, "validation": {}},
                            "d": {"tables": ["c"], "validation": {}}})
    assert gc._plan_tops(plan) == {"a": 2, "c": 7}
    got = {k: (st.txn, st.kind, st.raw) for k, st in gc._plan_versions(rec).items()}
    assert got == {("a", 1): ("h", "commit", b"x"), ("a", 2): ("m", "commit", b"y"), ("b", 5): ("h", "commit", b"z"),
                   ("c", 7): ("d", "commit", b"w")}


def test_a_writer_queued_early_reads_the_markers_behind_it_beside_the_requests(local_store: ObjectStore,
                                                                               monkeypatch) -> None:
    """The holder's entry will be a@1; m2 and m3 wait behind it, their markers at a@2 and a@3. Once the LIST
    names two requests, the markers right above the entry are read beside the requests: each request's GET
    is held until a marker's GET is under way (read one after the other, the requests' GETs wait out the
    10 s and the test fails)."""
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.txn.behind import look_behind

    _table_a(local_store)
    placed = _markers(local_store, ["m2", "m3"])
    assert [v for v, _e in placed] == [2, 3]
    for txn, (v, e) in zip(["m2", "m3"], placed, strict=True):
        req = Request(txn, 0, (TableAccess("a", read=True, written=True, marker=v),), Policy(),
                      {"a": RequestCommit(commit_bytes(local_store, "a", txn, [v]), {}, False)}, {"a": (v, e)},
                      sg.unsettled(0, [], []))
        local_store.put(req.key, req.encode(), mode=CREATE)
    store = InstrumentedStore(local_store)
    marker_read = threading.Event()
    together: list[bool] = []
    request = store._request

    def gate(kind: str, key: str, call: Any) -> Any:
        if kind == "GET" and key.startswith("_lakevilla/markers/"):
            marker_read.set()
        if kind == "GET" and key.startswith(VQ_PREFIX):
            together.append(marker_read.wait(10))
        return request(kind, key, call)

    monkeypatch.setattr(store, "_request", gate)
    behind = look_behind(store, "holder", {"a": 1}, {})
    assert together == [True, True]
    assert sorted(c.txn for c in behind.cands) == ["m2", "m3"]
    assert all(behind.live[t].result() > time.time() for t in ("m2", "m3"))
    counts = store.counts()  # no marker read twice
    assert (counts["LIST"], counts["GET"], store.total()) == (1, 4, 5), counts


def test_a_marker_past_the_guessed_versions_is_read_after_its_request(local_store: ObjectStore) -> None:
    """m2, m3 and m5 are queued behind the holder's entry at a@1; the marker at a@4 is another writer's, not
    queued. The LIST names three requests, so a@2-a@4 are read ahead; m5's marker (a@5) is read after its
    request, and every candidate is judged live on what was read."""
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.txn.behind import look_behind

    _table_a(local_store)
    placed = dict(zip(["m2", "m3", "x4", "m5"], _markers(local_store, ["m2", "m3", "x4", "m5"]), strict=True))
    assert [v for v, _e in placed.values()] == [2, 3, 4, 5]
    for txn in ("m2", "m3", "m5"):
        v, e = placed[txn]
        req = Request(txn, 0, (TableAccess("a", read=True, written=True, marker=v),), Policy(),
                      {"a": RequestCommit(commit_bytes(local_store, "a", txn, [v]), {}, False)}, {"a": (v, e)},
                      sg.unsettled(0, [], []))
        local_store.put(req.key, req.encode(), mode=CREATE)
    store = InstrumentedStore(local_store)
    behind = look_behind(store, "holder", {"a": 1}, {})
    assert sorted(c.txn for c in behind.cands) == ["m2", "m3", "m5"]
    assert all(behind.live[t].result() > time.time() for t in ("m2", "m3", "m5"))
    counts = store.counts()  # 3 requests, a@2-a@4 ahead, a@5 after
    assert (counts["LIST"], counts["GET"]) == (1, 7), counts
