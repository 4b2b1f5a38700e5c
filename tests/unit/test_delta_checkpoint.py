"""Checkpoints: Parquet round trip, policy, and interoperability with delta-rs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lv_core.delta import (
    AddFile,
    CommitInfo,
    DeltaLog,
    Metadata,
    Protocol,
    RemoveFile,
    Snapshot,
    Txn,
    checkpoint_interval,
    commit,
    create_table,
    replay,
    should_checkpoint,
    write_checkpoint,
)
from lv_core.delta.checkpoint import CHECKPOINT_SCHEMA, checkpoint_actions, decode_checkpoint, encode_checkpoint
from lv_core.delta.writer import write_data_files
from lv_core.errors import DeltaLogError, UnsupportedFeature
from lv_core.storage.base import ObjectStore
from lv_core.storage.local import LocalStore

DAY_MS = 86_400_000


def append(store: ObjectStore, table: str, snap: Snapshot, data: pa.Table, *, remove_first: bool = False,
           extra: tuple = ()) -> Snapshot:
    adds = write_data_files(store, table, snap, data)
    removes = [next(iter(snap.files.values())).remove()] if remove_first and snap.files else []
    actions = [CommitInfo.create("WRITE"), *removes, *adds, *extra]
    commit(store, table, snap.version + 1, actions)
    return replay(snap, [(snap.version + 1, actions)])


def rows(dt: DeltaTable) -> list[dict]:
    return dt.to_pyarrow_table().sort_by([("id", "ascending")]).to_pylist()


def test_encode_decode_round_trip() -> None:
    actions = [
        Protocol(3, 7, ("timestampNtz",), ("timestampNtz", "appendOnly")),
        Metadata("id", '{"type":"struct","fields":[]}', ("p",), {"delta.appendOnly": "true"}, name="n",
                 description="d", format_options={"o": "1"}, created_time=9),
        Txn("app", 3, 77),
        Txn("app2", 1),
        AddFile("p=a%20b/f.parquet", {"p": "a b"}, 100, 5, True, '{"numRecords":2}', {"tag": "x"}),
        AddFile("p=__HIVE_DEFAULT_PARTITION__/g.parquet", {"p": None}, 50, 6, True, None),
        RemoveFile("p=c/h.parquet", 7, True, True, {"p": "c"}, 10, None),
        RemoveFile("old.parquet", 8, False),
    ]
    (blob,) = encode_checkpoint(actions)
    assert pq.ParquetFile(pa.BufferReader(blob)).schema_arrow == CHECKPOINT_SCHEMA
    back = decode_checkpoint(blob)
    assert sorted(map(repr, back)) == sorted(map(repr, actions))
    parts = encode_checkpoint(actions, parts=3)
    assert len(parts) == 3
    merged = [a for p in parts for a in decode_checkpoint(p)]
    assert sorted(map(repr, merged)) == sorted(map(repr, actions))
    with pytest.raises(DeltaLogError):
        encode_checkpoint([CommitInfo({})])


def test_checkpoint_actions_expire_old_tombstones() -> None:
    p, md = Protocol(1, 2), Metadata("id", '{"type":"struct","fields":[]}')
    now = 100 * DAY_MS
    snap = replay(None, [(0, [p, md, RemoveFile("old", now - 8 * DAY_MS), RemoveFile("new", now - DAY_MS),
                              RemoveFile("undated"), AddFile("a", {}, 1, 0)])])
    kept = {a.path for a in checkpoint_actions(snap, now) if isinstance(a, RemoveFile)}
    assert kept == {"new", "undated"}
    md2 = Metadata("id", md.schema_string, configuration={"delta.deletedFileRetentionDuration": "interval 12 hours",
                                                          "delta.setTransactionRetentionDuration": "interval 2 days"})
    snap2 = replay(snap, [(1, [md2, Txn("old", 1, now - 3 * DAY_MS), Txn("new", 1, now)])])
    acts = checkpoint_actions(snap2, now)
    assert {a.path for a in acts if isinstance(a, RemoveFile)} == {"undated"}
    assert {a.app_id for a in acts if isinstance(a, Txn)} == {"new"}


def test_policy() -> None:
    md = Metadata("id", "{}")
    assert checkpoint_interval(md) == 10
    assert checkpoint_interval(Metadata("id", "{}", configuration={"delta.checkpointInterval": "3"})) == 3
    assert checkpoint_interval(Metadata("id", "{}", configuration={"delta.checkpointInterval": "x"})) == 10
    assert [v for v in range(25) if should_checkpoint(v, 10)] == [10, 20]


def test_our_checkpoint_read_identically_by_delta_rs_and_appendable(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT, p STRING, amount DECIMAL(10,2)", partition_by=["p"])
    for i in range(1, 6):
        data = pa.table({"id": [i, i + 100], "p": ["a b", None if i % 2 else "c/d"], "amount": [1.5 * i, None]})
        snap = append(store, "t", snap, data, remove_first=(i == 4), extra=(Txn("app", i, i),))
    uri = str(tmp_path / "t")
    before = rows(DeltaTable(uri, version=5))
    info = write_checkpoint(store, "t", snap)
    assert info == {"version": 5, "size": 2 + 1 + 9 + 1, "sizeInBytes": info["sizeInBytes"], "numOfAddFiles": 9}
    assert json.loads((tmp_path / "t/_delta_log/_last_checkpoint").read_bytes()) == info

    dt = DeltaTable(uri, version=5)
    assert dt.version() == 5 and rows(dt) == before
    assert sorted(dt.file_uris()) == sorted(str(tmp_path / "t" / p) for p in snap.files)
    assert dt.transaction_version("app") == 5
    # ours reads it back identically
    s = DeltaLog(store, "t").snapshot()
    assert s.checkpoint_version == 5 and s.files == snap.files and s.txns == snap.txns
    assert s.tombstones.keys() == snap.tombstones.keys() and s.metadata == snap.metadata

    # delta-rs appends after our checkpoint, and checkpoints itself; we read both
    write_deltalake(uri, pa.table({"id": [999], "p": ["z"], "amount": pa.array([None], pa.decimal128(10, 2))}),
                    mode="append")
    dt = DeltaTable(uri)
    assert dt.version() == 6 and len(rows(dt)) == len(before) + 1
    dt.create_checkpoint()
    s6 = DeltaLog(store, "t").snapshot()
    assert s6.version == 6 and s6.checkpoint_version == 6
    assert sorted(dt.file_uris()) == sorted(str(tmp_path / "t" / p) for p in s6.files)


def test_multi_part_checkpoint_read_by_delta_rs(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT")
    for i in range(1, 4):
        snap = append(store, "t", snap, pa.table({"id": [i]}))
    write_checkpoint(store, "t", snap, parts=2)
    # remove the JSON commits: delta-rs must really use the two parts
    for v in range(0, 3):
        (tmp_path / f"t/_delta_log/{v:020d}.json").unlink()
    dt = DeltaTable(str(tmp_path / "t"))
    assert dt.version() == 3 and [r["id"] for r in rows(dt)] == [1, 2, 3]
    assert DeltaLog(store, "t").snapshot().files == snap.files


def test_last_checkpoint_never_moves_back(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snaps = [create_table(store, "t", "id BIGINT")]
    for i in range(1, 4):
        snaps.append(append(store, "t", snaps[-1], pa.table({"id": [i]})))
    write_checkpoint(store, "t", snaps[3])
    write_checkpoint(store, "t", snaps[2])
    assert json.loads(store.get("t/_delta_log/_last_checkpoint").data)["version"] == 3
    # a second checkpoint of the same version is a no-op (put-if-absent)
    write_checkpoint(store, "t", snaps[3])
    assert DeltaLog(store, "t").snapshot().checkpoint_version == 3


def test_refuses_tables_with_unsupported_features(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT")
    snap = replay(snap, [(1, [Protocol(1, 7, None, ("rowTracking",))])])
    with pytest.raises(UnsupportedFeature, match="rowTracking"):
        write_checkpoint(store, "t", snap)


def test_reads_delta_rs_checkpoint_with_stats_parsed_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1, 2], "s": ["x", "y"]}))
    write_deltalake(uri, pa.table({"id": [3], "s": ["z"]}), mode="append")
    DeltaTable(uri).create_checkpoint()
    s = DeltaLog(LocalStore(tmp_path), "t").snapshot()
    assert s.checkpoint_version == 1 and s.num_records == 3
    assert all(a.stats and "numRecords" in a.stats for a in s.files.values())
