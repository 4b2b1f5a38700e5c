"""Table names, CREATE TABLE and put-if-absent commits."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from lv_core.delta import (
    CommitChanged,
    CommitInfo,
    DeltaLog,
    Txn,
    VersionConflict,
    commit,
    create_table,
    table_exists,
    validate_table_name,
)
from lv_core.errors import DeltaLogError, InvalidTableName, SchemaError, TableExists
from lv_core.storage.base import IfMatch
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore


@pytest.fixture()
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path)


@pytest.mark.parametrize("name", ["bank_x", "Bank-X", "t1", "a.b", "ümlaut", "with space", "x" * 255])
def test_valid_names(name: str) -> None:
    assert validate_table_name(name) == name


@pytest.mark.parametrize("name, why", [
    ("", "empty"),
    ("a/b", "path separator"),
    ("a\\b", "path separator"),
    ("..", "'..'"),
    ("a..b", "'..'"),
    (".hidden", "starts with '.'"),
    ("_lakevilla", "reserved"),
    ("_x", "reserved"),
    ("tab\there", "control character"),
    ("nl\n", "control character"),
    ("del\x7f", "control character"),
    ("x" * 256, "256 characters"),
    (" padded", "whitespace"),
])
def test_invalid_names(name: str, why: str) -> None:
    with pytest.raises(InvalidTableName) as e:
        validate_table_name(name)
    assert why in str(e.value)
    assert "Allowed:" in str(e.value)


def test_non_string_name() -> None:
    with pytest.raises(InvalidTableName):
        validate_table_name(3)  # type: ignore[arg-type]


def test_create_table_writes_version_0(store: LocalStore) -> None:
    snap = create_table(store, "bank_x", "id BIGINT, balance DOUBLE NOT NULL", description="accounts",
                        configuration={"delta.appendOnly": False, "delta.checkpointInterval": 5})
    assert snap.version == 0 and not snap.files
    assert snap.schema.names == ["id", "balance"]
    assert snap.metadata.description == "accounts"
    assert snap.configuration == {"delta.appendOnly": "false", "delta.checkpointInterval": "5"}
    lines = [json.loads(x) for x in store.get("bank_x/_delta_log/00000000000000000000.json").data.splitlines()]
    assert [next(iter(x)) for x in lines] == ["commitInfo", "protocol", "metaData"]
    assert lines[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert lines[0]["commitInfo"]["operation"] == "CREATE TABLE"
    loaded = DeltaLog(store, "bank_x").snapshot()
    assert loaded.metadata == snap.metadata and loaded.protocol == snap.protocol
    assert table_exists(store, "bank_x") and not table_exists(store, "nope")


def test_create_table_from_arrow_partitioned(store: LocalStore) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    snap = create_table(store, "events", schema, partition_by=["DAY"])
    assert snap.partition_columns == ("day",)


def test_create_table_exists(store: LocalStore) -> None:
    create_table(store, "t", "id BIGINT")
    with pytest.raises(TableExists, match="'t' already exists"):
        create_table(store, "t", "id BIGINT")


def test_create_table_exists_when_only_checkpoint_left(store: LocalStore) -> None:
    """A table whose early commits were cleaned up has no 0.json, but still exists."""
    store.put("old/_delta_log/_last_checkpoint", b'{"version":30,"size":3}')
    with pytest.raises(TableExists):
        create_table(store, "old", "id BIGINT")


@pytest.mark.parametrize("schema, parts, msg", [
    ("id BIGINT", ["nope"], "no column 'nope'"),
    ("id BIGINT", ["id"], "all columns"),
    ("id BIGINT, a ARRAY<INT>", ["a"], "primitive"),
    ("id BIGINT, p INT, q INT", ["p", "P"], "twice"),
    ("", None, "empty schema"),
])
def test_create_table_bad_schema(store: LocalStore, schema: str, parts: list | None, msg: str) -> None:
    with pytest.raises(SchemaError, match=msg):
        create_table(store, "t", schema, partition_by=parts)


def test_create_table_bad_name(store: LocalStore) -> None:
    with pytest.raises(InvalidTableName):
        create_table(store, "_lakevilla", "id BIGINT")


def test_create_table_timestamp_ntz_protocol(store: LocalStore) -> None:
    snap = create_table(store, "ntz", "t TIMESTAMP_NTZ")
    assert snap.protocol.min_reader_version == 3 and snap.protocol.reader_features == ("timestampNtz",)


def test_create_table_request_count(tmp_path: Path) -> None:
    """CREATE TABLE costs 1 HEAD (``_last_checkpoint`` must be absent: a cleaned-up table has no
    ``0.json``) and 1 PUT-create (version 0, put-if-absent). Nothing else: no LIST, no GET."""
    store = InstrumentedStore(LocalStore(tmp_path))
    create_table(store, "t", "id BIGINT")
    assert {k: v for k, v in store.counts().items() if v} == {"HEAD": 1, "PUT-create": 1}


def test_commit_put_if_absent_conflict(store: LocalStore) -> None:
    create_table(store, "t", "id BIGINT")
    etag = commit(store, "t", 1, [CommitInfo({"operation": "MARKER"})])
    with pytest.raises(VersionConflict) as e:
        commit(store, "t", 1, [CommitInfo({"operation": "WRITE"})])
    assert isinstance(e.value, DeltaLogError) and e.value.version == 1 and e.value.table == "t"
    assert "Help:" in str(e.value)
    # the marker owner replaces its marker conditionally
    etag2 = commit(store, "t", 1, [CommitInfo({"operation": "WRITE"}), Txn("a", 1)], mode=IfMatch(etag))
    assert etag2 != etag
    with pytest.raises(CommitChanged):
        commit(store, "t", 1, [CommitInfo({"operation": "X"})], mode=IfMatch(etag))
    with pytest.raises(CommitChanged):
        commit(store, "t", 9, [CommitInfo({"operation": "X"})], mode=IfMatch(etag))
    assert DeltaLog(store, "t").snapshot().txns["a"].version == 1


def test_commit_refuses_blind_overwrite_and_empty(store: LocalStore) -> None:
    with pytest.raises(ValueError):
        commit(store, "t", 0, [CommitInfo({})], mode="overwrite")
    with pytest.raises(ValueError):
        commit(store, "t", 0, [])
