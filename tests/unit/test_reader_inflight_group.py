"""A serializable reader at one global version and a plan written but not published yet (issue 38).

Same-table group commit writes a group's table commits one after another before the global version
that publishes them: a reader at the previous global version that validates (not confirmed) met them
as commits the log does not know yet and aborted once with R1. They carry that global version
(``lakevilla.gvl``), above the head the reader validates against, which orders them after it: they
do not count (docs/PROTOCOL.md, "Special cases"). A commit naming a global version the head already
reached without naming it (never published there) still counts, as any commit outside the log.
"""

from __future__ import annotations

import json

import deltalake
import pandas as pd
import pytest

from lv_core import Lakehouse
from lv_core.errors import TransactionAborted
from lv_core.protocol.layout import commit_key
from lv_core.storage.base import CREATE
from tests.helpers.bank import logged_xy, read_kv


def _plan_commit(lh: Lakehouse, gvl: int) -> None:
    """Write ``x``'s next version as a plan's table commit for global version ``gvl`` would be: a new
    row (a data file copied from a scratch table) with ``lakevilla: {kind: commit, gvl}``."""
    deltalake.write_deltalake(lh.store.url("scratch"), pd.DataFrame({"id": [3], "val": [1.0]}))
    lines = [json.loads(x) for x in lh.store.get(commit_key("scratch", 0)).data.decode().splitlines() if x]
    add = next(a["add"] for a in lines if "add" in a)
    lh.store.put(f"x/{add['path']}", lh.store.get(f"scratch/{add['path']}").data)
    v = deltalake.DeltaTable(lh.store.url("x")).version() + 1
    info = {"timestamp": 0, "operation": "LAKEVILLA COMMIT", "operationParameters": {},
            "lakevilla": {"kind": "commit", "txn": "20260101T000000-00000000000000aa", "gvl": gvl}}
    body = "\n".join(json.dumps(a) for a in ({"commitInfo": info}, {"add": add})) + "\n"
    lh.store.put(commit_key("x", v), body.encode(), mode=CREATE)


@pytest.fixture
def lh(tmp_path) -> Lakehouse:
    return logged_xy(str(tmp_path / "wh"), {1: 100.0, 2: 100.0})


def test_a_reader_is_ordered_before_a_plan_not_published_yet(lh):
    """Fails on the code before: R1 (the new row may match the reader's scan)."""
    head = lh.global_state().version
    _plan_commit(lh, head + 1)
    r = lh.begin("serializable")
    assert read_kv(r, "x") == {1: 100.0, 2: 100.0}  # at the head: the plan's row is not published
    res = r.commit()
    assert res.validation["compatible"], res.validation


def test_a_commit_for_a_global_version_the_head_reached_still_counts(lh):
    head = lh.global_state().version
    _plan_commit(lh, head)  # names the head, which does not name it: never published there
    r = lh.begin("serializable")
    assert read_kv(r, "x") == {1: 100.0, 2: 100.0}
    with pytest.raises(TransactionAborted) as ei:
        r.commit()
    assert ei.value.rule == "R1"
