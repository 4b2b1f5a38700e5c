"""Delta table schemas: the JSON struct type <-> :class:`pyarrow.Schema`, and a SQL DDL parser.

Types are modelled as in the Delta spec: a primitive is its name (``"long"``, ``"decimal(10,2)"``,
``"timestamp_ntz"`` ...), complex types are :class:`ArrayType`, :class:`MapType`, :class:`StructType`.
Unknown primitive names (e.g. ``variant``) survive a JSON round trip but cannot become Arrow types.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, NoReturn, Optional, Sequence, Union

import pyarrow as pa

from lv_core.errors import SchemaError, UnsupportedFeature

__all__ = ["ArrayType", "DataType", "DeltaField", "DeltaSchema", "MapType", "StructType", "parse_ddl"]

PRIMITIVES = ("string", "long", "integer", "short", "byte", "float", "double", "boolean", "binary",
              "date", "timestamp", "timestamp_ntz")
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class ArrayType:
    element_type: "DataType"
    contains_null: bool = True


@dataclass(frozen=True)
class MapType:
    key_type: "DataType"
    value_type: "DataType"
    value_contains_null: bool = True


@dataclass(frozen=True)
class DeltaField:
    """One column: name, type, nullability and metadata (comments, invariants, column mapping ...).

    ``metadata`` is not part of equality: two schemas are equal when names, types and nullability are.
    """

    name: str
    type: "DataType"
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class StructType:
    fields: tuple[DeltaField, ...]


DataType = Union[str, ArrayType, MapType, StructType]


# --------------------------------------------------------------------------- JSON
def _type_to_json(t: DataType) -> Any:
    if isinstance(t, str):
        return t
    if isinstance(t, ArrayType):
        return {"type": "array", "elementType": _type_to_json(t.element_type), "containsNull": t.contains_null}
    if isinstance(t, MapType):
        return {"type": "map", "keyType": _type_to_json(t.key_type), "valueType": _type_to_json(t.value_type),
                "valueContainsNull": t.value_contains_null}
    return {"type": "struct", "fields": [_field_to_json(f) for f in t.fields]}


def _field_to_json(f: DeltaField) -> dict[str, Any]:
    return {"name": f.name, "type": _type_to_json(f.type), "nullable": f.nullable, "metadata": dict(f.metadata)}


def _type_from_json(obj: Any) -> DataType:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, Mapping):
        raise SchemaError(f"bad Delta type {obj!r}")
    kind = obj.get("type")
    if kind == "array":
        return ArrayType(_type_from_json(obj["elementType"]), bool(obj.get("containsNull", True)))
    if kind == "map":
        return MapType(_type_from_json(obj["keyType"]), _type_from_json(obj["valueType"]),
                       bool(obj.get("valueContainsNull", True)))
    if kind == "struct":
        return StructType(tuple(_field_from_json(f) for f in obj.get("fields", ())))
    raise SchemaError(f"bad Delta type {obj!r}")


def _field_from_json(obj: Mapping[str, Any]) -> DeltaField:
    try:
        return DeltaField(str(obj["name"]), _type_from_json(obj["type"]), bool(obj.get("nullable", True)),
                          dict(obj.get("metadata") or {}))
    except (KeyError, TypeError) as e:
        raise SchemaError(f"bad Delta schema field {obj!r}") from e


# --------------------------------------------------------------------------- Arrow
_TO_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}


def _type_to_arrow(t: DataType) -> pa.DataType:
    if isinstance(t, str):
        if t in _TO_ARROW:
            return _TO_ARROW[t]
        m = _DECIMAL.match(t)
        if m:
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        raise SchemaError(f"Delta type {t!r} has no Arrow equivalent here")
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", _type_to_arrow(t.element_type), t.contains_null))
    if isinstance(t, MapType):
        return pa.map_(pa.field("key", _type_to_arrow(t.key_type), False),
                       pa.field("value", _type_to_arrow(t.value_type), t.value_contains_null))
    return pa.struct([_field_to_arrow(f) for f in t.fields])


def _field_to_arrow(f: DeltaField) -> pa.Field:
    md = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in f.metadata.items()}
    return pa.field(f.name, _type_to_arrow(f.type), f.nullable, metadata=md or None)


def _type_from_arrow(t: pa.DataType, where: str) -> DataType:
    simple = [(pa.types.is_int64, "long"), (pa.types.is_int32, "integer"), (pa.types.is_int16, "short"),
              (pa.types.is_int8, "byte"), (pa.types.is_float32, "float"), (pa.types.is_float64, "double"),
              (pa.types.is_boolean, "boolean"), (pa.types.is_date, "date")]
    for pred, name in simple:
        if pred(t):
            return name
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(f"column {where}: decimal precision {t.precision} > 38 is not allowed in Delta")
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return ArrayType(_type_from_arrow(t.value_type, where + "[]"), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(_type_from_arrow(t.key_type, where + ".key"), _type_from_arrow(t.item_type, where + ".value"),
                       t.item_field.nullable)
    if pa.types.is_struct(t):
        return StructType(tuple(_field_from_arrow(t.field(i), where + ".") for i in range(t.num_fields)))
    if pa.types.is_dictionary(t):
        return _type_from_arrow(t.value_type, where)
    raise SchemaError(f"column {where}: Arrow type {t} has no Delta equivalent (cast it, e.g. unsigned -> signed)")


def _field_from_arrow(f: pa.Field, prefix: str = "") -> DeltaField:
    md: dict[str, Any] = {}
    for k, v in (f.metadata or {}).items():
        key = k.decode() if isinstance(k, bytes) else k
        if key.startswith("PARQUET:"):
            continue
        md[key] = v.decode() if isinstance(v, bytes) else v
    return DeltaField(f.name, _type_from_arrow(f.type, prefix + f.name), f.nullable, md)


# --------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class DeltaSchema:
    """A table schema (the top-level Delta struct type)."""

    fields: tuple[DeltaField, ...]

    def __iter__(self) -> Iterator[DeltaField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> DeltaField:
        """The top-level field called ``name`` (exact match, then case-insensitive).

        Raises:
            SchemaError: no such column.
        """
        for f in self.fields:
            if f.name == name:
                return f
        for f in self.fields:
            if f.name.lower() == name.lower():
                return f
        raise SchemaError(f"no column {name!r}; columns are {', '.join(self.names)}")

    def to_json(self) -> dict[str, Any]:
        return _type_to_json(StructType(self.fields))

    def to_json_string(self) -> str:
        """The ``schemaString`` of a ``metaData`` action."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, obj: Union[str, Mapping[str, Any]]) -> "DeltaSchema":
        """Parse a ``schemaString`` (or the already-decoded object)."""
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except ValueError as e:
                raise SchemaError(f"schemaString is not valid JSON: {e}") from e
        t = _type_from_json(obj)
        if not isinstance(t, StructType):
            raise SchemaError("a table schema must be a struct type")
        return cls(t.fields)

    def to_arrow(self) -> pa.Schema:
        return pa.schema([_field_to_arrow(f) for f in self.fields])

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> "DeltaSchema":
        out = cls(tuple(_field_from_arrow(f) for f in schema))
        _check_unique(out.names)
        return out

    def iter_types(self) -> Iterator[tuple[str, DataType, DeltaField]]:
        """Every field at every nesting level: (dotted path, type, field)."""
        def walk(fields: Sequence[DeltaField], prefix: str) -> Iterator[tuple[str, DataType, DeltaField]]:
            for f in fields:
                path = prefix + f.name
                yield path, f.type, f
                yield from walk_type(f.type, path)

        def walk_type(t: DataType, path: str) -> Iterator[tuple[str, DataType, DeltaField]]:
            if isinstance(t, StructType):
                yield from walk(t.fields, path + ".")
            elif isinstance(t, ArrayType):
                yield from walk_type(t.element_type, path + "[]")
            elif isinstance(t, MapType):
                yield from walk_type(t.key_type, path + ".key")
                yield from walk_type(t.value_type, path + ".value")

        return walk(self.fields, "")

    def primitive_types(self) -> set[str]:
        """The names of all primitive types used anywhere (decimal as ``decimal``)."""
        out: set[str] = set()

        def add(t: DataType) -> None:
            if isinstance(t, str):
                out.add("decimal" if t.startswith("decimal") else t)
            elif isinstance(t, ArrayType):
                add(t.element_type)
            elif isinstance(t, MapType):
                add(t.key_type)
                add(t.value_type)

        for _, t, _f in self.iter_types():
            add(t)
        return out


def _check_unique(names: Sequence[str]) -> None:
    seen: dict[str, str] = {}
    for n in names:
        if n.lower() in seen:
            raise SchemaError(f"duplicate column name {n!r} (column names are case-insensitive)")
        seen[n.lower()] = n


# --------------------------------------------------------------------------- DDL
_DDL_SIMPLE = {
    "bigint": "long", "long": "long", "int": "integer", "integer": "integer", "smallint": "short",
    "short": "short", "tinyint": "byte", "byte": "byte", "float": "float", "real": "float",
    "double": "double", "string": "string", "text": "string", "boolean": "boolean", "bool": "boolean",
    "binary": "binary", "date": "date", "timestamp": "timestamp", "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<num>\d+)
  | (?P<str>'(?:[^'\\]|\\.|'')*')
  | (?P<punct>[(),<>:])
""", re.VERBOSE)


@dataclass
class _Tok:
    kind: str
    text: str
    pos: int


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks: list[_Tok] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                self.fail(f"unexpected character {text[pos]!r}", pos)
            if m.lastgroup != "ws":
                self.toks.append(_Tok(m.lastgroup or "", m.group(0), pos))
            pos = m.end()
        self.i = 0

    def fail(self, msg: str, pos: Optional[int] = None) -> NoReturn:
        if pos is None:
            pos = self.toks[self.i].pos if self.i < len(self.toks) else len(self.text)
        snippet = self.text if len(self.text) <= 80 else self.text[max(0, pos - 40):pos + 40]
        offset = pos if len(self.text) <= 80 else pos - max(0, pos - 40)
        raise SchemaError(f"{msg} at position {pos} of the schema:\n  {snippet}\n  {' ' * offset}^")

    def peek(self) -> Optional[_Tok]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def at(self, text: str) -> bool:
        t = self.peek()
        return t is not None and t.text.lower() == text

    def take(self) -> _Tok:
        t = self.peek()
        if t is None:
            self.fail("unexpected end")
        self.i += 1
        return t

    def expect(self, text: str, what: Optional[str] = None) -> _Tok:
        if not self.at(text):
            t = self.peek()
            self.fail(f"expected {what or repr(text)}, found {repr(t.text) if t else 'the end'}")
        return self.take()

    def ident(self, what: str) -> str:
        t = self.peek()
        if t is None or t.kind not in ("ident", "quoted"):
            self.fail(f"expected {what}, found {repr(t.text) if t else 'the end'}")
        self.take()
        return t.text[1:-1].replace("``", "`") if t.kind == "quoted" else t.text

    def number(self, what: str) -> int:
        t = self.peek()
        if t is None or t.kind != "num":
            self.fail(f"expected {what}, found {repr(t.text) if t else 'the end'}")
        self.take()
        return int(t.text)

    def column(self, nested: bool) -> DeltaField:
        name = self.ident("a column name")
        if nested and self.at(":"):
            self.take()
        dtype = self.dtype()
        nullable = True
        md: dict[str, Any] = {}
        while True:
            if self.at("not"):
                self.take()
                self.expect("null", "NULL after NOT")
                nullable = False
            elif self.at("null"):
                self.take()
            elif self.at("comment"):
                self.take()
                t = self.peek()
                if t is None or t.kind != "str":
                    self.fail("expected a quoted comment")
                self.take()
                md["comment"] = re.sub(r"\\(.)", r"\1", t.text[1:-1].replace("''", "'"))
            else:
                break
        return DeltaField(name, dtype, nullable, md)

    def dtype(self) -> DataType:
        t = self.peek()
        if t is None or t.kind != "ident":
            self.fail(f"expected a type, found {repr(t.text) if t else 'the end'}")
        word = t.text.lower()
        self.take()
        if word in _DDL_SIMPLE:
            return _DDL_SIMPLE[word]
        if word in ("decimal", "dec", "numeric"):
            p, s = 10, 0
            if self.at("("):
                self.take()
                p = self.number("a decimal precision")
                if self.at(","):
                    self.take()
                    s = self.number("a decimal scale")
                self.expect(")")
            if not 1 <= p <= 38 or s > p:
                self.fail(f"invalid DECIMAL({p},{s}): precision must be 1..38 and scale <= precision", t.pos)
            return f"decimal({p},{s})"
        if word in ("varchar", "char", "character"):
            if self.at("("):
                self.take()
                self.number("a length")
                self.expect(")")
            return "string"
        if word == "array":
            self.expect("<")
            el = self.dtype()
            self.expect(">")
            return ArrayType(el, True)
        if word == "map":
            self.expect("<")
            k = self.dtype()
            self.expect(",")
            v = self.dtype()
            self.expect(">")
            return MapType(k, v, True)
        if word == "struct":
            self.expect("<")
            fields: list[DeltaField] = []
            if not self.at(">"):
                fields.append(self.column(nested=True))
                while self.at(","):
                    self.take()
                    fields.append(self.column(nested=True))
            self.expect(">", "',' or '>'")
            try:
                _check_unique([f.name for f in fields])
            except SchemaError as e:
                self.fail(str(e), t.pos)
            return StructType(tuple(fields))
        if word == "variant":  # a type Delta knows and LakeVilla cannot write (no variant encoder here)
            raise UnsupportedFeature(
                "the VARIANT type (variantType): LakeVilla cannot write variant values, so it does not create "
                "tables with VARIANT columns. Help: create the table with Spark/Delta (CREATE TABLE ... USING "
                "delta); LakeVilla reads it when Spark reads the files itself (data_path='direct').",
                feature="variantType")
        self.fail(f"unknown type {t.text!r} (known: BIGINT/LONG, INT/INTEGER, SMALLINT, TINYINT, DOUBLE, "
                  "FLOAT/REAL, DECIMAL(p,s), STRING/VARCHAR(n)/CHAR(n), BOOLEAN, BINARY, DATE, TIMESTAMP, "
                  "TIMESTAMP_NTZ, ARRAY<t>, MAP<k,v>, STRUCT<name: t, ...>)", t.pos)


def parse_ddl(ddl: str) -> DeltaSchema:
    """Parse ``"id BIGINT, balance DOUBLE NOT NULL, amount DECIMAL(10,2), ..."`` (case-insensitive).

    Column names may be back-quoted; ``NOT NULL`` and ``COMMENT '...'`` may follow a type.

    Raises:
        SchemaError: the text is not a valid column list; the message shows the position.
    """
    if not isinstance(ddl, str) or not ddl.strip():
        raise SchemaError("empty schema: give columns like 'id BIGINT, name STRING'")
    p = _Parser(ddl)
    fields: list[DeltaField] = []
    seen: set[str] = set()
    while True:
        start = p.peek()
        f = p.column(nested=False)
        if f.name.lower() in seen:
            p.fail(f"duplicate column name {f.name!r} (column names are case-insensitive)",
                   start.pos if start else None)
        seen.add(f.name.lower())
        fields.append(f)
        if p.peek() is None:
            break
        p.expect(",", "',' between columns")
    return DeltaSchema(tuple(fields))


def as_delta_schema(schema: Union[str, pa.Schema, DeltaSchema]) -> DeltaSchema:
    """Accept DDL text, a :class:`pyarrow.Schema` or a :class:`DeltaSchema`."""
    if isinstance(schema, DeltaSchema):
        return schema
    if isinstance(schema, pa.Schema):
        return DeltaSchema.from_arrow(schema)
    if isinstance(schema, str):
        return parse_ddl(schema)
    raise SchemaError(f"expected DDL text, a pyarrow.Schema or a DeltaSchema, got {type(schema).__name__}")
