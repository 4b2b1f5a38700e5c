"""Interoperability with delta-rs, both ways: what one writes, the other reads identically."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lv_core.delta import CommitInfo, DeltaLog, DeltaSchema, Snapshot, commit, create_table, replay
from lv_core.delta.writer import write_data_files
from lv_core.storage.base import ObjectStore
from lv_core.storage.local import LocalStore


def append(store: ObjectStore, table: str, snap: Snapshot, data: pa.Table, removes: tuple = ()) -> Snapshot:
    adds = write_data_files(store, table, snap, data)
    actions = [CommitInfo.create("WRITE", {"mode": "Append"}), *removes, *adds]
    commit(store, table, snap.version + 1, actions)
    return replay(snap, [(snap.version + 1, actions)])


def sorted_rows(t: pa.Table) -> list[dict]:
    return t.sort_by([("id", "ascending")]).to_pylist()


def delta_rs_files(dt_: DeltaTable, root: Path) -> set[str]:
    return {str(Path(u).relative_to(root)) for u in dt_.file_uris()}


def delta_rs_schema(dt_: DeltaTable) -> DeltaSchema:
    return DeltaSchema.from_json(dt_.schema().to_json())


FULL_DDL = ("id BIGINT, balance DOUBLE NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP, d DATE, "
            "flag BOOLEAN, b BINARY, f FLOAT, i INT, s SMALLINT, t TINYINT")


def full_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": ids, "balance": [float(i) * 1.5 for i in ids], "name": [f"n{i}" if i % 3 else None for i in ids],
        "amount": [Decimal(f"{i}.25") for i in ids],
        "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i, microseconds=7)
               for i in ids],
        "d": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids], "flag": [i % 2 == 0 for i in ids],
        "b": [bytes([i % 256]) for i in ids], "f": [i / 4 for i in ids], "i": ids, "s": ids,
        "t": [i % 100 for i in ids],
    })


def test_lv_table_read_by_delta_rs(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "acc", FULL_DDL)
    snap = append(store, "acc", snap, full_rows(0, 5))
    snap = append(store, "acc", snap, full_rows(5, 3))
    victim = next(iter(snap.files.values()))
    snap = append(store, "acc", snap, full_rows(100, 1), removes=(victim.remove(),))
    arrow = snap.schema.to_arrow()
    expected = sorted_rows(pa.concat_tables([full_rows(5, 3).cast(arrow), full_rows(100, 1).cast(arrow)]))

    table = DeltaTable(str(tmp_path / "acc"))
    assert table.version() == 3 == snap.version
    assert delta_rs_schema(table) == snap.schema
    assert sorted_rows(table.to_pyarrow_table()) == expected
    assert delta_rs_files(table, tmp_path / "acc") == set(snap.files)
    # delta-rs understands our stats
    adds = pa.table(table.get_add_actions(flatten=True))
    by_path = {p: n for p, n in zip(adds.column("path").to_pylist(), adds.column("num_records").to_pylist(),
                                    strict=False)}
    assert sorted(by_path.values()) == sorted(a.num_records for a in snap.files.values())
    assert sorted(adds.column("max.id").to_pylist()) == [7, 100]
    # time travel
    assert len(DeltaTable(str(tmp_path / "acc"), version=1).to_pyarrow_table()) == 5


def test_lv_partitioned_table_read_by_delta_rs(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "ev", "id BIGINT, region STRING, day DATE, v DOUBLE", partition_by=["region", "day"])
    data = pa.table({"id": [1, 2, 3, 4], "region": ["eu west", "us/east", None, "eu west"],
                     "day": [dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 1), None],
                     "v": [0.5, 1.5, 2.5, 3.5]})
    snap = append(store, "ev", snap, data)
    assert len(snap.files) == 4
    assert {a.path.split("/part-")[0] for a in snap.files.values()} == {
        "region=eu west/day=2024-05-01", "region=us%2Feast/day=2024-05-02",  # Spark's folder escaping
        "region=__HIVE_DEFAULT_PARTITION__/day=2024-05-01", "region=eu west/day=__HIVE_DEFAULT_PARTITION__"}
    table = DeltaTable(str(tmp_path / "ev"))
    assert table.metadata().partition_columns == ["region", "day"]
    assert sorted_rows(table.to_pyarrow_table()) == sorted_rows(data.cast(snap.schema.to_arrow()))
    assert delta_rs_files(table, tmp_path / "ev") == set(snap.files)
    # and delta-rs can append to it with partitions of its own
    write_deltalake(str(tmp_path / "ev"), pa.table({"id": [5], "region": ["a%b"], "day": [dt.date(2024, 1, 1)],
                                                    "v": [9.0]}), mode="append")
    s = DeltaLog(store, "ev").snapshot()
    assert s.version == 2 and len(s.files) == 5
    assert sorted({a.partition_values["region"] for a in s.files.values()}, key=str) == sorted(
        {"eu west", "us/east", None, "a%b"}, key=str)
    new = [p for p in s.files if "a%25b" in p]
    assert len(new) == 1 and (tmp_path / "ev" / new[0]).exists()


@pytest.mark.parametrize("checkpoint_at", [None, 3, 6])
@pytest.mark.parametrize("partitioned", [False, True])
def test_delta_rs_tables_load_identically(tmp_path: Path, checkpoint_at: int | None, partitioned: bool) -> None:
    uri = str(tmp_path / "t")
    kw = {"partition_by": ["p"]} if partitioned else {}
    for v in range(8):
        data = pa.table({"id": [v * 10, v * 10 + 1], "p": [f"k {v % 3}", "x/y"], "x": [1.0, None]})
        mode = "error" if v == 0 else ("overwrite" if v == 5 else "append")
        write_deltalake(uri, data, mode=mode, **kw)
        if v == checkpoint_at:
            DeltaTable(uri).create_checkpoint()
    store = LocalStore(tmp_path)
    log = DeltaLog(store, "t")
    for version in (None, 2, 5, 7):
        table = DeltaTable(uri, version=version) if version is not None else DeltaTable(uri)
        for method in ("list", "probe"):
            s = log.snapshot(version, method=method)
            assert s.version == table.version()
            assert set(s.files) == delta_rs_files(table, tmp_path / "t")
            assert s.schema == delta_rs_schema(table)
            assert list(s.partition_columns) == table.metadata().partition_columns
            assert s.metadata.id == table.metadata().id
            assert s.num_records == len(table.to_pyarrow_table())
            if version is None and checkpoint_at is not None:
                assert s.checkpoint_version == checkpoint_at
            for path, add in s.files.items():
                assert (tmp_path / "t" / path).stat().st_size == add.size


def test_marker_commit_in_the_middle(tmp_path: Path) -> None:
    """An empty commit (commitInfo only, extra fields) between writes: both readers skip it."""
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT")
    snap = append(store, "t", snap, pa.table({"id": [1]}))
    marker = CommitInfo({"timestamp": 1, "operation": "LAKEVILLA MARKER",
                         "lakevilla": {"txn": "t-1", "preds": ["t-0"], "lease_ms": 30000}})
    commit(store, "t", 2, [marker])
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [2]}), mode="append")  # delta-rs writes version 3 after it
    snap = DeltaLog(store, "t").snapshot()
    snap = append(store, "t", snap, pa.table({"id": [3]}))
    table = DeltaTable(uri)
    assert table.version() == 4 and [r["id"] for r in sorted_rows(table.to_pyarrow_table())] == [1, 2, 3]
    assert [r["id"] for r in sorted_rows(DeltaTable(uri, version=2).to_pyarrow_table())] == [1]
    ops = {h["version"]: h.get("operation") for h in table.history()}
    assert ops[2] == "LAKEVILLA MARKER"
    for method in ("list", "probe"):
        s = DeltaLog(store, "t").snapshot(method=method)
        assert s.version == 4 and s.files == snap.files
        assert s.commit_infos[2].get("lakevilla") == {"txn": "t-1", "preds": ["t-0"], "lease_ms": 30000}
        m = DeltaLog(store, "t").snapshot(2, method=method)
        assert m.commit_info == marker and len(m.files) == 1
    # a marker at the very end (latest version) is fine for delta-rs too
    commit(store, "t", 5, [marker])
    assert DeltaTable(uri).version() == 5 and len(DeltaTable(uri).to_pyarrow_table()) == 3
    DeltaTable(uri).create_checkpoint()
    assert DeltaLog(store, "t").snapshot().checkpoint_version == 5


def test_delta_rs_schema_types_round_trip(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array([1], pa.int64()), "ntz": pa.array([1], pa.timestamp("us")),
                     "st": pa.array([{"a": 1, "b": "x"}]), "arr": pa.array([[1, 2]]),
                     "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))})
    write_deltalake(uri, data)
    s = DeltaLog(LocalStore(tmp_path), "t").snapshot()
    assert s.schema == delta_rs_schema(DeltaTable(uri))
    assert s.protocol.reader_features == ("timestampNtz",)
    assert json.loads(s.schema.to_json_string()) == json.loads(DeltaTable(uri).schema().to_json())


def test_lv_timestamp_partitions_read_by_delta_rs(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "tp", "id BIGINT, ts TIMESTAMP, n TIMESTAMP_NTZ, ok BOOLEAN",
                        partition_by=["ts", "n", "ok"])
    data = pa.table({"id": [1, 2],
                     "ts": [dt.datetime(2021, 1, 1, 10, 0, 0, 123456, tzinfo=dt.timezone.utc), None],
                     "n": [dt.datetime(2021, 1, 1, 10, 0, 0, 5), dt.datetime(2022, 1, 1)], "ok": [True, None]})
    snap = append(store, "tp", snap, data)
    table = DeltaTable(str(tmp_path / "tp"))
    assert table.protocol().reader_features == ["timestampNtz"]
    assert sorted_rows(table.to_pyarrow_table()) == sorted_rows(data.cast(snap.schema.to_arrow()))
