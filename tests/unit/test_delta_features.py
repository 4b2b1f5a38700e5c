"""Table features: what we read, what we refuse to write, and a crafted deletion-vector table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lv_core.delta import DeltaLog, commit, create_table
from lv_core.delta.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from lv_core.delta.features import (
    check_changes,
    check_readable,
    check_writable,
    constraints,
    is_append_only,
    required_protocol,
)
from lv_core.delta.schema import parse_ddl
from lv_core.delta.table import create_table as create_table2
from lv_core.errors import SchemaError, UnsupportedFeature
from lv_core.storage.local import LocalStore

SCHEMA = parse_ddl("id BIGINT, v STRING")


def md(config: dict | None = None, schema_json: str | None = None) -> Metadata:
    return Metadata("x", schema_json or SCHEMA.to_json_string(), (), config or {})


def test_plain_tables_are_readable_and_writable() -> None:
    for p in (Protocol(1, 1), Protocol(1, 2), Protocol(1, 3), Protocol(1, 4), Protocol(1, 6)):
        check_readable(p, md())
        check_writable(p, md())
    check_writable(Protocol(3, 7, ("timestampNtz",), ("timestampNtz", "appendOnly")), md())
    check_writable(Protocol(3, 7, ("vacuumProtocolCheck",), ("vacuumProtocolCheck",)), md())
    check_readable(Protocol(2, 5), md({"delta.columnMapping.mode": "none"}))
    # deletion vectors: read, and written copy-on-write (no writer has to write a DV)
    check_writable(Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)),
                   md({"delta.enableDeletionVectors": "true"}))
    check_writable(Protocol(1, 2), md({"delta.enableDeletionVectors": "true"}))


@pytest.mark.parametrize("protocol, config, feature", [
    (Protocol(2, 5), {"delta.columnMapping.mode": "position"}, "columnMapping"),
    (Protocol(3, 7, ("typeWidening",), ("typeWidening",)), {}, "typeWidening"),
    (Protocol(3, 7, ("variantType",), ("variantType",)), {}, "variantType"),
    (Protocol(4, 7), {}, "readerVersion4"),
])
def test_unreadable(protocol: Protocol, config: dict, feature: str) -> None:
    with pytest.raises(UnsupportedFeature) as e:
        check_readable(protocol, md(config), table="t")
    assert feature in str(e.value) and e.value.feature == feature  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedFeature):
        check_writable(protocol, md(config), table="t")


@pytest.mark.parametrize("protocol, config, feature", [
    (Protocol(1, 7, None, ("rowTracking", "domainMetadata")), {}, "rowTracking"),
    (Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)), {}, "v2Checkpoint"),
    (Protocol(1, 7, None, ("domainMetadata",)), {}, "domainMetadata"),
    (Protocol(1, 7, None, ("clustering",)), {}, "clustering"),
    (Protocol(1, 7, None, ("icebergCompatV2",)), {}, "icebergCompatV2"),
    (Protocol(1, 7, None, ("inCommitTimestamp",)), {}, "inCommitTimestamp"),
    (Protocol(1, 7, None, ("someFutureFeature",)), {}, "someFutureFeature"),
    (Protocol(1, 4), {"delta.enableChangeDataFeed": "true"}, "changeDataFeed"),
    (Protocol(1, 7, None, ("changeDataFeed",)), {"delta.enableChangeDataFeed": "true"}, "changeDataFeed"),
    (Protocol(1, 8), {}, "writerVersion8"),
])
def test_refused_for_writing_only(protocol: Protocol, config: dict, feature: str) -> None:
    check_readable(protocol, md(config))
    with pytest.raises(UnsupportedFeature) as e:
        check_writable(protocol, md(config), table="bank_x")
    msg = str(e.value)
    assert feature in msg and "never writes" in msg and "'bank_x'" in msg


@pytest.mark.parametrize("protocol", [Protocol(2, 5), Protocol(2, 6), Protocol(3, 7, ("columnMapping",),
                                                                           ("columnMapping",))])
@pytest.mark.parametrize("mode", ["name", "id", "none"])
def test_column_mapping_is_read_and_written(protocol: Protocol, mode: str) -> None:
    check_readable(protocol, md({"delta.columnMapping.mode": mode}))
    check_writable(protocol, md({"delta.columnMapping.mode": mode}))


@pytest.mark.parametrize("protocol", [Protocol(1, 2), Protocol(1, 4), Protocol(3, 7, ("timestampNtz",),
                                                                           ("timestampNtz",))])
def test_column_mapping_without_protocol_support_is_not_written(protocol: Protocol, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFeature, match="does not declare column mapping"):
        check_writable(protocol, md({"delta.columnMapping.mode": "name"}), table="t")
    store = LocalStore(tmp_path)
    with pytest.raises(UnsupportedFeature, match="columnMapping"):
        create_table(store, "cm", "id BIGINT", configuration={"delta.columnMapping.mode": "name"})
    assert not list(store.list("cm/"))  # nothing written


def test_supported_writer_features_while_unused() -> None:
    check_writable(Protocol(1, 7, None, ("changeDataFeed", "checkConstraints", "invariants",
                                         "generatedColumns", "identityColumns")), md())
    check_writable(Protocol(1, 4), md({"delta.enableChangeDataFeed": "false"}))


def _schema_with_field_metadata(key: str, value: object) -> str:
    obj = json.loads(SCHEMA.to_json_string())
    obj["fields"][0]["metadata"] = {key: value}
    return json.dumps(obj)


@pytest.mark.parametrize("key, value, feature", [
    ("delta.generationExpression", "id * 2", "generatedColumns"),
    ("delta.identity.start", 1, "identityColumns"),
])
def test_in_use_column_features_refused(key: str, value: object, feature: str) -> None:
    m = md(schema_json=_schema_with_field_metadata(key, value))
    check_readable(Protocol(1, 6), m)
    with pytest.raises(UnsupportedFeature, match=feature):
        check_writable(Protocol(1, 6), m)


def test_constraints_and_invariants_are_writable_when_the_rows_are_checked() -> None:
    """CHECK constraints and invariants are in use but writable: the data plane must check the rows."""
    inv = md({"delta.constraints.pos": "id > 0", "delta.constraints.Big": "id < 100"},
             schema_json=_schema_with_field_metadata("delta.invariants", '{"expression":{"expression":"id > 3"}}'))
    for p in (Protocol(1, 3), Protocol(1, 2), Protocol(1, 7, None, ("checkConstraints", "invariants"))):
        check_writable(p, inv, table="t")
    assert constraints(inv) == [("CHECK constraint 'Big'", "id < 100"), ("CHECK constraint 'pos'", "id > 0"),
                                ("invariant of column 'id'", "id > 3")]
    assert constraints(md()) == []
    add = AddFile("a.parquet", {}, 1, 1)
    check_changes(Protocol(1, 3), inv, adds=[add], rows_checked=True, table="t")
    check_changes(Protocol(1, 3), inv, removes=[add.remove()], table="t")  # removes add no rows
    check_changes(Protocol(1, 3), inv, adds=[AddFile("b.parquet", {}, 1, 1, data_change=False)], table="t")
    with pytest.raises(UnsupportedFeature) as e:
        check_changes(Protocol(1, 3), inv, adds=[add], table="t")
    assert "CHECK constraint 'Big'" in str(e.value) and "'t'" in str(e.value) and "Spark" in str(e.value)
    assert e.value.feature == "checkConstraints"  # type: ignore[attr-defined]
    bad = md(schema_json=_schema_with_field_metadata("delta.invariants", "not json"))
    with pytest.raises(SchemaError, match="invariant"):
        constraints(bad)


def test_append_only_refuses_data_changing_removes() -> None:
    ao = md({"delta.appendOnly": "true"})
    p = Protocol(1, 2)
    add = AddFile("a.parquet", {}, 1, 1)
    check_changes(p, ao, adds=[add], table="t")  # appends are fine
    check_changes(p, ao, adds=[add], removes=[RemoveFile("old.parquet", data_change=False)], table="t")  # compaction
    with pytest.raises(UnsupportedFeature) as e:
        check_changes(p, ao, adds=[add], removes=[add.remove()], table="t")
    msg = str(e.value)
    assert "append-only" in msg and "appendOnly" in msg and "INSERT" in msg and "'t'" in msg
    assert e.value.feature == "appendOnly"  # type: ignore[attr-defined]
    check_changes(p, md(), removes=[add.remove()], table="t")


def test_append_only_and_required_protocol() -> None:
    assert is_append_only(md({"delta.appendOnly": "true"}))
    assert not is_append_only(md())
    assert required_protocol(SCHEMA) == Protocol(1, 2)
    p = required_protocol(parse_ddl("t TIMESTAMP_NTZ"), {"delta.appendOnly": True})
    assert p == Protocol(3, 7, ("timestampNtz",), ("timestampNtz", "appendOnly"))


def test_crafted_unreadable_table_is_refused(tmp_path: Path) -> None:
    """A table whose protocol (in a later commit) enables someFutureReaderFeature cannot be read by us."""
    store = LocalStore(tmp_path)
    create_table(store, "dv", "id BIGINT")
    commit(store, "dv", 1, [CommitInfo({"operation": "UPGRADE PROTOCOL"}),
                            Protocol(3, 7, ("someFutureReaderFeature",), ("someFutureReaderFeature",))])
    log = DeltaLog(store, "dv")
    for method in ("list", "probe"):
        with pytest.raises(UnsupportedFeature) as e:
            log.snapshot(method=method)
        assert "someFutureReaderFeature" in str(e.value) and "'dv'" in str(e.value)
    assert log.snapshot(check=False).protocol.reader_features == ("someFutureReaderFeature",)


def test_create_table_refuses_feature_configuration(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(UnsupportedFeature, match="changeDataFeed"):
        create_table2(store, "cdf", "id BIGINT", configuration={"delta.enableChangeDataFeed": True})
    assert not list(store.list("cdf/"))
