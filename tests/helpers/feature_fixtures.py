"""Delta tables using writer features, built independently of lv_core (delta-rs, pyarrow and logs
written by hand from the Delta protocol text), each proved readable by delta-rs before use.

Every builder creates ``root`` (a table folder) holding ``ROWS`` (ids 1..3) and returns nothing;
:func:`delta_state` is what a test compares before/after a refused write (version, files, rows).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ROWS", "SCHEMA", "append_only_table", "check_constraint_table", "delta_rows", "delta_state",
           "hand_written_table", "in_commit_timestamp_table", "invariant_table", "raw_commits"]

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
