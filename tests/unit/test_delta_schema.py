"""Delta schemas: DDL parsing (and its errors), JSON and Arrow conversions."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lv_core.delta.schema import ArrayType, DeltaField, DeltaSchema, MapType, StructType, as_delta_schema, parse_ddl
from lv_core.errors import SchemaError

FULL = ("id BIGINT, balance DOUBLE NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP, d DATE, "
        "flag BOOLEAN, b BINARY, f FLOAT, i INT, s SMALLINT, t TINYINT")


def test_parse_full_example() -> None:
    s = parse_ddl(FULL)
    assert [(f.name, f.type, f.nullable) for f in s.fields] == [
        ("id", "long", True), ("balance", "double", False), ("name", "string", True),
        ("amount", "decimal(10,2)", True), ("ts", "timestamp", True), ("d", "date", True),
        ("flag", "boolean", True), ("b", "binary", True), ("f", "float", True), ("i", "integer", True),
        ("s", "short", True), ("t", "byte", True)]
    assert s.to_arrow() == pa.schema([
        pa.field("id", pa.int64()), pa.field("balance", pa.float64(), False), pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)), pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.date32()), pa.field("flag", pa.bool_()), pa.field("b", pa.binary()),
        pa.field("f", pa.float32()), pa.field("i", pa.int32()), pa.field("s", pa.int16()), pa.field("t", pa.int8())])


def test_synonyms_and_case() -> None:
    s = parse_ddl("a long, B Integer, c real, d varchar(20), e CHAR(3), f timestamp_ntz, g decimal, "
                  "h Numeric(5), `odd name` string not null comment 'the ''x''', i bigint NULL")
    assert [f.type for f in s.fields] == ["long", "integer", "float", "string", "string", "timestamp_ntz",
                                           "decimal(10,0)", "decimal(5,0)", "string", "long"]
    assert s.fields[1].name == "B"
    assert s.fields[8].name == "odd name" and not s.fields[8].nullable
    assert s.fields[9].nullable
    assert s.fields[8].metadata == {"comment": "the 'x'"}
    assert s.fields[5].type == "timestamp_ntz" and s.to_arrow().field("f").type == pa.timestamp("us")


def test_comment_goes_to_metadata() -> None:
    s = parse_ddl("id BIGINT COMMENT 'primary key'")
    assert s.fields[0].metadata == {"comment": "primary key"}


def test_nested_types() -> None:
    s = parse_ddl("tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>, addr STRUCT<city: STRING, zip INT NOT NULL>")
    assert s.fields[0].type == ArrayType("string")
    assert s.fields[1].type == MapType("string", "long")
    assert s.fields[2].type == StructType((DeltaField("city", "string"), DeltaField("zip", "integer", False)))
    back = DeltaSchema.from_arrow(s.to_arrow())
    assert back == s
    assert DeltaSchema.from_json(s.to_json_string()) == s


@pytest.mark.parametrize("ddl, message, pos", [
    ("", "empty schema", None),
    ("   ", "empty schema", None),
    ("id BIGINT, x FOO", "unknown type 'FOO'", 13),
    ("id BIGINT x INT", "expected ',' between columns, found 'x'", 10),
    ("id BIGINT,", "expected a column name, found the end", 10),
    ("id", "expected a type, found the end", 2),
    ("id DECIMAL(40,2)", "invalid DECIMAL(40,2)", 3),
    ("id DECIMAL(5,6)", "invalid DECIMAL(5,6)", 3),
    ("id DECIMAL(5", "expected ')'", 12),
    ("id INT NOT", "expected NULL after NOT", 10),
    ("id INT, ID BIGINT", "duplicate column name 'ID'", 8),
    ("id INT; drop", "unexpected character ';'", 6),
    ("m MAP<STRING>", "expected ','", 12),
    ("s STRUCT<a INT, a INT>", "duplicate column name 'a'", 2),
])
def test_ddl_errors_show_position(ddl: str, message: str, pos: int | None) -> None:
    with pytest.raises(SchemaError) as e:
        parse_ddl(ddl)
    assert message in str(e.value)
    if pos is not None:
        assert f"at position {pos} " in str(e.value)
        caret_line = str(e.value).splitlines()[-1]
        assert caret_line.index("^") - 2 == pos


def test_json_matches_delta_rs_schema_string() -> None:
    delta_rs = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},'
                '{"name":"dec","type":"decimal(10,2)","nullable":true,"metadata":{}}]}')
    s = DeltaSchema.from_json(delta_rs)
    assert s.to_json_string() == delta_rs
    assert s == parse_ddl("id BIGINT, dec DECIMAL(10, 2)")


def test_from_arrow_types() -> None:
    arrow = pa.schema([pa.field("a", pa.large_string()), pa.field("b", pa.timestamp("ns", tz="Europe/Paris")),
                       pa.field("c", pa.timestamp("ms")), pa.field("d", pa.dictionary(pa.int32(), pa.string())),
                       pa.field("e", pa.list_(pa.int64())), pa.field("f", pa.int32(), False)])
    s = DeltaSchema.from_arrow(arrow)
    assert [f.type for f in s.fields] == ["string", "timestamp", "timestamp_ntz", "string", ArrayType("long"),
                                           "integer"]
    assert not s.fields[5].nullable
    with pytest.raises(SchemaError, match="uint32"):
        DeltaSchema.from_arrow(pa.schema([pa.field("u", pa.uint32())]))
    with pytest.raises(SchemaError, match="duplicate"):
        DeltaSchema.from_arrow(pa.schema([pa.field("x", pa.int32()), pa.field("X", pa.int32())]))


def test_unknown_primitive_survives_json_but_not_arrow() -> None:
    text = json.dumps({"type": "struct", "fields": [{"name": "v", "type": "variant", "nullable": True,
                                                      "metadata": {}}]})
    s = DeltaSchema.from_json(text)
    assert json.loads(s.to_json_string()) == json.loads(text)
    with pytest.raises(SchemaError, match="variant"):
        s.to_arrow()


def test_as_delta_schema_and_field_lookup() -> None:
    s = as_delta_schema("Id BIGINT")
    assert as_delta_schema(s) is s
    assert as_delta_schema(pa.schema([("Id", pa.int64())])) == s
    assert s.field("id").name == "Id"
    with pytest.raises(SchemaError, match="no column 'x'"):
        s.field("x")
    with pytest.raises(SchemaError):
        as_delta_schema(42)  # type: ignore[arg-type]
