"""VACUUM (lv_core.protocol.vacuum) without Spark: what a reader at a retained version needs is kept
(checked by reading every retained version with delta-rs afterwards), everything else old goes; files
of running transactions are never deleted; the retention safety check; OPTIMIZE's bin packing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import lv_core
from lv_core.delta.actions import AddFile
from lv_core.engine import arrow_ops as ops
from lv_core.engine.sql_maint import bins
from lv_core.engine.sql_parse import parse_statement
from lv_core.errors import ConfigError
from tests.helpers.bank import make_kv, write_kv

DAY = 86400.0


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def _data_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture
def history(tmp_path: Path):
    """kv: v0 create, v1-v4 one row each, v5 rewrites row 1 -- all 10 days old; v6 rewrites row 2 (now)."""
    lh = lv_core.connect(str(tmp_path / "wh"))
    make_kv(lh, "kv", {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    txn = lh.begin("delta")
    write_kv(txn, "kv", 1, 10.0)
    txn.commit()
    root = tmp_path / "wh" / "kv"
    for p in root.rglob("*"):
        if p.is_file():
            _age(p, 10 * DAY)
    txn = lh.begin("delta")
    write_kv(txn, "kv", 2, 20.0)
    txn.commit()
    assert lh.version("kv") == 6
    yield lh, root
    lh.close()


def _rows(url: str, version: int) -> dict[int, float]:
    t = deltalake.DeltaTable(url, version=version).to_pyarrow_table()
    return dict(zip(t["id"].to_pylist(), t["val"].to_pylist(), strict=False))


@pytest.mark.parametrize("preset,features", [("repeatable_read", None), ("repeatable_read", {"R"}),
                                             ("serializable", None)])
def test_vacuum_keeps_what_retained_versions_need_and_removes_the_rest(history, preset, features) -> None:
    """(The running transaction: with LV[CT] its sublog names its staged file; LV[R] alone and
    LV[I] write none for a first write, and their pending marker protects it.)"""
    lh, root = history
    url = lh.store.url("kv")
    expected = {v: _rows(url, v) for v in range(7)}
    files = {v: {u.rsplit("/kv/", 1)[1] for u in deltalake.DeltaTable(url, version=v).file_uris()} for v in range(7)}
    # Leftovers: an old orphan (deleted), a fresh orphan (kept: a writer may be about to commit it),
    # an old file in the staging folder and one a running transaction staged (both kept).
    (root / "part-orphan-old.parquet").write_bytes(b"x")
    _age(root / "part-orphan-old.parquet", 9 * DAY)
    (root / "part-orphan-new.parquet").write_bytes(b"x")
    (root / "_lv_staging" / "part-x-0001-0-s1").mkdir(parents=True)
    (root / "_lv_staging" / "part-x-0001-0-s1" / "a.parquet").write_bytes(b"x")
    _age(root / "_lv_staging" / "part-x-0001-0-s1" / "a.parquet", 9 * DAY)
    running = lh.begin(preset, features=features)
    running.execute(ops.append("kv", pa.table({"id": pa.array([9], pa.int64()), "val": pa.array([9.0])})))
    staged = _data_files(root) - set().union(*files.values()) - {"part-orphan-old.parquet",
                                                                  "part-orphan-new.parquet",
                                                                  "_lv_staging/part-x-0001-0-s1/a.parquet"}
    assert len(staged) == 1
    _age(root / next(iter(staged)), 9 * DAY)

    with pytest.raises(ConfigError, match="below the table's delta.deletedFileRetentionDuration"):
        lh.vacuum("kv", 1)
    before = _data_files(root)
    dry = lh.vacuum("kv", dry_run=True)
    assert _data_files(root) == before
    markers = {m.key for m in lh.store.list("_lakevilla/markers/kv/")}
    rep = lh.vacuum("kv")
    assert rep.deleted == dry.deleted
    assert rep.oldest_retained_version == 5 and rep.latest_version == 6  # marker 7 is not in the log
    # marker objects of versions the log holds are removed; the running transaction's (7) is kept
    assert {m.key for m in lh.store.list("_lakevilla/markers/kv/")} == {"_lakevilla/markers/kv/" + f"{7:020d}.json"}
    assert rep.markers_removed == len(markers) - 1
    only_old = set().union(*(files[v] for v in range(5))) - files[5] - files[6]
    assert set(rep.deleted) == only_old | {"part-orphan-old.parquet"}
    assert len(only_old) == 1  # row 1's first file, replaced at v5
    assert _data_files(root) == before - set(rep.deleted)
    for v in (5, 6):  # every retained version still reads, with the same rows
        assert _rows(url, v) == expected[v]
    with pytest.raises(Exception):  # noqa: B017 - v4 needed the deleted file
        _rows(url, 4)

    # Without the safety check, RETAIN 0 HOURS keeps only the latest version's files -- and never
    # files of running transactions or the staging folder.
    rep0 = lh.vacuum("kv", 0, enforce_retention=False)
    assert set(rep0.deleted) == (files[5] - files[6]) | {"part-orphan-new.parquet"}
    assert _rows(url, 6) == expected[6]
    assert (root / "_lv_staging" / "part-x-0001-0-s1" / "a.parquet").exists()
    assert (root / next(iter(staged))).exists()
    running.commit()
    assert _rows(url, lh.version("kv"))[9] == 9.0


def test_vacuum_respects_a_shorter_table_retention(tmp_path: Path) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.create_table("kv", "id BIGINT, val DOUBLE")
    from lv_core.delta.checkpoint import interval_ms
    from lv_core.protocol.vacuum import retention_hours

    assert interval_ms("interval 2 hours") == 7_200_000
    assert retention_hours({"delta.deletedFileRetentionDuration": "interval 1 day"}) == 24
    assert retention_hours({}) == 168
    with pytest.raises(ConfigError, match="168 hours"):
        lh.vacuum("kv", 24)
    with pytest.raises(ConfigError, match="negative"):
        lh.vacuum("kv", -1, enforce_retention=False)
    assert lh.vacuum("kv", 200).deleted == []


def _add(path: str, size: int, part: str | None = None) -> AddFile:
    return AddFile(path, {"p": part} if part else {}, size, 0, True, None)


def test_bins_pack_small_files_per_partition() -> None:
    files = [_add("a", 10), _add("b", 20), _add("c", 500), _add("d", 60), _add("e", 30, "x"), _add("f", 40, "x"),
             _add("g", 5, "y")]
    got = [[f.path for f in b] for b in bins(files, 100)]
    assert got == [["a", "b", "d"], ["e", "f"]]  # c is big enough; g is alone in its partition
    assert bins([_add("a", 10)], 100) == []


def test_parse_maintenance_statements() -> None:
    st = parse_statement("OPTIMIZE kv")
    assert (st.kind, st.spec.name) == ("optimize", "kv")
    st = parse_statement("vacuum `kv` retain 0 hours dry run")
    assert (st.kind, st.spec.name, st.spec.retain_hours, st.spec.dry_run) == ("vacuum", "kv", 0.0, True)
    st = parse_statement("VACUUM kv RETAIN 24.5 HOURS")
    assert (st.spec.retain_hours, st.spec.dry_run) == (24.5, False)
    from lv_core.engine.sql_ast import SqlError, UnsupportedStatement
    with pytest.raises(UnsupportedStatement, match="ZORDER"):
        parse_statement("OPTIMIZE kv ZORDER BY (id)")
    for bad in ["OPTIMIZE", "VACUUM kv RETAIN x HOURS", "VACUUM kv RETAIN 5 DAYS"]:
        with pytest.raises(SqlError):
            parse_statement(bad)
