"""Table features: what we read, what we refuse to write, and a crafted deletion-vector table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lv_core.delta import DeltaLog, commit, create_table
from lv_core.delta.actions import AddCDCFile, AddFile, CommitInfo, Metadata, Protocol, RemoveFile, decode_commit
from lv_core.delta.features import (
    check_changes,
    check_identity_update,
    check_readable,
    check_writable,
    constraints,
    is_append_only,
    required_protocol,
    type_changes,
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
    (Protocol(3, 7, ("variantShredding-preview",), ("variantShredding-preview",)), {}, "variantShredding-preview"),
    (Protocol(4, 7), {}, "readerVersion4"),
])
def test_unreadable(protocol: Protocol, config: dict, feature: str) -> None:
    with pytest.raises(UnsupportedFeature) as e:
        check_readable(protocol, md(config), table="t")
    assert feature in str(e.value) and e.value.feature == feature
    with pytest.raises(UnsupportedFeature):
        check_writable(protocol, md(config), table="t")


@pytest.mark.parametrize("protocol, config, feature", [
    (Protocol(1, 7, None, ("rowTracking", "domainMetadata")), {}, "rowTracking"),
    (Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",)), {}, "v2Checkpoint"),
    (Protocol(1, 7, None, ("domainMetadata",)), {}, "domainMetadata"),
    (Protocol(1, 7, None, ("clustering",)), {}, "clustering"),
    (Protocol(1, 7, None, ("icebergCompatV2",)), {}, "icebergCompatV2"),
    (Protocol(1, 2), {"delta.enableInCommitTimestamps": "true"}, "inCommitTimestamp"),  # asked, not declared
    (Protocol(1, 7, None, ("someFutureFeature",)), {}, "someFutureFeature"),
    (Protocol(3, 7, ("variantType",), ("variantType",)), {}, "variantType"),  # read by Spark, never written
    (Protocol(3, 7, ("variantType-preview",), ("variantType-preview",)), {}, "variantType-preview"),
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


def test_change_data_feed_is_writable() -> None:
    """Writes to such tables come with change data files (refused without them by check_changes)."""
    check_writable(Protocol(1, 4), md({"delta.enableChangeDataFeed": "true"}))
    check_writable(Protocol(1, 7, None, ("changeDataFeed",)), md({"delta.enableChangeDataFeed": "true"}))
    add = AddFile("a.parquet", {}, 1, 0)
    with pytest.raises(UnsupportedFeature, match="change data files"):
        check_changes(Protocol(1, 4), md({"delta.enableChangeDataFeed": "true"}), adds=[add], rows_checked=True)
    check_changes(Protocol(1, 4), md({"delta.enableChangeDataFeed": "true"}), adds=[add], rows_checked=True,
                  cdc=[AddCDCFile("_change_data/a.parquet", {}, 1)])
    with pytest.raises(UnsupportedFeature, match="column-mapped"):
        check_writable(Protocol(2, 5), md({"delta.enableChangeDataFeed": "true", "delta.columnMapping.mode": "name",
                                           "delta.columnMapping.maxColumnId": "0"}))


def _schema_with_field_metadata(key: str, value: object) -> str:
    obj = json.loads(SCHEMA.to_json_string())
    obj["fields"][0]["metadata"] = {key: value}
    return json.dumps(obj)


@pytest.mark.parametrize("key, value, feature", [
    ("delta.generationExpression", "id * 2", "generatedColumns"),
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
    assert e.value.feature == "checkConstraints"
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
    assert e.value.feature == "appendOnly"
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


def test_create_table_with_change_data_feed_declares_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    create_table2(store, "cdf", "id BIGINT", configuration={"delta.enableChangeDataFeed": True})
    first = decode_commit(store.get("cdf/_delta_log/00000000000000000000.json").data)
    assert Protocol(1, 4) in first


def _widened(changes: list[dict], typ: str = "long") -> Metadata:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": typ, "nullable": True, "metadata": {"delta.typeChanges": changes}},
        {"name": "s", "type": {"type": "struct", "fields": [
            {"name": "a", "type": {"type": "array", "elementType": "double", "containsNull": True}, "nullable": True,
             "metadata": {"delta.typeChanges": [{"fromType": "float", "toType": "double", "fieldPath": "element"}]}}]},
         "nullable": True, "metadata": {}}]}
    return Metadata("x", json.dumps(schema), (), {"delta.enableTypeWidening": "true"})


@pytest.mark.parametrize("feature", ["typeWidening", "typeWidening-preview"])
@pytest.mark.parametrize("old, new", [("integer", "long"), ("byte", "short"), ("short", "long"), ("integer", "double"),
                                      ("float", "double"), ("date", "timestamp_ntz"),
                                      ("decimal(5,2)", "decimal(12,4)"), ("decimal(10,2)", "decimal(11,3)"),
                                      ("integer", "decimal(10,0)"), ("long", "decimal(22,2)")])
def test_type_widening_is_read_and_written(feature: str, old: str, new: str) -> None:
    p = Protocol(3, 7, ("timestampNtz", feature), ("timestampNtz", feature))
    m = _widened([{"fromType": old, "toType": new, "tableVersion": 1}], new)
    check_readable(p, m)
    check_writable(p, m)  # writers write the table's (wide) types; delta.enableTypeWidening only allows changes
    assert [path for path, _c in type_changes(m)] == ["id", "s.a.element"]


@pytest.mark.parametrize("old, new", [("long", "integer"), ("string", "long"), ("long", "double"),
                                      ("decimal(10,2)", "decimal(10,3)"), ("decimal(10,2)", "decimal(9,2)"),
                                      ("integer", "decimal(9,0)"), ("long", "decimal(20,1)"),
                                      ("timestamp", "timestamp_ntz"), ("double", "float"), ("date", "timestamp")])
def test_unsupported_type_change_is_refused(old: str, new: str) -> None:
    p = Protocol(3, 7, ("typeWidening",), ("typeWidening",))
    for check in (check_readable, check_writable):
        with pytest.raises(UnsupportedFeature) as e:
            check(p, _widened([{"fromType": old, "toType": new}], new), table="t")
        msg = str(e.value)
        assert "'t'" in msg and "'id'" in msg and repr(old) in msg and repr(new) in msg and "Spark" in msg
        assert e.value.feature == "typeWidening"


def test_unparsable_type_changes_are_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="delta.typeChanges"):
        check_readable(Protocol(3, 7, ("typeWidening",), ("typeWidening",)), _widened("long"))  # type: ignore[arg-type]


def test_widened_column_is_never_skipped_by_stats() -> None:
    """A float32 0.1 (stats: 0.1) reads as the double 0.10000000149...: pruning ``id > 0.1`` by the old
    file's stats as if they were doubles would lose the row."""
    from lv_core.delta.schema import DeltaSchema
    from lv_core.engine.skipping import file_filter

    schema = DeltaSchema.from_json(_widened([{"fromType": "float", "toType": "double"}], "double").schema_string or "")
    old_file = AddFile("a.parquet", {}, 1, 0, True, json.dumps(
        {"numRecords": 1, "minValues": {"id": 0.1}, "maxValues": {"id": 0.1}, "nullCount": {"id": 0}}))
    assert file_filter("id > 0.1", schema)(old_file)
    assert file_filter("id = 0.10000000149011612", schema)(old_file)


def test_identity_columns_take_rewrites_but_not_new_rows() -> None:
    m = md(schema_json=_schema_with_field_metadata("delta.identity.start", 1))
    for p in (Protocol(1, 6), Protocol(1, 7, None, ("identityColumns",))):
        check_writable(p, m, table="t")  # UPDATE/DELETE that keep the identity values are allowed
        add = AddFile("a.parquet", {}, 1, 0, True)
        check_changes(p, m, adds=[add], removes=[RemoveFile("b.parquet", 0)], identity_kept=True, table="t")
        check_changes(p, m, removes=[RemoveFile("b.parquet", 0)], table="t")
        with pytest.raises(UnsupportedFeature) as e:
            check_changes(p, m, adds=[add], table="t")
        assert e.value.feature == "identityColumns"
        assert all(s in str(e.value) for s in ("'t'", "identity column 'id'", "nothing was written", "Spark"))
    check_identity_update(m, ["v"], "t")
    with pytest.raises(UnsupportedFeature, match="column 'id' is an identity column.*cannot be updated"):
        check_identity_update(m, ["ID"], "t")


def test_has_variant_finds_nested_variants() -> None:
    from lv_core.delta.features import has_variant
    from lv_core.delta.schema import DeltaSchema

    def schema(t: object) -> DeltaSchema:
        return DeltaSchema.from_json(json.dumps({"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "x", "type": t, "nullable": True, "metadata": {}}]}))

    assert not has_variant(schema("string")) and not has_variant(None)
    assert has_variant(schema("variant"))
    assert has_variant(schema({"type": "array", "elementType": "variant", "containsNull": True}))
    assert has_variant(schema({"type": "map", "keyType": "string", "valueType": "variant", "valueContainsNull": True}))
    assert has_variant(schema({"type": "struct", "fields": [
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}))


@pytest.mark.parametrize(("feature", "way_out"), [
    ("catalogManaged", "through the catalog"),
    ("catalogOwned-preview", "through the catalog"),
    ("adaptiveMetadata", "Delta 4.x"),
    ("icebergNativeV4", "Iceberg client"),
    ("variantShredding-preview", "Delta 4.x"),
    ("variantShredding", "Delta 4.x"),
])
def test_formats_the_log_reader_cannot_follow_are_refused_with_the_way_out(tmp_path: Path, feature: str,
                                                                          way_out: str) -> None:
    """Issue 36: refused before anything runs, naming the feature, why and what to use instead; a
    transaction reading such a table changes nothing."""
    import lv_core
    from lv_core.engine import arrow_ops as ops

    with pytest.raises(UnsupportedFeature) as e:
        check_readable(Protocol(3, 7, (feature,), (feature,)), md(), table="t")
    assert e.value.feature == feature and feature in str(e.value) and way_out in str(e.value)
    root = tmp_path / "wh" / "t"
    (root / "_delta_log").mkdir(parents=True)
    lines = [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [feature],
                           "writerFeatures": [feature]}},
             {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                           "schemaString": SCHEMA.to_json_string(), "partitionColumns": [], "configuration": {}}}]
    (root / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    lh = lv_core.connect(str(tmp_path / "wh"))
    for preset in ("serializable", "delta", "repeatable_read"):
        txn = lh.begin(preset)
        with pytest.raises(UnsupportedFeature, match=feature):
            txn.execute(ops.read("t"))
        txn.rollback()
        if preset == "delta":  # serializable and delta: nothing written at all (not even to the global log)
            assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # repeatable_read placed its marker beside the log before reading, and freed it: the table is unchanged
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "_lakevilla" not in p.parts) == before


def test_create_table_with_variant_is_refused_by_feature_not_as_a_bad_type(tmp_path: Path) -> None:
    """VARIANT is a Delta type LakeVilla cannot write: UnsupportedFeature with the way out, nothing created."""
    import lv_core

    lh = lv_core.connect(str(tmp_path / "wh"))
    with pytest.raises(UnsupportedFeature) as e:
        lh.create_table("v", "id BIGINT, j VARIANT")
    assert e.value.feature == "variantType" and "Spark/Delta" in str(e.value)
    assert lh.list_tables() == []
