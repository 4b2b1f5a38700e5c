"""Delta tables using writer features, built independently of lv_core (delta-rs, pyarrow and logs
written by hand from the Delta protocol text), each proved readable by delta-rs before use.

Every builder creates ``root`` (a table folder) holding ``ROWS`` (ids 1..3) and returns nothing;
:func:`delta_state` is what a test compares before/after a refused write (version, files, rows).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ROWS", "SCHEMA", "append_only_table", "check_constraint_table", "delta_rows", "delta_state",
           "hand_written_table", "identity_metadata", "identity_table", "in_commit_timestamp_table",
           "invariant_table", "raw_commits", "type_widened_table", "variant_table", "VARIANT_JSON", "WIDENED",
           "WIDENED_ROWS"]

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
ROWS: list[dict[str, Any]] = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]


def _field(name: str, typ: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "type": typ, "nullable": True, "metadata": metadata or {}}


def hand_written_table(root: Path, *, protocol: dict[str, Any], configuration: dict[str, str],
                       field_metadata: dict[str, dict[str, Any]] | None = None,
                       commit_info: dict[str, Any] | None = None) -> None:
    """Version 0 of a table with ``ROWS`` in one pyarrow-written file; the log written by hand."""
    root.mkdir(parents=True)
    name = f"part-00000-{uuid.uuid4()}.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS, schema=SCHEMA), root / name)
    md = field_metadata or {}
    schema = {"type": "struct", "fields": [_field("id", "long", md.get("id")), _field("v", "string", md.get("v"))]}
    now = int(time.time() * 1000)
    stats = {"numRecords": len(ROWS), "minValues": {"id": 1, "v": "a"}, "maxValues": {"id": 3, "v": "c"},
             "nullCount": {"id": 0, "v": 0}}
    lines = [
        {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE AS SELECT", **(commit_info or {})}},
        {"protocol": protocol},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": configuration,
                      "createdTime": now}},
        {"add": {"path": name, "partitionValues": {}, "size": (root / name).stat().st_size, "modificationTime": now,
                 "dataChange": True, "stats": json.dumps(stats)}},
    ]
    (root / "_delta_log").mkdir()
    (root / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    _proved(root)


def _proved(root: Path) -> None:
    """delta-rs reads the table and sees exactly ``ROWS``."""
    assert delta_rows(root) == ROWS, f"fixture {root} is not the table it should be"


def delta_rows(root: Path) -> list[dict[str, Any]]:
    """The rows delta-rs reads (sorted by id)."""
    import deltalake

    return sorted(deltalake.DeltaTable(str(root)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def delta_state(root: Path) -> tuple[int, list[str], list[dict[str, Any]]]:
    """(version, data files, rows) as delta-rs sees the table."""
    import deltalake

    t = deltalake.DeltaTable(str(root))
    return t.version(), sorted(t.file_uris()), delta_rows(root)


def raw_commits(root: Path) -> list[list[dict[str, Any]]]:
    """Every JSON commit's actions, in version order (no lv_core decoding)."""
    return [[json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            for f in sorted((root / "_delta_log").glob("*.json"))]


def append_only_table(root: Path) -> None:
    """``delta.appendOnly = true`` (writer 2), written by delta-rs."""
    from deltalake import write_deltalake

    write_deltalake(str(root), pa.Table.from_pylist(ROWS, schema=SCHEMA), configuration={"delta.appendOnly": "true"})
    _proved(root)


def check_constraint_table(root: Path, constraints: dict[str, str] | None = None) -> None:
    """CHECK constraints added by delta-rs (``ALTER TABLE ADD CONSTRAINT``: writer 3); default ``id_positive``
    (``id > 0``) and ``v_not_x`` (``v <> 'x'``)."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(root), pa.Table.from_pylist(ROWS, schema=SCHEMA))
    DeltaTable(str(root)).alter.add_constraint(constraints or {"id_positive": "id > 0", "v_not_x": "v <> 'x'"})
    _proved(root)


def invariant_table(root: Path, expression: str = "id < 100") -> None:
    """A column invariant (``delta.invariants`` on ``id``, writer 2), log written by hand."""
    inv = json.dumps({"expression": {"expression": expression}})
    hand_written_table(root, protocol={"minReaderVersion": 1, "minWriterVersion": 2}, configuration={},
                       field_metadata={"id": {"delta.invariants": inv}})


def in_commit_timestamp_table(root: Path, ict: int | None = None) -> None:
    """In-commit timestamps enabled at creation (writer 7, ``inCommitTimestamp``); version 0's commitInfo
    comes first and carries ``inCommitTimestamp`` (default: an hour in the future, so a writer that just
    used its clock would go backwards)."""
    ts = ict if ict is not None else int(time.time() * 1000) + 3_600_000
    hand_written_table(root, protocol={"minReaderVersion": 1, "minWriterVersion": 7,
                                       "writerFeatures": ["inCommitTimestamp"]},
                       configuration={"delta.enableInCommitTimestamps": "true"},
                       commit_info={"inCommitTimestamp": ts})


# -- type widening ------------------------------------------------------------------------------
#: The columns of :func:`type_widened_table`: name -> (type before, type after, pyarrow before, pyarrow after).
WIDENED: dict[str, tuple[str, str, pa.DataType, pa.DataType]] = {
    "id": ("integer", "long", pa.int32(), pa.int64()),
    "s": ("short", "integer", pa.int16(), pa.int32()),
    "f": ("float", "double", pa.float32(), pa.float64()),
    "d": ("date", "timestamp_ntz", pa.date32(), pa.timestamp("us")),
    "m": ("decimal(5,2)", "decimal(12,4)", pa.decimal128(5, 2), pa.decimal128(12, 4)),
}
#: Rows of :func:`type_widened_table` as read with the wide types: ids 1, 2 in the narrow file (version 0),
#: 3 in a file written after the change (version 1).
WIDENED_ROWS: list[dict[str, Any]] = [
    {"id": 1, "s": 10, "f": 1.5, "d": dt.datetime(2024, 1, 31), "m": Decimal("123.45")},
    {"id": 2, "s": -20, "f": -0.25, "d": dt.datetime(1999, 12, 31), "m": Decimal("-0.01")},
    {"id": 3, "s": 70000, "f": 1e300, "d": dt.datetime(2025, 6, 1, 12, 30), "m": Decimal("12345678.1234")},
]


def _stats(t: pa.Table) -> str:
    """numRecords and nullCount only (min/max are optional in the spec)."""
    return json.dumps({"numRecords": t.num_rows, "nullCount": {c: t.column(c).null_count for c in t.column_names}})


def type_widened_table(root: Path, feature: str = "typeWidening") -> None:
    """A table whose every column was widened (:data:`WIDENED`) at version 1; written by pyarrow and
    a hand-written log. Version 0 (protocol 1/2) has ids 1, 2 in a file of the narrow types; version 1
    enables ``feature`` (``typeWidening`` or ``typeWidening-preview``, reader 3 / writer 7), records the
    changes in each field's ``delta.typeChanges`` and adds id 3 in a file of the wide types. Proved by
    delta-rs reading all three rows as the wide types."""
    root.mkdir(parents=True)
    (root / "_delta_log").mkdir()
    now = int(time.time() * 1000)
    table_id = str(uuid.uuid4())
    versions = []
    for version, (lo, hi) in enumerate(((0, 2), (2, 3))):
        wide = version == 1
        types = {c: (w if wide else n) for c, (_n, _w, n, w) in WIDENED.items()}
        rows = [{c: (r[c].date() if c == "d" and not wide else r[c]) for c in WIDENED} for r in WIDENED_ROWS[lo:hi]]
        data = pa.Table.from_pylist(rows, schema=pa.schema([pa.field(c, t) for c, t in types.items()]))
        name = f"part-{version:05d}-{uuid.uuid4()}.parquet"
        pq.write_table(data, root / name)
        fields = []
        for c, (narrow, wide_type, _n, _w) in WIDENED.items():
            md: dict[str, Any] = {}
            if wide:
                change: dict[str, Any] = {"fromType": narrow, "toType": wide_type}
                if feature.endswith("-preview"):
                    change["tableVersion"] = 1
                md["delta.typeChanges"] = [change]
            fields.append(_field(c, wide_type if wide else narrow, md))
        lines: list[dict[str, Any]] = [{"commitInfo": {"timestamp": now + version,
                                                       "operation": "WRITE" if version == 0 else "CHANGE COLUMN"}}]
        if version == 0:
            lines.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        else:
            features = ["timestampNtz", feature]
            lines.append({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features,
                                       "writerFeatures": features}})
        lines.append({"metaData": {"id": table_id, "format": {"provider": "parquet", "options": {}},
                                   "schemaString": json.dumps({"type": "struct", "fields": fields}),
                                   "partitionColumns": [],
                                   "configuration": {"delta.enableTypeWidening": "true"} if wide else {},
                                   "createdTime": now}})
        lines.append({"add": {"path": name, "partitionValues": {}, "size": (root / name).stat().st_size,
                              "modificationTime": now, "dataChange": True, "stats": _stats(data)}})
        versions.append(lines)
    for version, lines in enumerate(versions):
        (root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    _proved_widened(root)


def _proved_widened(root: Path) -> None:
    """delta-rs 1.x refuses to read data of a ``typeWidening`` table, so the proof is in parts: delta-rs
    reads version 0 (before the change) as the narrow rows, and loads the log of version 1 (wide schema,
    both files); pyarrow reads each of those files and, cast to the wide types, they are :data:`WIDENED_ROWS`."""
    import deltalake

    v0 = deltalake.DeltaTable(str(root), version=0).to_pyarrow_table()
    assert v0.schema.types == [n for _a, _b, n, _w in WIDENED.values()], v0.schema
    assert sorted(v0.to_pylist(), key=lambda r: r["id"]) == [
        {c: (r[c].date() if c == "d" else r[c]) for c in WIDENED} for r in WIDENED_ROWS[:2]]
    t = deltalake.DeltaTable(str(root))
    wide = pa.schema([pa.field(c, w) for c, (_a, _b, _n, w) in WIDENED.items()])
    assert t.version() == 1 and pa.schema(t.schema().to_arrow()).types == wide.types  # type: ignore[arg-type]
    files = sorted(t.file_uris())
    assert len(files) == 2
    rows = [r for f in files for r in pq.read_table(f).cast(wide).to_pylist()]
    assert sorted(rows, key=lambda r: r["id"]) == WIDENED_ROWS, f"fixture {root} is not the table it should be"


def identity_table(root: Path, *, allow_explicit: bool = False) -> None:
    """``id`` is an identity column (``GENERATED ... AS IDENTITY (START WITH 1 INCREMENT BY 1)``, writer 6;
    ``ROWS`` hold the values 1..3 it generated, high-water mark 3), log written by hand."""
    md = {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.highWaterMark": 3,
          "delta.identity.allowExplicitInsert": allow_explicit}
    hand_written_table(root, protocol={"minReaderVersion": 1, "minWriterVersion": 6}, configuration={},
                       field_metadata={"id": md})


def identity_metadata(root: Path) -> dict[str, Any]:
    """The metadata of column ``id`` as delta-rs reads it."""
    import deltalake

    return dict(deltalake.DeltaTable(str(root)).schema().fields[0].metadata)


# -- variant ------------------------------------------------------------------------------------
def _variant_metadata(keys: list[str]) -> bytes:
    """Variant metadata (binary encoding version 1, sorted dictionary, 1-byte offsets) of ``keys``."""
    data = b"".join(k.encode() for k in keys)
    offsets = [0]
    for k in keys:
        offsets.append(offsets[-1] + len(k.encode()))
    return bytes([0x01 | 0x10, len(keys), *offsets]) + data


#: Rows of :func:`variant_table` as JSON text (``to_json`` of the variant): {"a": 1}, "text", null.
VARIANT_JSON = ['{"a":1}', '"text"', None]


def variant_table(root: Path, feature: str = "variantType") -> None:
    """Column ``j`` of type ``variant`` (reader/writer feature ``feature``), ids 1..3 holding
    :data:`VARIANT_JSON`. The Parquet file is written by pyarrow: each variant a struct of ``metadata`` and
    ``value`` binaries, encoded by hand (object with one int8 field, short string, null). Proved by
    delta-rs reading the table (as those binaries); Spark decoding them is what the tests check."""
    root.mkdir(parents=True)
    (root / "_delta_log").mkdir()
    obj = {"metadata": _variant_metadata(["a"]), "value": bytes([0x02, 0x01, 0x00, 0x00, 0x02, 0x0C, 0x01])}
    text = {"metadata": _variant_metadata([]), "value": bytes([(4 << 2) | 1]) + b"text"}
    vtype = pa.struct([pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)])
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "j": pa.array([obj, text, None], vtype)})
    name = f"part-00000-{uuid.uuid4()}.parquet"
    pq.write_table(data, root / name)
    now = int(time.time() * 1000)
    schema = {"type": "struct", "fields": [_field("id", "long"), _field("j", "variant")]}
    lines = [
        {"commitInfo": {"timestamp": now, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [feature],
                      "writerFeatures": [feature]}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                      "createdTime": now}},
        {"add": {"path": name, "partitionValues": {}, "size": (root / name).stat().st_size, "modificationTime": now,
                 "dataChange": True, "stats": json.dumps({"numRecords": 3})}},
    ]
    (root / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    import deltalake

    got = deltalake.DeltaTable(str(root)).to_pyarrow_table()  # delta-rs reads a variant as its two binaries
    assert got.column_names == ["id", "j"] and got.to_pylist() == data.to_pylist(), f"fixture {root} is wrong"
