"""Delta schemas in Spark: conversion, exact nullability, fitting incoming DataFrames, and Spark
errors as LvErrors.

Spark's file reads make every column nullable; :func:`with_exact_schema` restores the declared
nullability (a null where none is allowed raises when Spark runs the query, it is never hidden).
:func:`conform_frame` checks a DataFrame against a table before anything is written.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType
from lv_core.errors import ConfigError, ConstraintViolation, EngineError, LvError, SchemaError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["CHECK_TAG", "NOT_NULL_TAG", "col", "conform_frame", "fits", "needs_fix", "nullable_type", "spark_errors",
           "spark_schema", "with_exact_schema"]

#: Marks the run-time NOT NULL errors this package raises inside Spark (turned into SchemaError).
NOT_NULL_TAG = "[LV_NOT_NULL]"
#: Marks the run-time CHECK constraint / invariant errors (turned into ConstraintViolation).
CHECK_TAG = "[LV_CHECK]"
_INT_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_INT_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().split("\n\nJVM stacktrace:")[0]
    return text.splitlines()[0] if text else type(e).__name__


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn Spark exceptions into LvError subclasses with one clear line (``what`` says what failed)."""
    try:
        yield
    except LvError:
        raise
    except Exception as e:  # pyspark raises many types; only its own errors are translated
        mod = type(e).__module__ or ""
        if not (mod.startswith("pyspark") or mod.startswith("py4j") or "grpc" in mod):
            raise
        msg = _first_line(e)
        full = str(e)
        for tag, cls in ((NOT_NULL_TAG, SchemaError), (CHECK_TAG, ConstraintViolation)):
            if tag in full:
                start = full.index(tag) + len(tag)
                text = full[start:].split("\n")[0].split(" SQLSTATE")[0].strip().rstrip(".'\"")
                raise cls(text + "; nothing was written.") from None
        if any(k in full for k in ("UNRESOLVED_COLUMN", "DATATYPE_MISMATCH", "CAST_INVALID_INPUT",
                                   "INVALID_EXTRACT", "FIELD_NOT_FOUND", "CANNOT_PARSE")):
            raise SchemaError(f"{what}: {msg}") from None
        if ("No FileSystem for scheme" in full or "UnsupportedFileSystemException" in full
                or ("ClassNotFoundException" in full and "FileSystem" in full)):
            raise EngineError(f"{what}: the Spark server cannot reach this storage ({msg}). Give the server an "
                              "S3 connector (hadoop-aws, fs.s3a.* settings) or let data move through this client: "
                              "lv_core.engine.api.configure(lh, data_path='arrow').") from None
        if "PARSE_SYNTAX_ERROR" in full or "ParseException" in type(e).__name__:
            raise ConfigError(f"{what}: not a valid Spark SQL expression: {msg}") from None
        raise EngineError(f"{what}: Spark failed: {msg}") from e


def spark_schema(schema: DeltaSchema, drop: Sequence[str] = (), extra: Sequence[tuple[str, str]] = ()) -> Any:
    """The Spark ``StructType`` of a Delta schema (the schemaString *is* Spark's JSON), minus ``drop``."""
    from pyspark.sql.types import StructType as SparkStruct

    dropped = {d.lower() for d in drop}
    fields = [f for f in schema.to_json()["fields"] if f["name"].lower() not in dropped]
    fields += [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in extra]
    return SparkStruct.fromJson({"type": "struct", "fields": fields})


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def col(name: str) -> "Column":
    from pyspark.sql import functions as F

    return F.col(_q(name))


def _zero_sql(t: str) -> str:
    """A non-null SQL literal of primitive Delta type ``t`` whose type analysis keeps non-null."""
    if t.startswith("decimal"):
        scale = int(t[t.index(",") + 1:-1])
        return f"CAST({'0BD' if scale == 0 else '0.' + '0' * scale} AS {t.upper()})"
    return {"string": "''", "binary": "X''", "boolean": "false", "date": "DATE '1970-01-01'",
            "timestamp": "TIMESTAMP '1970-01-01 00:00:00'",
            "timestamp_ntz": "TIMESTAMP_NTZ '1970-01-01 00:00:00'"}.get(t, f"CAST(0 AS {_SQL_TYPES.get(t, t)})")


_SQL_TYPES = {"long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT",
              "float": "FLOAT", "double": "DOUBLE"}


def needs_fix(t: Any, nullable: bool) -> bool:
    """Whether Delta type ``t`` (with ``nullable``) has a NOT NULL anywhere, i.e. a file read loses it."""
    if not nullable:
        return True
    if isinstance(t, StructType):
        return any(needs_fix(f.type, f.nullable) for f in t.fields)
    if isinstance(t, ArrayType):
        return needs_fix(t.element_type, t.contains_null)
    if isinstance(t, MapType):
        return needs_fix(t.value_type, t.value_contains_null)
    return False


def _exact(e: "Column", t: Any, nullable: bool, where: str) -> "Column":
    """``e`` rebuilt so that Spark reports exactly type ``t`` with ``nullable`` (file reads make every
    column nullable); a null where none is allowed raises at run time instead of being hidden."""
    from pyspark.sql import functions as F

    if isinstance(t, StructType):
        inner = F.struct(*[_exact(e.getField(f.name), f.type, f.nullable, f"{where}.{f.name}").alias(f.name)
                           for f in t.fields])
        if nullable:
            return F.when(e.isNull(), F.lit(None)).otherwise(inner)
        return F.coalesce(F.when(e.isNull(), F.raise_error(F.lit(f"{NOT_NULL_TAG} {where} is NOT NULL"))), inner)
    if isinstance(t, ArrayType) and needs_fix(t.element_type, t.contains_null):
        e = F.transform(e, lambda x: _exact(x, t.element_type, t.contains_null, where + "[]"))
    elif isinstance(t, MapType) and needs_fix(t.value_type, t.value_contains_null):
        e = F.transform_values(e, lambda k, v: _exact(v, t.value_type, t.value_contains_null, where + ".value"))
    if nullable:
        return e
    msg = F.lit(f"{NOT_NULL_TAG} column {where} is NOT NULL but the data has a null")
    if isinstance(t, str):
        return F.coalesce(F.when(e.isNull(), F.raise_error(msg)), e, F.expr(_zero_sql(t)))
    return F.coalesce(F.when(e.isNull(), F.raise_error(msg)), e)  # complex, non-null: best effort


def with_exact_schema(df: "DataFrame", schema: DeltaSchema, keep: Sequence[str] = ()) -> "DataFrame":
    """Project ``df`` (holding the table's columns) to the declared types and nullability."""
    cols = []
    for f in schema:
        c = col(f.name)
        cols.append((_exact(c, f.type, f.nullable, repr(f.name)) if needs_fix(f.type, f.nullable) else c).alias(f.name))
    return df.select(*cols, *[col(k) for k in keep])


def fits(src: Any, dst: Any) -> bool:
    """Whether Spark type ``src`` can be stored in a column of type ``dst`` without losing data
    (equal, integer widening, integer/float/decimal to double, decimal widening, NULL)."""
    from pyspark.sql import types as T

    if isinstance(src, T.NullType):
        return True
    complex_types = (T.StructType, T.ArrayType, T.MapType)
    if isinstance(src, complex_types) or isinstance(dst, complex_types):
        if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
            return len(src.fields) == len(dst.fields) and all(
                a.name.lower() == b.name.lower() and fits(a.dataType, b.dataType)
                for a, b in zip(src.fields, dst.fields, strict=False))
        if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
            return fits(src.elementType, dst.elementType)
        if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
            return fits(src.keyType, dst.keyType) and fits(src.valueType, dst.valueType)
        return False
    s, d = src.typeName(), dst.typeName()
    if isinstance(src, (T.CharType, T.VarcharType)):
        s = "string"
    if s == d and not isinstance(src, T.DecimalType):
        return True
    if s in _INT_RANK:
        if d in _INT_RANK:
            return _INT_RANK[s] <= _INT_RANK[d]
        if isinstance(dst, T.DecimalType):
            return _INT_DIGITS[s] <= dst.precision - dst.scale
        return d in ("float", "double")
    if isinstance(src, T.DecimalType):
        if isinstance(dst, T.DecimalType):
            return src.scale <= dst.scale and src.precision - src.scale <= dst.precision - dst.scale
        return d == "double"
    return s == "float" and d == "double"


def nullable_type(t: Any) -> Any:
    """Spark type ``t`` with every nested field, element and value nullable."""
    from pyspark.sql import types as T

    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, nullable_type(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(nullable_type(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(nullable_type(t.keyType), nullable_type(t.valueType), True)
    return t


def conform_frame(df: "DataFrame", schema: DeltaSchema, table: str) -> "DataFrame":
    """``df`` projected to the table's columns, order and types; NOT NULL checked when Spark runs it.

    Raises:
        SchemaError: a column not in the table, a missing NOT NULL column, or a type that does not
            fit (the message names the column and both types). Checked before any file is written.
    """
    from pyspark.sql import functions as F

    with spark_errors(f"reading the schema of the data for {table!r}"):
        src = df.schema
    target = spark_schema(schema)
    have = {f.name.lower(): f for f in src.fields}
    extra = sorted(set(have) - {f.name.lower() for f in target.fields})
    if extra:
        raise SchemaError(f"table {table!r} has no column(s) {', '.join(repr(have[e].name) for e in extra)}; "
                          f"its columns are {', '.join(f.name for f in target.fields)}")
    cols = []
    for f in target.fields:
        s = have.get(f.name.lower())
        if s is None:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} of {table!r} is NOT NULL but missing from the data")
            cols.append(F.lit(None).cast(nullable_type(f.dataType)).alias(f.name))
            continue
        if not fits(s.dataType, f.dataType):
            raise SchemaError(f"column {f.name!r} of {table!r} is {f.dataType.simpleString()}; the data has "
                              f"{s.dataType.simpleString()}, which does not fit (cast it first)")
        c = col(s.name)
        if nullable_type(s.dataType) != nullable_type(f.dataType):
            c = c.cast(nullable_type(f.dataType))  # Spark refuses casts that tighten nested nullability
        if not f.nullable and s.nullable:
            msg = f"{NOT_NULL_TAG} column {f.name!r} of {table!r} is NOT NULL but the data has a null"
            c = F.when(c.isNull(), F.raise_error(F.lit(msg))).otherwise(c)
        cols.append(c.alias(f.name))
    return df.select(*cols)
