"""Spark tier: OPTIMIZE (compaction as a dataChange=false transaction operation) and VACUUM in SQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import deltalake
import pytest

import lv_core
from lv_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _rows(url: str, version: int | None = None) -> list[tuple]:
    t = deltalake.DeltaTable(url, version=version).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["p"].to_pylist(), strict=False))


def _nfiles(url: str) -> int:
    return len(deltalake.DeltaTable(url).file_uris())


def test_optimize_compacts_and_never_conflicts_with_appends(spark: SparkSession, tmp_path: Path) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.sql("CREATE TABLE t (id BIGINT, p STRING) PARTITIONED BY (p)")
    for i in range(6):
        lh.sql(f"INSERT INTO t VALUES ({i}, '{'ab'[i % 2]}')")
    lh.sql("DELETE FROM t WHERE id = 5")  # 'b' now holds 2 files
    url = lh.store.url("t")
    before, nbefore = _rows(url), _nfiles(url)
    assert nbefore == 5
    got = lh.sql("OPTIMIZE t").collect()[0].asDict()
    assert got == {"numFilesRemoved": 5, "numFilesAdded": 2}  # one file per partition
    assert _rows(url) == before and _nfiles(url) == 2
    v = lh.version("t")
    commit = [json.loads(line) for line in
              (tmp_path / "wh" / "t" / "_delta_log" / f"{v:020d}.json").read_text().splitlines()]
    changes = [a.get("add") or a.get("remove") for a in commit if "add" in a or "remove" in a]
    assert len(changes) == 7 and all(c["dataChange"] is False for c in changes)
    assert lh.sql("OPTIMIZE t").collect()[0].asDict() == {"numFilesRemoved": 0, "numFilesAdded": 0}

    # Concurrent appends: the compaction is not redone, both commit.
    for preset in ("repeatable_read", "snapshot", "serializable"):
        lh.sql("INSERT INTO t VALUES (100, 'a'), (101, 'a')")
        appender = lh.begin(preset)
        appender.sql("INSERT INTO t VALUES (200, 'a')")  # its marker comes first
        opt = lh.begin(preset)
        opt.sql("OPTIMIZE t")
        appender.commit()
        res = opt.commit()
        assert res.redo_count == 0, preset
    assert {r[0] for r in _rows(url)} == {0, 1, 2, 3, 4, 100, 101, 200}
    assert len([r for r in _rows(url) if r[0] == 100]) == 3  # once per round, never duplicated

    # A concurrent UPDATE of a compacted file is redone on the compacted files: no duplicated rows.
    lh.sql("INSERT INTO t VALUES (300, 'b')")
    expected = sorted([r for r in _rows(url) if r != (300, "b")] + [(301, "b")])
    opt = lh.begin("repeatable_read")
    opt.sql("OPTIMIZE t")
    upd = lh.begin("repeatable_read")
    upd.sql("UPDATE t SET id = 301 WHERE id = 300")
    opt.commit()
    res = upd.commit()
    assert res.redo_count == 1
    assert _rows(url) == expected


def test_vacuum_sql(spark: SparkSession, tmp_path: Path) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.sql("CREATE TABLE t (id BIGINT, p STRING)")
    for i in range(3):
        lh.sql(f"INSERT INTO t VALUES ({i}, 'a')")
    lh.sql("OPTIMIZE t")
    url = lh.store.url("t")
    assert lh.sql("VACUUM t").count() == 0  # default 168 hours: every version is retained
    with pytest.raises(ConfigError, match="retentionDurationCheck"):
        lh.sql("VACUUM t RETAIN 0 HOURS")
    txn = lh.begin("repeatable_read")
    try:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        assert lh.sql("VACUUM t RETAIN 0 HOURS DRY RUN").count() == 3
        deleted = {r["path"] for r in txn.sql("VACUUM t RETAIN 0 HOURS").collect()}
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    txn.rollback()
    assert len(deleted) == 3 and _nfiles(url) == 1
    assert [r[0] for r in _rows(url)] == [0, 1, 2]
