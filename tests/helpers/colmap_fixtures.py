"""Column-mapped Delta tables built by hand (Delta spec, "Column Mapping"), independently of lv_core.

Data files are written by pyarrow with *physical* column names (and Parquet field ids in ``id`` mode);
the log is written here as JSON lines: ``partitionValues`` and ``stats`` are keyed by physical name, the
schema's field metadata carries ``delta.columnMapping.id`` / ``physicalName``, the configuration
``delta.columnMapping.mode`` and ``maxColumnId``. Physical names are chosen to catch a reader that uses
the logical names: the logical column ``amount`` is stored as ``price`` (a renamed column), while the
logical ``price`` is stored under a ``col-<uuid>`` name, and a struct field ``b`` is stored as ``b_old``.

Three versions: 0 creates the table with two files, 1 adds a file, 2 removes one (see :data:`VERSIONS`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

FIELD_ID = b"PARQUET:field_id"


@dataclass
class Column:
    """One column (or struct field): logical and physical name, id, Delta JSON type, Arrow type."""

    name: str
    physical: str
    id: int
    delta_type: Any
    arrow_type: pa.DataType
    children: list["Column"] = field(default_factory=list)


@dataclass
class ColmapTable:
    """A built fixture: where it is, how it maps, and the rows each version holds (logical names)."""

    root: Path
    mode: str
    columns: list[Column]
    partition_by: list[str]
    rows: dict[int, list[dict[str, Any]]]

    @property
    def physical(self) -> dict[str, str]:
        """Top-level logical -> physical name."""
        return {c.name: c.physical for c in self.columns}

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


def _columns(partitioned: bool) -> list[Column]:
    def uid() -> str:
        return f"col-{uuid.uuid4()}"

    a = Column("a", uid(), 5, "integer", pa.int32())
    b = Column("b", "b_old", 6, "string", pa.string())
    cols = [
        Column("id", uid(), 1, "long", pa.int64()),
        Column("amount", "price", 2, "double", pa.float64()),  # renamed: stored under another column's logical name
        Column("price", uid(), 3, "string", pa.string()),
        Column("s", uid(), 4, {"type": "struct", "fields": []}, pa.struct([]), [a, b]),
    ]
    if partitioned:
        cols.append(Column("p", uid(), 7, "string", pa.string()))
    return cols


def _delta_field(c: Column) -> dict[str, Any]:
    t = c.delta_type
    if c.children:
        t = {"type": "struct", "fields": [_delta_field(k) for k in c.children]}
    return {"name": c.name, "type": t, "nullable": True,
            "metadata": {"delta.columnMapping.id": c.id, "delta.columnMapping.physicalName": c.physical}}


def _arrow_field(c: Column, ids: bool) -> pa.Field:
    t = pa.struct([_arrow_field(k, ids) for k in c.children]) if c.children else c.arrow_type
    return pa.field(c.physical, t, True, metadata={FIELD_ID: str(c.id).encode()} if ids else None)


def _physical_row(cols: list[Column], row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for c in cols:
        v = row.get(c.name)
        out[c.physical] = _physical_row(c.children, v) if c.children and v is not None else v
    return out


def row(i: int, p: Optional[str] = "x") -> dict[str, Any]:
    """The fixture row ``i`` (logical names); ``p`` only matters for partitioned tables."""
    return {"id": i, "amount": i * 1.5, "price": f"p{i}", "s": {"a": i * 10, "b": f"b{i}"}, "p": p}


#: version -> (files added: (name, rows ids, partition value), files removed by name)
VERSIONS: dict[int, tuple[list[tuple[str, list[int], Optional[str]]], list[str]]] = {
    0: ([("f0", [1, 2, 3], "x"), ("f1", [4, 5, 6], "y")], []),
    1: ([("f2", [7, 8, 9], None)], []),
    2: ([], ["f1"]),
}


def build_colmap_table(root: Path, mode: str, *, partitioned: bool = False) -> ColmapTable:
    """Write the fixture at ``root`` (``mode``: ``name`` or ``id``); returns what it holds."""
    assert mode in ("name", "id")
    cols = _columns(partitioned)
    parts = ["p"] if partitioned else []
    data_cols = [c for c in cols if c.name not in parts]
    schema = {"type": "struct", "fields": [_delta_field(c) for c in cols]}
    pschema = pa.schema([_arrow_field(c, mode == "id") for c in data_cols])
    (root / "_delta_log").mkdir(parents=True)
    now = int(time.time() * 1000)
    if mode == "name":
        protocol: dict[str, Any] = {"minReaderVersion": 2, "minWriterVersion": 5}
    else:
        protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
                    "writerFeatures": ["columnMapping"]}
    live: dict[str, tuple[list[int], Optional[str]]] = {}
    paths: dict[str, str] = {}
    rows: dict[int, list[dict[str, Any]]] = {}
    for version, (adds, removes) in VERSIONS.items():
        actions: list[dict[str, Any]] = [{"commitInfo": {"timestamp": now + version, "operation": "WRITE",
                                                         "engineInfo": "colmap-fixture"}}]
        if version == 0:
            actions += [{"protocol": protocol},
                        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                      "schemaString": json.dumps(schema), "partitionColumns": parts,
                                      "configuration": {"delta.columnMapping.mode": mode,
                                                        "delta.columnMapping.maxColumnId": "7"},
                                      "createdTime": now}}]
        for name, ids, p in adds:
            data = [_physical_row(data_cols, row(i, p if partitioned else "x")) for i in ids]
            table = pa.Table.from_pylist(data, schema=pschema)
            rel = f"{uuid.uuid4().hex[:2]}/part-{name}-{uuid.uuid4()}.snappy.parquet"  # Delta's random prefixes
            (root / rel).parent.mkdir(exist_ok=True)
            pq.write_table(table, root / rel)
            pid, pamount = cols[0].physical, cols[1].physical
            stats = {"numRecords": len(ids), "minValues": {pid: min(ids), pamount: min(ids) * 1.5},
                     "maxValues": {pid: max(ids), pamount: max(ids) * 1.5}, "nullCount": {pid: 0, pamount: 0}}
            pv = {cols[-1].physical: p} if partitioned else {}
            actions.append({"add": {"path": rel, "partitionValues": pv, "size": (root / rel).stat().st_size,
                                    "modificationTime": now, "dataChange": True, "stats": json.dumps(stats)}})
            live[name], paths[name] = (ids, p), rel
        for name in removes:
            actions.append({"remove": {"path": paths[name], "deletionTimestamp": now, "dataChange": True}})
            del live[name]
        (root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        rows[version] = sorted((_logical(row(i, p), partitioned) for ids, p in live.values() for i in ids),
                               key=lambda r: r["id"])
    return ColmapTable(root, mode, cols, parts, rows)


def _logical(r: dict[str, Any], partitioned: bool) -> dict[str, Any]:
    return r if partitioned else {k: v for k, v in r.items() if k != "p"}
