"""A same-table group plan voided by a foreign object at its global version (issue 38, found in review): the
void reverts every entry at the table's tail, after the whole lane, so a second runner must find the revert of
its commit past the members' commits (it used to look only right after it, and published reverted commits),
and the reverts undo the lane newest first. Both tests fail on the code before the fix."""
from __future__ import annotations

import pytest

from lv_core.delta.actions import AddFile, CommitInfo, decode_commit, encode_commit
from lv_core.protocol.commitplan import GLOBAL_LOG, VOIDED, execute_plan
from lv_core.protocol.gvl import GlobalLog, gvl_key
from lv_core.protocol.markers import lakevilla_commit_info
from lv_core.storage.base import CREATE, ObjectStore
from tests.unit.test_same_table_group import _same_table_plan, _table_a
from tests.unit.test_vlock import rows

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def local_store(tmp_path):
    from lv_core.storage.local import LocalStore
    return LocalStore(tmp_path / "warehouse")


def test_second_runner_of_a_voided_same_table_group(local_store: ObjectStore) -> None:
    store = local_store
    base = _table_a(store)
    plan, group = _same_table_plan(store)
    store.put(gvl_key(base.version + 1), b"garbage", mode=CREATE)
    first = execute_plan(store, GlobalLog(store), plan, txn="holder", gvl_base=base.version, base=base, group=group)
    assert (first.committed, first.rule) == (False, GLOBAL_LOG)
    assert rows(store, "a") == []  # every entry written, then reverted after the lane
    store.delete(gvl_key(base.version + 1))  # the object moved out (as the error's help says)
    again = execute_plan(store, GlobalLog(store), plan, txn="holder", gvl_base=base.version, base=base, group=group)
    assert (again.committed, again.rule) == (False, VOIDED), "reverted commits published by the second runner"


def test_void_reverts_holder_before_member_that_rewrote_its_file(local_store: ObjectStore) -> None:
    store = local_store
    base = _table_a(store)
    plan, group = _same_table_plan(store)
    # member m1 rewrites the holder's file (it updated the row the holder wrote): remove H, add its own
    h_add = next(a for a in decode_commit(plan[0].data) if isinstance(a, AddFile))
    m1_add = next(a for a in decode_commit(plan[1].data) if isinstance(a, AddFile))
    from dataclasses import replace
    plan[1] = replace(plan[1], data=encode_commit([CommitInfo(lakevilla_commit_info("m1", "WRITE")), h_add.remove(0),
                                                   m1_add]))
    store.put(gvl_key(base.version + 1), b"garbage", mode=CREATE)
    first = execute_plan(store, GlobalLog(store), plan, txn="holder", gvl_base=base.version, base=base, group=group)
    assert (first.committed, first.rule) == (False, GLOBAL_LOG)
    got = rows(store, "a")
    assert got == [], f"void left rows {got}"
