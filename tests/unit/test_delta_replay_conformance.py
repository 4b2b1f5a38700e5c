"""Log replay conformance: the true latest version (LIST when the cheap path cannot prove it),
checkpoint-only and vacuumed logs, stale / missing / ahead ``_last_checkpoint``, gaps, multi-part and
V2 checkpoints (JSON and Parquet, sidecars), reader features at later versions, and valid log lines
that are unusual (a ``metaData`` without ``schemaString``, an extra top-level key).

Every fixture is built here (with ``deltalake`` writes or hand-written logs following the Delta
protocol) and read with ``deltalake`` too, to prove it right: version and data files must agree.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

import lv_core
from lv_core.delta import DeltaLog
from lv_core.delta.checkpoint import CHECKPOINT_SCHEMA, write_checkpoint
from lv_core.delta.errors import VersionNotFound
from lv_core.engine import arrow_ops as ops
from lv_core.errors import DeltaLogError, LvError, UnsupportedFeature
from lv_core.storage.local import LocalStore

SCHEMA_JSON = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True,
                                                        "metadata": {}}]})
P12 = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
CATALOG_OWNED = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["catalogOwned-preview"],
                              "writerFeatures": ["catalogOwned-preview"]}}
PV2 = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["v2Checkpoint"],
                    "writerFeatures": ["v2Checkpoint"]}}


def metadata(schema: bool = True) -> dict[str, Any]:
    md: dict[str, Any] = {"id": "8d1c5e7a-0000-4000-8000-000000000001",
                          "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                          "configuration": {}, "createdTime": 1700000000000}
    if schema:
        md["schemaString"] = SCHEMA_JSON
    return {"metaData": md}


class Log:
    """A hand-written table ``<root>/t``: data files and log files named per the Delta protocol."""

    def __init__(self, root: Path, name: str = "t") -> None:
        self.dir = root / name
        self.log = self.dir / "_delta_log"
        self.log.mkdir(parents=True)

    def data(self, name: str, ids: list[int]) -> dict[str, Any]:
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), self.dir / name)
        return {"add": {"path": name, "partitionValues": {}, "size": (self.dir / name).stat().st_size,
                        "modificationTime": 1700000000000, "dataChange": True,
                        "stats": json.dumps({"numRecords": len(ids)})}}

    def commit(self, version: int, *actions: dict[str, Any]) -> None:
        (self.log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")

    def last_checkpoint(self, content: dict[str, Any]) -> None:
        (self.log / "_last_checkpoint").write_text(json.dumps(content))

    def remove(self, *names: str) -> None:
        for n in names:
            (self.log / n).unlink()


def commit_name(v: int) -> str:
    return f"{v:020d}.json"


def dl_view(folder: Path, version: int | None = None) -> tuple[int, list[str]]:
    """What deltalake reads: (version, data files relative to the table)."""
    dt = DeltaTable(str(folder)) if version is None else DeltaTable(str(folder), version=version)
    files = sorted(os.path.relpath(u.removeprefix("file://"), folder) for u in dt.file_uris())
    return dt.version(), files


def lv_view(lh: lv_core.Lakehouse, name: str = "t", version: int | None = None) -> tuple[int, list[str]]:
    snap = lh.snapshot(name, version)
    return snap.version, sorted(snap.files)


def rows(folder: Path, files: list[str]) -> list[int]:
    return sorted(i for f in files for i in pq.read_table(folder / f)["id"].to_pylist())


def dl_append(folder: Path, ids: list[int]) -> None:
    write_deltalake(str(folder), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")


def deltalake_table(folder: Path, commits: int) -> None:
    """Versions 0..commits-1, each appending one row (id = version)."""
    for v in range(commits):
        dl_append(folder, [v])


def lv_append(lh: lv_core.Lakehouse, ids: list[int], name: str = "t") -> None:
    txn = lh.begin("delta")
    txn.execute(ops.append(name, pa.table({"id": pa.array(ids, pa.int64())})))
    txn.commit()


# ---------------------------------------------------------------------------------------------- latest version

def test_vacuumed_log_without_commit_0_or_last_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    deltalake_table(folder, 4)
    DeltaTable(str(folder)).create_checkpoint()  # at version 3
    dl_append(folder, [4])
    dl_append(folder, [5])
    for name in [commit_name(v) for v in range(4)] + ["_last_checkpoint"]:
        (folder / "_delta_log" / name).unlink()
    expected = dl_view(folder)
    assert expected[0] == 5 and rows(folder, expected[1]) == [0, 1, 2, 3, 4, 5]

    lh = lv_core.connect(str(tmp_path))
    assert "t" in lh.list_tables()
    assert lh.version("t") == 5
    assert lv_view(lh) == expected
    assert DeltaLog(LocalStore(tmp_path), "t").latest_version_by_probe() == 5
    assert DeltaLog(LocalStore(tmp_path), "t").snapshot(method="probe").version == 5


@pytest.mark.parametrize("with_hint", [True, False], ids=["last_checkpoint", "no_last_checkpoint"])
def test_checkpoint_only_log(tmp_path: Path, with_hint: bool) -> None:
    folder = tmp_path / "t"
    deltalake_table(folder, 3)
    DeltaTable(str(folder)).create_checkpoint()
    for p in (folder / "_delta_log").glob("*.json"):
        p.unlink()
    if not with_hint:
        (folder / "_delta_log" / "_last_checkpoint").unlink()
    assert sorted(p.name for p in (folder / "_delta_log").iterdir()) == (
        [f"{2:020d}.checkpoint.parquet"] + (["_last_checkpoint"] if with_hint else []))
    expected = dl_view(folder)
    assert expected[0] == 2 and rows(folder, expected[1]) == [0, 1, 2]

    lh = lv_core.connect(str(tmp_path))
    assert "t" in lh.list_tables()
    assert lh.version("t") == 2
    assert lv_view(lh) == expected
    with pytest.raises(VersionNotFound):
        lh.snapshot("t", 1)  # covered only by the checkpoint: cleaned up


def test_stale_last_checkpoint_behind_a_newer_checkpoint(tmp_path: Path) -> None:
    """``_last_checkpoint`` names checkpoint 2; checkpoint 6 is newer and commits 4..6 are gone."""
    folder = tmp_path / "t"
    deltalake_table(folder, 3)
    dt = DeltaTable(str(folder))
    dt.create_checkpoint()
    stale = (folder / "_delta_log" / "_last_checkpoint").read_bytes()
    for v in range(3, 7):
        dl_append(folder, [v])
    DeltaTable(str(folder)).create_checkpoint()  # at 6
    dl_append(folder, [7])
    dl_append(folder, [8])
    (folder / "_delta_log" / "_last_checkpoint").write_bytes(stale)
    for v in (4, 5, 6):
        (folder / "_delta_log" / commit_name(v)).unlink()
    assert json.loads(stale)["version"] == 2
    expected = dl_view(folder)
    assert expected[0] == 8 and rows(folder, expected[1]) == list(range(9))

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 8  # probing from the hint alone would stop at 3
    assert lv_view(lh) == expected
    assert DeltaLog(LocalStore(tmp_path), "t").snapshot(8, method="probe").version == 8
    assert lv_view(lh, version=3) == dl_view(folder, 3)


def test_last_checkpoint_ahead_of_the_files(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.commit(0, P12, metadata(), log.data("a.parquet", [1, 2]))
    log.commit(1, log.data("b.parquet", [3]))
    expected = dl_view(log.dir)  # proven without the bogus hint (deltalake refuses a hint without checkpoint)
    assert expected == (1, ["a.parquet", "b.parquet"])
    log.last_checkpoint({"version": 50, "size": 3})

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 1
    assert lv_view(lh) == expected
    assert DeltaLog(LocalStore(tmp_path), "t").latest_version_by_probe() == 1


def test_last_checkpoint_names_a_missing_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    deltalake_table(folder, 3)
    DeltaTable(str(folder)).create_checkpoint()
    dl_append(folder, [3])
    (folder / "_delta_log" / f"{2:020d}.checkpoint.parquet").unlink()
    hint = (folder / "_delta_log" / "_last_checkpoint").read_bytes()
    (folder / "_delta_log" / "_last_checkpoint").unlink()
    expected = dl_view(folder)
    assert expected[0] == 3 and rows(folder, expected[1]) == [0, 1, 2, 3]
    (folder / "_delta_log" / "_last_checkpoint").write_bytes(hint)

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 3
    assert lv_view(lh) == expected
    assert DeltaLog(LocalStore(tmp_path), "t").snapshot(method="probe").version == 3


def test_gap_in_commits_is_a_clear_error_naming_the_missing_versions(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.commit(0, P12, metadata(), log.data("f0.parquet", [0]))
    for v in range(1, 14):
        log.commit(v, log.data(f"f{v}.parquet", [v]))
    assert dl_view(log.dir) == (13, sorted(f"f{v}.parquet" for v in range(14)))  # fixture right before the gap
    log.remove(commit_name(12))
    with pytest.raises(DeltaError):  # deltalake refuses the gap too
        DeltaTable(str(log.dir)).file_uris()

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 13  # not 11
    with pytest.raises(DeltaLogError, match=r"missing for versions \[12\]"):
        lh.snapshot("t")
    with pytest.raises(DeltaLogError, match=r"\[12\]"):
        lh.snapshot("t", 13)
    assert lv_view(lh, version=11)[0] == 11
    with pytest.raises(LvError):
        lv_append(lh, [99])
    assert not (log.log / commit_name(14)).exists()  # nothing written


def test_reader_feature_added_at_a_later_version_is_checked(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.commit(0, P12, metadata(), log.data("a.parquet", [1]))
    log.commit(1, log.data("b.parquet", [2]))
    log.commit(2, CATALOG_OWNED)
    with pytest.raises(DeltaError):  # deltalake refuses the latest version too
        DeltaTable(str(log.dir))
    expected_v1 = dl_view(log.dir, 1)
    assert expected_v1 == (1, ["a.parquet", "b.parquet"])

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 2
    with pytest.raises(UnsupportedFeature, match="catalogOwned-preview"):
        lh.snapshot("t")
    assert lv_view(lh, version=1) == expected_v1
    with pytest.raises(UnsupportedFeature, match="catalogOwned-preview"):
        lv_append(lh, [3])
    assert not (log.log / commit_name(3)).exists()  # nothing written


def test_reader_feature_after_a_stale_last_checkpoint_is_seen(tmp_path: Path) -> None:
    """A cold start that trusted ``_last_checkpoint`` + probing would stop before the new protocol."""
    log = Log(tmp_path)
    log.commit(0, P12, metadata(), log.data("a.parquet", [1]))
    log.commit(1, log.data("b.parquet", [2]))
    DeltaTable(str(log.dir)).create_checkpoint()  # at 1, _last_checkpoint -> 1
    stale = (log.log / "_last_checkpoint").read_bytes()
    log.commit(2, log.data("c.parquet", [3]))
    DeltaTable(str(log.dir)).create_checkpoint()  # at 2
    (log.log / "_last_checkpoint").write_bytes(stale)
    log.remove(commit_name(2))  # covered by checkpoint 2
    log.commit(3, CATALOG_OWNED)
    assert dl_view(log.dir, 2) == (2, ["a.parquet", "b.parquet", "c.parquet"])
    with pytest.raises(DeltaError):
        DeltaTable(str(log.dir))
    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 3
    with pytest.raises(UnsupportedFeature, match="catalogOwned-preview"):
        lh.snapshot("t")


# ---------------------------------------------------------------------------------------------- valid log lines

def test_metadata_without_schema_string_superseded_later(tmp_path: Path) -> None:
    """A Databricks DLT table: version 0 declares the table before its schema is known."""
    log = Log(tmp_path)
    log.commit(0, P12, metadata(schema=False), {"commitInfo": {"operation": "CREATE TABLE"}})
    log.commit(1, metadata(), log.data("a.parquet", [1, 2]))
    # delta-rs (delta-kernel-rs) refuses the null schemaString itself; prove the rest of the fixture
    # with the same log where version 0 carries the schema
    proof = Log(tmp_path / "proof")
    proof.commit(0, P12, metadata(), {"commitInfo": {"operation": "CREATE TABLE"}})
    proof.commit(1, metadata(), proof.data("a.parquet", [1, 2]))
    expected = dl_view(proof.dir)
    assert expected == (1, ["a.parquet"])

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 1
    assert lv_view(lh) == expected
    assert lh.snapshot("t").schema.to_json_string() == lv_core.delta.DeltaSchema.from_json(SCHEMA_JSON).to_json_string()
    with pytest.raises(DeltaLogError, match="no schema at version 0"):
        _ = lh.snapshot("t", 0).schema
    lv_append(lh, [3])
    version, files = lv_view(lh)
    assert version == 2 and rows(log.dir, files) == [1, 2, 3]


def test_log_line_with_an_extra_top_level_key(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.commit(0, P12 | {"futureTopLevel": {"x": 1}}, metadata(), log.data("a.parquet", [1]))
    log.commit(1, log.data("b.parquet", [2]) | {"anotherKey": 7}, {"commitInfo": {"operation": "WRITE"}, "z": None})
    expected = dl_view(log.dir)
    assert expected == (1, ["a.parquet", "b.parquet"])

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 1
    assert lv_view(lh) == expected


# ---------------------------------------------------------------------------------------------- checkpoints

def test_multi_part_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    deltalake_table(folder, 4)
    store = LocalStore(tmp_path)
    write_checkpoint(store, "t", DeltaLog(store, "t").snapshot(), parts=2)
    dl_append(folder, [4])
    for v in range(4):
        (folder / "_delta_log" / commit_name(v)).unlink()
    names = sorted(p.name for p in (folder / "_delta_log").glob("*.checkpoint.*"))
    assert names == [f"{3:020d}.checkpoint.{i:010d}.0000000002.parquet" for i in (1, 2)]
    expected = dl_view(folder)
    assert expected[0] == 4 and rows(folder, expected[1]) == [0, 1, 2, 3, 4]

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 4
    assert lv_view(lh) == expected


def _v2_checkpoint(log: Log, version: int, adds: list[dict[str, Any]], fmt: str, *, classic_name: bool = False,
                   sidecars: bool = True) -> str:
    """Write a V2-spec checkpoint of ``version`` (protocol PV2, metaData, file actions in a sidecar)."""
    non_file: list[dict[str, Any]] = [{"checkpointMetadata": {"version": version, "tags": {}}}, PV2, metadata()]
    if sidecars:
        (log.log / "_sidecars").mkdir(exist_ok=True)
        side = f"{uuid.uuid4()}.parquet"
        schema = pa.schema([CHECKPOINT_SCHEMA.field("add"), CHECKPOINT_SCHEMA.field("remove")])
        pq.write_table(pa.Table.from_pylist([{"add": a["add"] | {"tags": None}} for a in adds], schema=schema),
                       log.log / "_sidecars" / side)
        non_file.append({"sidecar": {"path": side, "sizeInBytes": (log.log / "_sidecars" / side).stat().st_size,
                                     "modificationTime": 1700000000000, "tags": {}}})
        file_actions: list[dict[str, Any]] = []
    else:
        file_actions = adds
    name = (f"{version:020d}.checkpoint.parquet" if classic_name
            else f"{version:020d}.checkpoint.{uuid.uuid4()}.{fmt}")
    if fmt == "json":
        (log.log / name).write_text("\n".join(json.dumps(a) for a in non_file + file_actions) + "\n")
        return name
    tags = pa.map_(pa.string(), pa.string())
    schema = pa.schema(list(CHECKPOINT_SCHEMA) + [
        pa.field("checkpointMetadata", pa.struct([pa.field("version", pa.int64(), False), pa.field("tags", tags)])),
        pa.field("sidecar", pa.struct([pa.field("path", pa.string(), False), pa.field("sizeInBytes", pa.int64(), False),
                                       pa.field("modificationTime", pa.int64(), False), pa.field("tags", tags)])),
    ])
    table_rows = []
    for a in non_file + file_actions:
        (key, body), = a.items()
        body = dict(body)
        if key in ("checkpointMetadata", "sidecar"):
            body["tags"] = list(body["tags"].items())
        if key == "add":
            body["tags"] = None
        table_rows.append({key: body})
    pq.write_table(pa.Table.from_pylist(table_rows, schema=schema), log.log / name)
    return name


@pytest.mark.parametrize("fmt, classic_name, sidecars, hint", [
    ("json", False, True, "v2"),
    ("json", False, False, "none"),
    ("parquet", False, True, "v2"),
    ("parquet", False, True, "none"),
    ("parquet", True, True, "classic"),
], ids=["json-sidecars-hint", "json-inline-nohint", "parquet-sidecars-hint", "parquet-sidecars-nohint",
        "classic-named-v2"])
def test_v2_checkpoints(tmp_path: Path, fmt: str, classic_name: bool, sidecars: bool, hint: str) -> None:
    log = Log(tmp_path)
    a, b = log.data("a.parquet", [1, 2]), log.data("b.parquet", [3])
    log.commit(0, PV2, metadata(), a)
    log.commit(1, b)
    name = _v2_checkpoint(log, 1, [a, b], fmt, classic_name=classic_name, sidecars=sidecars)
    log.commit(2, log.data("c.parquet", [4]))
    log.remove(commit_name(0), commit_name(1))
    if hint == "v2":
        log.last_checkpoint({"version": 1, "size": 4, "v2Checkpoint": {
            "path": name, "sizeInBytes": (log.log / name).stat().st_size, "modificationTime": 1700000000000,
            "nonFileActions": [], "sidecarFiles": []}})
    elif hint == "classic":
        log.last_checkpoint({"version": 1, "size": 4})
    # deltalake (delta-kernel-rs) replays V2 checkpoints; its pyarrow reader refuses the feature, so compare files
    expected = dl_view(log.dir)
    assert expected == (2, ["a.parquet", "b.parquet", "c.parquet"])

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 2
    assert lv_view(lh) == expected
    snap = DeltaLog(LocalStore(tmp_path), "t").snapshot(method="probe")
    assert (snap.version, sorted(snap.files), snap.checkpoint_version) == (2, expected[1], 1)
    assert snap.protocol.reader_features == ("v2Checkpoint",)


# ---------------------------------------------------------------------------------------------- end to end

def test_deltalake_table_checkpointed_and_cleaned_up_is_read_and_appended(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    deltalake_table(folder, 5)
    DeltaTable(str(folder)).create_checkpoint()  # at 4
    dl_append(folder, [5])
    for v in range(4):  # what metadata cleanup leaves: the checkpoint covers the deleted commits
        (folder / "_delta_log" / commit_name(v)).unlink()
    (folder / "_delta_log" / commit_name(4)).unlink()
    expected = dl_view(folder)
    assert expected[0] == 5

    lh = lv_core.connect(str(tmp_path))
    assert lh.version("t") == 5
    assert lv_view(lh) == expected
    lv_append(lh, [100, 101])
    assert lh.version("t") == 6
    dt = DeltaTable(str(folder))
    assert dt.version() == 6
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3, 4, 5, 100, 101]
    assert lv_view(lh) == dl_view(folder)
