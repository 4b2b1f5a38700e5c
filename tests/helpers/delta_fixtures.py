"""Delta tables written by other tools or by hand, for conformance tests (issue 17 item 3).

Each builder makes one table under ``root / name`` and returns a :class:`DeltaFixture`: the table's
versions worth reading (first, a middle one, latest) and its key column. Tables come from
``deltalake.write_deltalake`` or from pyarrow-written Parquet files with a log written here by hand
after the Delta protocol (partition values as strings, ``""`` meaning null, TIMESTAMP values without
a zone meaning UTC). No builder uses LakeVilla; :func:`check_fixture` proves each one by reading every
version with ``deltalake``.

:func:`canonical_rows` turns an Arrow table (from ``deltalake`` or from Spark's ``toArrow``) into
comparable rows: timestamps as UTC instants (zone-less ones kept as wall-clock values), maps as sorted
key/value pairs, rows sorted by the key column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["BUILDERS", "DeltaFixture", "build_all", "canonical_rows", "check_fixture", "deltalake_rows",
           "expected_rows", "files_rows", "sql_rows"]

UTC = dt.timezone.utc
D = decimal.Decimal


@dataclass
class DeltaFixture:
    """A table built for conformance checks."""

    name: str
    path: Path
    versions: list[int]  #: versions to compare: first, middle, latest
    key: str = "id"
    partition_columns: list[str] = field(default_factory=list)
    #: how the expected rows are read: "deltalake" (``to_pyarrow_table``), "files" (:func:`files_rows`) or
    #: "sql" (delta-rs's DataFusion reader, :func:`sql_rows`: it applies deletion vectors and column
    #: mapping, which ``to_pyarrow_table`` refuses or ignores in deltalake 1.6)
    reader: str = "deltalake"

    @property
    def latest(self) -> int:
        return self.versions[-1]


# --------------------------------------------------------------------------- comparison
def _canon(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.astimezone(UTC) if v.tzinfo is not None else v
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) for x in v):  # a map: Arrow gives (key, value) pairs
            return sorted(((_canon(k), _canon(x)) for k, x in v), key=repr)
        return [_canon(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_canon(x) for x in v)
    return v


def canonical_rows(table: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    """Rows of ``table`` as comparable dicts, sorted by ``key`` (see the module doc)."""
    rows = [{k: _canon(v) for k, v in r.items()} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: (r[key] is None, r[key]))


def _utc(t: pa.DataType) -> pa.DataType:
    """``t`` with every zone-less timestamp made a UTC one (a Delta TIMESTAMP stored as INT96 has no zone)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz or "UTC")
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _utc(f.type), f.nullable) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _utc(t.value_type), t.value_field.nullable))
    return t


def files_rows(fx: DeltaFixture, version: Optional[int] = None) -> list[dict[str, Any]]:
    """The rows of the data files ``deltalake`` lists for ``version``, read by pyarrow with INT96 as
    microseconds (unpartitioned tables whose timestamp columns are all TIMESTAMP, not TIMESTAMP_NTZ)."""
    import deltalake

    table = deltalake.DeltaTable(str(fx.path), version=version)
    assert not table.metadata().partition_columns, "files_rows reads unpartitioned tables only"
    parts = []
    for uri in table.file_uris():
        t = pq.read_table(uri.removeprefix("file://"), coerce_int96_timestamp_unit="us")
        parts.append(t.cast(pa.schema([pa.field(f.name, _utc(f.type), f.nullable) for f in t.schema])))
    return canonical_rows(pa.concat_tables(parts, promote_options="permissive"), fx.key) if parts else []


def deltalake_rows(fx: DeltaFixture, version: Optional[int] = None) -> list[dict[str, Any]]:
    """The rows ``deltalake`` reads from the fixture (latest, or at ``version``)."""
    import deltalake

    t = deltalake.DeltaTable(str(fx.path), version=version).to_pyarrow_table()
    return canonical_rows(t, fx.key)


def sql_rows(fx: DeltaFixture, version: Optional[int] = None) -> list[dict[str, Any]]:
    """The rows delta-rs's DataFusion reader returns (``SELECT *``)."""
    from deltalake import DeltaTable, QueryBuilder

    batches = QueryBuilder().register("t", DeltaTable(str(fx.path), version=version)).execute("SELECT * FROM t")
    return canonical_rows(pa.table(batches.read_all()), fx.key)


def expected_rows(fx: DeltaFixture, version: Optional[int] = None) -> list[dict[str, Any]]:
    """The rows an independent reader sees (:attr:`DeltaFixture.reader`)."""
    if fx.reader == "files":
        return files_rows(fx, version)
    if fx.reader == "sql":
        return sql_rows(fx, version)
    return deltalake_rows(fx, version)


# --------------------------------------------------------------------------- hand-written logs
def _write_parquet(root: Path, rel: str, data: pa.Table, **kwargs: Any) -> dict[str, Any]:
    """Write ``data`` to ``root/rel`` with pyarrow; return the add's size/modificationTime/stats."""
    buf = io.BytesIO()
    pq.write_table(data, buf, **kwargs)
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(buf.getvalue())
    return {"size": target.stat().st_size, "modificationTime": int(time.time() * 1000),
            "stats": json.dumps({"numRecords": data.num_rows})}


def _add(root: Path, rel: str, data: pa.Table, values: dict[str, Optional[str]], **kwargs: Any) -> dict[str, Any]:
    meta = _write_parquet(root, rel, data, **kwargs)
    return {"add": {"path": rel, "partitionValues": values, "size": meta["size"],
                    "modificationTime": meta["modificationTime"], "dataChange": True, "stats": meta["stats"]}}


def _remove(rel: str) -> dict[str, Any]:
    return {"remove": {"path": rel, "deletionTimestamp": int(time.time() * 1000), "dataChange": True}}


def _schema_string(fields: Sequence[tuple[str, Any]]) -> str:
    return json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                                   for n, t in fields]})


def _header(schema: str, partition_columns: Sequence[str], protocol: dict[str, Any]) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [{"commitInfo": {"timestamp": now, "operation": "WRITE", "engineInfo": "lv-tests/hand-written"}},
            {"protocol": protocol},
            {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                          "schemaString": schema, "partitionColumns": list(partition_columns),
                          "configuration": {}, "createdTime": now}}]


def _commit(root: Path, version: int, actions: list[dict[str, Any]]) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    if not any("commitInfo" in a for a in actions):
        actions = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE"}}, *actions]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def _part(n: int) -> str:
    return f"part-{n:05d}-{uuid.uuid4()}.c000.snappy.parquet"


# --------------------------------------------------------------------------- builders
def typed_deltars(root: Path) -> DeltaFixture:
    """Every primitive type and nested types (struct, list, map, list of structs), written by delta-rs."""
    from deltalake import write_deltalake

    path = root / "typed_deltars"
    schema = pa.schema([
        ("id", pa.int64()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()),
        ("f32", pa.float32()), ("f64", pa.float64()), ("s", pa.string()), ("b", pa.bool_()),
        ("bin", pa.binary()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")), ("dec", pa.decimal128(10, 2)), ("dec38", pa.decimal128(38, 10)),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.string()), ("t", pa.timestamp("us", tz="UTC"))])),
        ("arr", pa.list_(pa.int64())), ("m", pa.map_(pa.string(), pa.int32())),
        ("arr_st", pa.list_(pa.struct([("x", pa.float64()), ("y", pa.date32())]))),
    ])

    def rows(ids: range) -> pa.Table:
        out: list[dict[str, Any]] = []
        for i in ids:
            if i % 4 == 3:
                out.append({"id": i})  # all nulls
                continue
            out.append({
                "id": i, "i8": -128 + i, "i16": 32767 - i, "i32": -(2 ** 31) + i, "f32": 1.5 * i,
                "f64": -2.25e300 / (i + 1), "s": f"ü-{i}" if i % 2 else "", "b": i % 2 == 0,
                "bin": bytes([i, 0, 255]), "d": dt.date(1, 1, 1) + dt.timedelta(days=1000 * i),
                "ts": dt.datetime(2021, 9, 8, 11, 11, 11, 123456, tzinfo=UTC) + dt.timedelta(hours=i),
                "ntz": dt.datetime(1900, 1, 1, 0, 0, 0, 1) + dt.timedelta(days=i),
                "dec": D("-12345678.99") + i, "dec38": D(f"-1234567890123456789012345678.{i:010d}"),
                "st": {"a": i, "b": None, "t": dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)},
                "arr": [i, None, -i], "m": [("k", i), ("z", None)],
                "arr_st": [{"x": 0.5, "y": dt.date(2000, 2, 29)}, None],
            })
        return pa.Table.from_pylist(out, schema=schema)

    write_deltalake(str(path), rows(range(0, 4)))
    write_deltalake(str(path), rows(range(4, 8)), mode="append")
    write_deltalake(str(path), rows(range(8, 12)), mode="append")
    return DeltaFixture("typed_deltars", path, [0, 1, 2])


def partitions_deltars(root: Path) -> DeltaFixture:
    """Partitioned by TIMESTAMP, TIMESTAMP_NTZ, DATE, BOOLEAN, INT and DECIMAL columns, written by delta-rs
    (its TIMESTAMP partition values have no zone: ``2021-09-08 11:11:11.000000``)."""
    from deltalake import write_deltalake

    path = root / "partitions_deltars"
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("ntz", pa.timestamp("us")), ("d", pa.date32()), ("b", pa.bool_()), ("i", pa.int32()),
                        ("dec", pa.decimal128(7, 3))])
    parts = ["ts", "ntz", "d", "b", "i", "dec"]
    values = [
        (dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC), dt.datetime(2021, 9, 8, 11, 11, 11), dt.date(2021, 9, 8),
         True, 7, D("1.500")),
        (dt.datetime(2021, 9, 8, 11, 11, 11, 123456, tzinfo=UTC), dt.datetime(1900, 1, 1, 0, 0, 0, 5),
         dt.date(1, 1, 1), False, -2147483648, D("9999.999")),
        (dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59),
         dt.date(9999, 12, 31), None, None, D("0.000")),
        (None, None, None, True, 0, None),
    ]

    def rows(start: int, which: Sequence[int]) -> pa.Table:
        out = []
        for n, w in enumerate(which):
            out.append({"id": start + n, "v": f"r{start + n}", **dict(zip(parts, values[w], strict=True))})
        return pa.Table.from_pylist(out, schema=schema)

    write_deltalake(str(path), rows(0, [0, 1, 0]), partition_by=parts)
    write_deltalake(str(path), rows(10, [2, 3, 1]), partition_by=parts, mode="append")
    write_deltalake(str(path), rows(20, [3, 0]), partition_by=parts, mode="append")
    return DeltaFixture("partitions_deltars", path, [0, 1, 2], partition_columns=parts)


def partitions_handwritten(root: Path) -> DeltaFixture:
    """pyarrow files and a hand-written log with partition values in every spec form: TIMESTAMP without a
    zone (with and without fraction) and as ISO 8601 in UTC, TIMESTAMP_NTZ, DATE, negative DECIMAL,
    BINARY, BOOLEAN, LONG, DOUBLE, STRING, JSON null and ``""`` (null)."""
    path = root / "partitions_handwritten"
    cols = [("id", "long"), ("v", "string"), ("ts", "timestamp"), ("ntz", "timestamp_ntz"), ("d", "date"),
            ("dec", "decimal(5,2)"), ("bin", "binary"), ("b", "boolean"), ("l", "long"), ("f", "double"),
            ("s", "string")]
    parts = [n for n, _ in cols[2:]]
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"],
                "writerFeatures": ["timestampNtz"]}
    file_schema = pa.schema([("id", pa.int64()), ("v", pa.string())])

    def data(ids: Sequence[int]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "v": f"r{i}"} for i in ids], schema=file_schema)

    def pv(ts: Optional[str], ntz: Optional[str], d: Optional[str], dec: Optional[str], bin_: Optional[str],
           b: Optional[str], lng: Optional[str], f: Optional[str], s: Optional[str]) -> dict[str, Optional[str]]:
        return dict(zip(parts, (ts, ntz, d, dec, bin_, b, lng, f, s), strict=True))

    p0 = pv("2021-09-08 11:11:11", "2021-09-08 11:11:11", "2021-09-08", "-12.00", "ab", "true", "-9223372036854775808",
            "1.5", "x y")
    p1 = pv("2021-09-08 11:11:11.5", "1900-01-01 00:00:00.000001", "0001-01-01", "999.99", "", "false", "0",
            "-0.0", "")
    p2 = pv("2021-09-08T11:11:11.123456Z", "9999-12-31 23:59:59.999999", "9999-12-31", "0.00", None, None,
            "9223372036854775807", "1e-300", "ü")
    p3 = pv(None, "", "", "", None, "", "", "", None)
    v0 = [_add(path, _part(0), data([0, 1]), p0), _add(path, _part(1), data([2]), p1)]
    _commit(path, 0, _header(_schema_string(cols), parts, protocol) + v0)
    f2 = _part(2)
    _commit(path, 1, [_add(path, f2, data([10, 11]), p2), _add(path, _part(3), data([12]), p3)])
    _commit(path, 2, [_remove(v0[1]["add"]["path"]), _add(path, _part(4), data([20]), p1),
                      _add(path, _part(5), data([21, 22]), p0)])
    return DeltaFixture("partitions_handwritten", path, [0, 1, 2], partition_columns=parts)


def int96_handwritten(root: Path) -> DeltaFixture:
    """TIMESTAMP columns stored as INT96 by pyarrow (``use_deprecated_int96_timestamps``), top level and in
    a struct. Version 0 holds instants in the nanosecond range; version 1 adds year 9999, which
    ``deltalake`` 1.6 cannot read (it reads INT96 as nanoseconds), so this fixture's rows come from
    :func:`files_rows` (the files ``deltalake`` lists, read by pyarrow as microseconds), and
    :func:`check_fixture` shows that this reading equals ``deltalake``'s at version 0."""
    path = root / "int96_handwritten"
    cols = [("id", "long"), ("ts", "timestamp"), ("st", {"type": "struct", "fields": [
        {"name": "t", "type": "timestamp", "nullable": True, "metadata": {}}]})]
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")),
                        ("st", pa.struct([("t", pa.timestamp("us"))]))])
    vals = [dt.datetime(1970, 1, 1), dt.datetime(2021, 9, 8, 11, 11, 11, 500), dt.datetime(1900, 1, 1, 12),
            dt.datetime(2262, 4, 11), None, dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]

    def data(ids: Sequence[int], late: bool) -> pa.Table:
        n = len(vals) if late else len(vals) - 1
        return pa.Table.from_pylist([{"id": i, "ts": vals[i % n], "st": {"t": vals[(i + 1) % n]}} for i in ids],
                                    schema=schema)

    kw = {"use_deprecated_int96_timestamps": True}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    _commit(path, 0, _header(_schema_string(cols), [], protocol) + [_add(path, _part(0), data(range(0, 5), False),
                                                                         {}, **kw)])
    _commit(path, 1, [_add(path, _part(1), data(range(5, 12), True), {}, **kw)])
    _commit(path, 2, [_add(path, _part(2), data(range(20, 23), False), {}, **kw)])
    return DeltaFixture("int96_handwritten", path, [0, 1, 2], reader="files")


def evolved_deltars(root: Path) -> DeltaFixture:
    """Columns added by schema evolution (``schema_mode="merge"``): files older than a column lack it and
    read it as null; the last version adds a field to a struct column (older structs read it as null).
    Partitioned, so a new data column sits between old ones and partition columns."""
    from deltalake import write_deltalake

    path = root / "evolved_deltars"
    t0 = pa.table({"id": pa.array([0, 1], pa.int64()), "col1": ["a", "b"], "p": ["x", "y"]})
    write_deltalake(str(path), t0, partition_by=["p"])
    t1 = pa.table({"id": pa.array([10, 11], pa.int64()), "col1": ["c", None], "p": ["x", "z"],
                   "col2": pa.array([1.5, None], pa.float64())})
    write_deltalake(str(path), t1, partition_by=["p"], mode="append", schema_mode="merge")
    t2 = pa.table({"id": pa.array([20], pa.int64()), "col1": ["d"], "p": ["y"], "col2": pa.array([2.5], pa.float64()),
                   "col3": pa.array([{"a": 1, "b": "s"}], pa.struct([("a", pa.int32()), ("b", pa.string())])),
                   "ts": pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))})
    write_deltalake(str(path), t2, partition_by=["p"], mode="append", schema_mode="merge")
    t3 = pa.table({"id": pa.array([30], pa.int64()), "col1": ["e"], "p": ["x"]})
    write_deltalake(str(path), t3, partition_by=["p"], mode="append", schema_mode="merge")
    st = pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.list_(pa.int64()))])  # a field added in a struct
    t4 = pa.table({"id": pa.array([40, 41], pa.int64()), "col1": ["f", "g"], "p": ["z", "x"],
                   "col3": pa.array([{"a": 4, "b": None, "c": [1, None]}, None], st)})
    write_deltalake(str(path), t4, partition_by=["p"], mode="append", schema_mode="merge")
    return DeltaFixture("evolved_deltars", path, [0, 2, 4], partition_columns=["p"])


BUILDERS: dict[str, Callable[[Path], DeltaFixture]] = {
    "typed_deltars": typed_deltars,
    "partitions_deltars": partitions_deltars,
    "partitions_handwritten": partitions_handwritten,
    "int96_handwritten": int96_handwritten,
    "evolved_deltars": evolved_deltars,
}


def check_fixture(fx: DeltaFixture) -> None:
    """Prove the fixture is a valid Delta table: ``deltalake`` reads every listed version."""
    for v in fx.versions:
        if fx.reader == "files" and v == fx.versions[0]:
            assert files_rows(fx, v) == deltalake_rows(fx, v)  # the file reading agrees with deltalake's
        expected_rows(fx, v)


def build_all(root: Path) -> dict[str, DeltaFixture]:
    """Every fixture under ``root`` (one folder per table), each checked with ``deltalake``."""
    out = {}
    for name, build in BUILDERS.items():
        fx = build(root)
        check_fixture(fx)
        out[name] = fx
    return out
