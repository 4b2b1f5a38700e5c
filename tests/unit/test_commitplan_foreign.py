"""A commit plan whose global version holds an object no LakeVilla holder wrote (bad input by another
client): voided like a broken plan (rule ``global_log``), never left half done, whoever runs it."""

from __future__ import annotations

import json

import pytest

from lv_core.delta import create_table
from lv_core.errors import TransactionAborted
from lv_core.protocol.commitplan import CREATE_MODE, GLOBAL_LOG, VOIDED, PlannedCommit, execute_plan
from lv_core.protocol.gvl import EMPTY, GlobalLog, GvlState, gvl_key
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import read_version
from lv_core.protocol.vlock import COMMITTING, LOCK_KEY, ValidationLock
from lv_core.storage.base import CREATE, ObjectStore
from tests.unit.test_vlock import commit_bytes, crashed_record, rows

pytestmark = pytest.mark.timeout(120)


def _setup(store: ObjectStore, tables: tuple[str, ...] = ("a", "b")) -> GvlState:
    for t in tables:
        create_table(store, t, "id BIGINT")
    return GlobalLog(store).publish(EMPTY, {t: 0 for t in tables}, "setup")


def _versions(store: ObjectStore, table: str) -> list[str]:
    return [str(read_version(store, table, v).kind) for v in range(4) if store.exists(commit_key(table, v))]


def test_a_foreign_next_global_version_voids_the_plan(local_store: ObjectStore) -> None:
    store = local_store
    base = _setup(store)
    store.put(gvl_key(base.version + 1), b"garbage", mode=CREATE)
    plan = [PlannedCommit("a", 1, commit_bytes(store, "a", "me", [1]), CREATE_MODE),
            PlannedCommit("b", 1, commit_bytes(store, "b", "me", [2]), CREATE_MODE)]
    with ValidationLock(store).acquire("me", timeout_s=5) as held:
        with pytest.raises(TransactionAborted) as ei:
            held.commit(plan, base)
    e = ei.value
    assert e.rule == GLOBAL_LOG and e.details == {"written": {"a": 1, "b": 1}, "undone": {"a": 2, "b": 2}}
    assert "malformed global version object" in e.reason and gvl_key(base.version + 1) in e.reason
    assert "a@1 reverted at a@2" in e.reason and "Help: " in e.reason
    assert rows(store, "a") == [] and rows(store, "b") == []  # plain Delta readers: nothing changed
    assert store.get(gvl_key(base.version + 1)).data == b"garbage"  # nothing published, nothing overwritten
    free = json.loads(store.get(LOCK_KEY).data)
    assert free["state"] == "free" and free["head"] is None  # the next holder reads the head (and fails early)
    # a second runner of the same plan (a taker-over) ends in the same state: nothing more is written
    again = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=base.version, base=base)
    assert (again.committed, again.rule, again.gvl) == (False, VOIDED, None)  # it stops at a's revert
    assert _versions(store, "a") == _versions(store, "b") == ["commit", "commit", "commit"]  # 0, commit, revert
    assert not store.exists(commit_key("a", 3))


def test_a_group_members_commits_are_voided_too(local_store: ObjectStore) -> None:
    store = local_store
    base = _setup(store)
    store.put(gvl_key(base.version + 1), json.dumps({"version": base.version + 1, "tables": {"a": 9, "b": 0}}).encode(),
              mode=CREATE)
    plan = [PlannedCommit("a", 1, commit_bytes(store, "a", "me", [1])),
            PlannedCommit("b", 1, commit_bytes(store, "b", "member", [2]))]
    result = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=base.version, base=base,
                          group={"member": {"tables": ["b"], "validation": {}}})
    assert (result.committed, result.rule, result.undone) == (False, GLOBAL_LOG, {"a": 2, "b": 2})
    assert "names no transaction" in result.reason and "has no version 9" in result.reason
    assert rows(store, "a") == [] and rows(store, "b") == []
    assert b"LAKEVILLA REVERT" in read_version(store, "b", 2).raw and read_version(store, "b", 2).txn == "member"


def test_a_takeover_rolls_a_plan_blocked_by_a_foreign_version_back(local_store: ObjectStore) -> None:
    """A holder that crashed with its plan recorded, the next global version foreign: the taker-over voids the
    plan (it used to fail on the object and abandon the key, so every later validator failed on it too)."""
    store = local_store
    base = _setup(store, ("a",))
    store.put(gvl_key(base.version + 1), b"{}", mode=CREATE)
    plan = (PlannedCommit("a", 1, commit_bytes(store, "a", "crashed", [1])),)
    store.put(LOCK_KEY, crashed_record(COMMITTING, plan=plan, gvl_base=base.version).encode(), mode=CREATE)
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        (tk,) = held.takeovers
        assert tk.action == "plan-rolled-back" and tk.result is not None and tk.result.rule == GLOBAL_LOG
    assert rows(store, "a") == [] and _versions(store, "a") == ["commit", "commit", "commit"]
    assert GlobalLog(store).at(base.version) == base


def test_a_voided_plan_stays_voided_once_the_foreign_object_is_gone(local_store: ObjectStore) -> None:
    """A holder voided its plan and crashed before releasing the key; someone then moves the foreign object
    away. The taker-over's rerun finds each commit followed by its revert and stops: publishing the plan now
    would name commits their reverts already undid (LakeVilla readers would see a write whose owner aborted)."""
    store = local_store
    base = _setup(store)
    store.put(gvl_key(base.version + 1), b"garbage", mode=CREATE)
    plan = [PlannedCommit("a", 1, commit_bytes(store, "a", "me", [1])),
            PlannedCommit("b", 1, commit_bytes(store, "b", "me", [2]))]
    first = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=base.version, base=base)
    assert (first.committed, first.rule) == (False, GLOBAL_LOG)
    store.delete(gvl_key(base.version + 1))
    again = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=base.version, base=base)
    assert (again.committed, again.rule, again.gvl) == (False, VOIDED, None) and "reverted at a@2" in again.reason
    assert GlobalLog(store).head() == base and not store.exists(gvl_key(base.version + 1))
    assert rows(store, "a") == [] and rows(store, "b") == [] and not store.exists(commit_key("a", 3))
