"""Change data files in a transaction's net actions (issue 17 item 4): implied INSERT change files are
committed only next to other change files of the table; staged change files are cleaned up like data files."""

from __future__ import annotations

from lv_core.delta.actions import AddCDCFile, AddFile
from lv_core.txn.ops import OpResult
from lv_core.txn.state import net_actions


def _add(p: str) -> AddFile:
    return AddFile(p, {}, 1, 0)


def _cdc(p: str) -> AddCDCFile:
    return AddCDCFile(f"_change_data/{p}", {}, 1)


def test_insert_only_commit_keeps_no_change_files() -> None:
    ins = OpResult(adds={"t": [_add("a")]}, cdc={"t": [_cdc("a")]}, cdc_implied={"t"})
    assert net_actions("t", [ins]) == [_add("a")]


def test_insert_change_files_kept_next_to_an_update() -> None:
    ins = OpResult(adds={"t": [_add("a")]}, cdc={"t": [_cdc("a")]}, cdc_implied={"t"})
    old = _add("old")
    upd = OpResult(adds={"t": [_add("b")]}, removes={"t": [old.remove(5)]}, cdc={"t": [_cdc("b")]})
    got = net_actions("t", [ins, upd])
    assert got == [old.remove(5), _add("a"), _add("b"), _cdc("a"), _cdc("b")]
    assert all(not c.data_change for c in got if isinstance(c, AddCDCFile))
    # order of the statements does not matter, nor does another table's change files
    assert set(map(repr, net_actions("t", [upd, ins]))) == set(map(repr, got))
    other = OpResult(adds={"u": [_add("c")]}, cdc={"u": [_cdc("c")]})
    assert net_actions("t", [ins, other]) == [_add("a")]


def test_staged_lists_data_and_change_files() -> None:
    r = OpResult(adds={"t": [_add("a")]}, cdc={"t": [_cdc("a")], "u": [_cdc("x")]})
    assert r.staged() == {"t": ["a", "_change_data/a"], "u": ["_change_data/x"]}
