"""Checkpoints are written at ``delta.checkpointInterval`` under every preset, the ``delta`` baseline
included, and plain Delta readers (delta-rs) read the same table through them."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import lv_core
from lv_core.delta import CommitInfo, DeltaLog, commit, create_table
from lv_core.engine import arrow_ops as ops
from lv_core.txn.cleaner import drain
from tests.helpers.bank import committed_kv, make_kv

PRESETS = ["serializable", "snapshot", "write_serializable", "repeatable_read", "delta"]


def _append(lh: lv_core.Lakehouse, preset: str, table: str, key: int) -> None:
    txn = lh.begin(preset)
    txn.execute(ops.append(table, pa.table({"id": pa.array([key], pa.int64()), "val": pa.array([1.0], pa.float64())})))
    txn.commit()


def _checkpoints(root: Path, table: str) -> list[int]:
    drain(60.0)  # checkpoints are written in the background, after the commit returned
    return sorted(int(p.name.split(".")[0]) for p in (root / table / "_delta_log").glob("*.checkpoint*.parquet"))


@pytest.mark.parametrize("preset", PRESETS)
def test_checkpoint_every_10_commits_under_every_preset(tmp_path: Path, preset: str) -> None:
    lh = lv_core.connect(str(tmp_path))
    make_kv(lh, "kv", {1: 1.0})  # versions 0 (create) and 1
    for k in range(2, 22):
        _append(lh, preset, "kv", k)
    assert lh.version("kv") == 21
    assert _checkpoints(tmp_path, "kv") == [10, 20]
    assert DeltaLog(lh.store, "kv").read_last_checkpoint()["version"] == 20  # type: ignore[index]
    assert committed_kv(lh, "kv") == {k: 1.0 for k in range(1, 22)}
    # a reader that starts from the checkpoint sees the same files as delta-rs
    snap = DeltaLog(lh.store, "kv").snapshot(method="probe")
    assert snap.checkpoint_version == 20
    theirs = {u.rsplit("/", 1)[1] for u in deltalake.DeltaTable(str(tmp_path / "kv")).file_uris()}
    assert set(snap.files) == theirs
    lh.close()


@pytest.mark.parametrize("interval", [3, 7])
def test_checkpoint_interval_of_the_table(tmp_path: Path, interval: int) -> None:
    lh = lv_core.connect(str(tmp_path))
    create_table(lh.store, "kv", "id BIGINT, val DOUBLE", configuration={"delta.checkpointInterval": str(interval)})
    for k in range(1, 15):
        _append(lh, "delta" if k % 2 else "serializable", "kv", k)
    assert _checkpoints(tmp_path, "kv") == [v for v in range(1, 15) if v % interval == 0]
    lh.close()


def test_due_checkpoint_after_commits_of_others(tmp_path: Path) -> None:
    """The commit at a due version was made over an older snapshot (others committed in between):
    the checkpoint still holds every version up to it."""
    lh = lv_core.connect(str(tmp_path))
    make_kv(lh, "kv", {1: 1.0})
    for k in range(2, 8):
        _append(lh, "delta", "kv", k)  # versions 2..7
    base = lh.snapshot("kv")
    other = lv_core.connect(str(tmp_path))
    for k in (8, 9):
        _append(other, "delta", "kv", k)  # versions 8, 9 by another client
    actions = [CommitInfo.create("WRITE", {"mode": "Append"})]
    commit(lh.store, "kv", 10, actions)
    lh.after_commit("kv", 10, base, actions)
    assert _checkpoints(tmp_path, "kv") == [10]
    snap = DeltaLog(lh.store, "kv").snapshot()
    assert snap.checkpoint_version == 10
    assert committed_kv(lh, "kv") == {k: 1.0 for k in range(1, 10)}
    lh.close()
    other.close()
