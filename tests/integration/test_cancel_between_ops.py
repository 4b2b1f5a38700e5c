"""Spark tier: a cancel that lands between two Spark operations of one statement (after an UPDATE's
find pass, before its rewrite) stops the statement before the rewrite starts, and nothing changes.

Spark may lose an interrupt that reaches a write job while it sets up its output folder (Hadoop's
local file system swallows it while running ``chmod``), so the engine checks for a cancel before each
write instead of relying on the interrupt alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lv_core
from lv_core.engine import api
from lv_core.errors import Interrupted

pytestmark = pytest.mark.spark


def test_cancel_after_the_find_pass_stops_before_the_rewrite(spark: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"))
    try:
        lh.sql("CREATE TABLE t (id BIGINT, v BIGINT)")
        lh.sql("INSERT INTO t SELECT id, 0 FROM range(100)")
        eng = api.engine(lh)
        before = lh.version("t")
        txn = lh.begin()
        real_file_of, writes = eng.file_of, []
        real_direct = eng._direct_write

        def file_of(*a: Any) -> Any:  # runs right after the find pass returned
            txn.cancel()
            return real_file_of(*a)

        monkeypatch.setattr(eng, "file_of", file_of)
        monkeypatch.setattr(eng, "_direct_write", lambda *a, **k: writes.append(1) or real_direct(*a, **k))
        with pytest.raises(Interrupted):
            txn.update("t", {"v": "v + 1"}, "id % 10 = 0")
        assert writes == []  # the rewrite never started
        txn.rollback()
        assert lh.version("t") == before
        assert lh.sql("SELECT sum(v) FROM t").collect()[0][0] == 0
    finally:
        lh.close()
