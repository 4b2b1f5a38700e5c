"""In-commit timestamps (issue 17, Delta ``inCommitTimestamp``): every version LakeVilla writes to such a
table (commits of every preset, multi-table commits, the empty commits of freed markers, reverts) starts
with a commitInfo whose ``inCommitTimestamp`` is larger than the previous version's, and delta-rs reads
the table. Pyarrow operations, no Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.engine import arrow_ops as ops
from lv_core.errors import UnsupportedFeature
from lv_core.protocol import ict
from lv_core.protocol.markers import encode_freed
from lv_core.storage.local import LocalStore
from tests.helpers import feature_fixtures as ff

pytestmark = pytest.mark.usefixtures("log_immutability")

NEW = pa.Table.from_pylist([{"id": 4, "v": "d"}], schema=ff.SCHEMA)
ON = {"delta.enableInCommitTimestamps": "true"}


def stamps(root: Path) -> list[int]:
    """Each version's in-commit timestamp; asserts the commitInfo is its first action."""
    out = []
    for f in sorted((root / "_delta_log").glob("*.json")):
        first = json.loads(f.read_text().split("\n", 1)[0])
        assert "commitInfo" in first, f"{f.name}: the first action is not the commitInfo"
        value = first["commitInfo"].get("inCommitTimestamp")
        assert isinstance(value, int), f"{f.name}: inCommitTimestamp {value!r}"
        out.append(value)
    return out


def assert_increasing(root: Path) -> list[int]:
    ts = stamps(root)
    assert all(b > a for a, b in zip(ts, ts[1:], strict=False)), ts
    return ts


@pytest.mark.parametrize("preset", ["delta", "repeatable_read", "snapshot", "serializable"])
def test_every_preset_stamps_its_commits(tmp_path: Path, preset: str) -> None:
    root = tmp_path / "wh" / "ict"
    ff.in_commit_timestamp_table(root)  # version 0 is stamped an hour ahead of this machine's clock
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        with lh.transaction(preset) as txn:
            txn.execute(ops.append("ict", NEW))
        with lh.transaction(preset) as txn:
            txn.execute(ops.delete("ict", ops.eq("id", 2)))
    finally:
        lh.close()
    ts = assert_increasing(root)
    assert ts[1] == ts[0] + 1  # the clock is behind the previous commit: one millisecond after it
    assert ff.delta_rows(root) == [r for r in ff.ROWS if r["id"] != 2] + NEW.to_pylist()


def test_multi_table_commit_and_freed_markers_are_stamped(tmp_path: Path) -> None:
    for t in ("a", "b"):
        ff.in_commit_timestamp_table(tmp_path / "wh" / t, ict=1_000)  # long ago: the clock wins
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        with lh.transaction("repeatable_read") as txn:  # LV[CT]: a decision, then both parts
            txn.execute(ops.append("a", NEW))
            txn.execute(ops.delete("b", ops.eq("id", 1)))
        txn = lh.begin("repeatable_read")  # reads place markers; a rollback frees them as empty commits
        txn.execute(ops.read("a"))
        txn.execute(ops.read("b"))
        txn.rollback()
        with lh.transaction("serializable") as txn:  # reads one table, writes the other
            txn.execute(ops.read("a"))
            txn.execute(ops.append("b", NEW))
        versions = {t: lh.version(t) for t in ("a", "b")}
    finally:
        lh.close()
    for t in ("a", "b"):
        ts = assert_increasing(tmp_path / "wh" / t)
        assert len(ts) == versions[t] + 1 >= 3 and ts[1] > 1_000_000  # the machine's clock, not prev + 1
    assert ff.delta_rows(tmp_path / "wh" / "a") == ff.ROWS + NEW.to_pylist()
    assert ff.delta_rows(tmp_path / "wh" / "b") == [r for r in ff.ROWS if r["id"] != 1] + NEW.to_pylist()


def test_tables_created_with_in_commit_timestamps(tmp_path: Path) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        lh.create_table("c", "id BIGINT, v STRING", properties=ON)
        lh.sql("CREATE TABLE s (id BIGINT) TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
        with lh.transaction() as txn:
            txn.execute(ops.append("c", NEW))
        for t in ("c", "s"):
            snap = lh.snapshot(t)
            assert snap.protocol.min_writer_version == 7
            assert "inCommitTimestamp" in (snap.protocol.writer_features or ())
        with pytest.raises(UnsupportedFeature, match="row tracking") as e:
            lh.create_table("d", "id BIGINT", properties={"delta.enableRowTracking": "true"})
        assert e.value.feature == "rowTracking" and not lh.has_table("d")
    finally:
        lh.close()
    assert len(assert_increasing(tmp_path / "wh" / "c")) == 2 and len(stamps(tmp_path / "wh" / "s")) == 1
    assert ff.delta_rows(tmp_path / "wh" / "c") == NEW.to_pylist()


def test_a_table_asking_for_in_commit_timestamps_without_the_feature_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "wh" / "half"
    ff.hand_written_table(root, protocol={"minReaderVersion": 1, "minWriterVersion": 2}, configuration=ON)
    before = ff.delta_state(root)
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        txn = lh.begin()
        with pytest.raises(UnsupportedFeature, match="in-commit timestamps") as e:
            txn.execute(ops.append("half", NEW))
        assert e.value.feature == "inCommitTimestamp"
        txn.rollback()
    finally:
        lh.close()
    assert ff.delta_state(root) == before


# -- sealing (pure, plus the one GET of the version below) -----------------------------------------------

def _store(tmp_path: Path, prev: dict[str, Any] | None) -> LocalStore:
    store = LocalStore(str(tmp_path))
    if prev is not None:
        (tmp_path / "t" / "_delta_log").mkdir(parents=True)
        (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").write_text(json.dumps({"commitInfo": prev}) + "\n")
    return store


def test_seal_is_deterministic_and_compares_with_the_plan(tmp_path: Path) -> None:
    store = _store(tmp_path, {"timestamp": 5, "inCommitTimestamp": 9_000_000_000_000})
    planned = encode_freed("txn1", "freed", ict=True)
    assert ict.unsealed(planned)
    a, b = ict.seal(store, "t", 1, planned), ict.seal(store, "t", 1, planned)
    assert a == b and ict.stamped(a) == 9_000_000_000_001 and not ict.unsealed(a)
    assert ict.same_commit(a, planned) and not ict.same_commit(a, encode_freed("txn2", "freed", ict=True))
    plain = encode_freed("txn1", "freed")
    assert ict.seal(store, "t", 1, plain) is plain  # no in-commit timestamp asked for: bytes as they are
    with pytest.raises(lv_core.LvError, match="version 4 of table 't' is not in the log"):
        ict.seal(store, "t", 5, planned)
