"""Delta tables with deletion vectors, written here byte by byte (no Delta writer involved).

The log is plain JSON written by these helpers; DV bitmaps are serialized with
:mod:`lv_core.delta.roaring` and DV files laid out per the Delta protocol (version byte, then per DV
a big-endian size, the bitmap, a big-endian CRC-32). Every fixture is meant to be proven by an
independent reader (``deltalake.DeltaTable(...).to_pyarrow_table()``) before LakeVilla is tested on it.

:func:`dv_history` builds a small partitioned table whose versions use every descriptor kind:
inline (``i``), relative UUID files with a random prefix (``u``), absolute paths (``p``), array,
bitmap and run containers, and a DV replaced by another; it returns the rows expected at each version.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lv_core.delta.dv import DeletionVector, dv_file
from lv_core.delta.roaring import encode_bitmap, z85_encode

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("p", pa.string())])
DELTA_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in (("id", "long"), ("v", "string"),
                                                                        ("p", "string"))]})
DV_PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
               "writerFeatures": ["deletionVectors"]}


def _now() -> int:
    return int(time.time() * 1000)


def commit(root: Path, version: int, actions: Iterable[dict[str, Any]], operation: str = "WRITE") -> None:
    """Write ``_delta_log/<version>.json`` (a commitInfo first)."""
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [{"commitInfo": {"timestamp": _now(), "operation": operation, "engineInfo": "lv-test-fixture"}},
             *actions]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")


def create(root: Path, partition_columns: Sequence[str] = ("p",), *, enable: bool = True,
           dv_feature: bool = True) -> None:
    """Version 0: protocol 3/7 with the ``deletionVectors`` feature (1/2 without ``dv_feature``), metadata,
    no files; ``enable`` sets ``delta.enableDeletionVectors``."""
    conf = {"delta.enableDeletionVectors": "true"} if enable else {}
    protocol = DV_PROTOCOL if dv_feature else {"minReaderVersion": 1, "minWriterVersion": 2}
    commit(root, 0, [{"protocol": protocol},
                     {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                   "schemaString": DELTA_SCHEMA, "partitionColumns": list(partition_columns),
                                   "configuration": conf, "createdTime": _now()}}], "CREATE TABLE")


def data_file(root: Path, rows: list[dict[str, Any]], partition: Optional[str]) -> dict[str, Any]:
    """Write a Parquet file of ``rows`` (partition column left out) in ``p=<value>/``; its ``add`` body."""
    folder = f"p={partition}" if partition is not None else "p=__HIVE_DEFAULT_PARTITION__"
    rel = f"{folder}/part-{uuid.uuid4().hex}.parquet"
    t = pa.Table.from_pylist(rows, schema=SCHEMA).drop_columns(["p"])
    buf = io.BytesIO()
    pq.write_table(t, buf)
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(buf.getvalue())
    return {"path": rel, "partitionValues": {"p": partition}, "size": len(buf.getvalue()),
            "modificationTime": _now(), "dataChange": True, "stats": json.dumps({"numRecords": len(rows)})}


def inline_dv(rows: Iterable[int], *, runs: bool = False) -> dict[str, Any]:
    """An inline (``i``) descriptor deleting ``rows``."""
    return DeletionVector.inline(list(rows), runs=runs).to_json()


def file_dvs(root: Path, row_sets: Sequence[tuple[Iterable[int], bool]], *, prefix: str = "",
             absolute: bool = False) -> list[dict[str, Any]]:
    """One DV file holding a DV per ``(rows, runs)``; its descriptors (``u``, or ``p`` if ``absolute``)."""
    bitmaps = [encode_bitmap(list(rows), runs=runs) for rows, runs in row_sets]
    data, offsets = dv_file(bitmaps)
    u = uuid.uuid4()
    rel = f"{prefix}/deletion_vector_{u}.bin" if prefix else f"deletion_vector_{u}.bin"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(data)
    out = []
    for b, off, (rows, _runs) in zip(bitmaps, offsets, row_sets, strict=True):
        where = (root / rel).as_uri() if absolute else prefix + z85_encode(u.bytes)
        out.append({"storageType": "p" if absolute else "u", "pathOrInlineDv": where, "offset": off,
                    "sizeInBytes": len(b), "cardinality": len(set(rows))})
    return out


def with_dv(add: dict[str, Any], dv: dict[str, Any]) -> dict[str, Any]:
    return {**add, "deletionVector": dv, "dataChange": True}


def remove_of(add: dict[str, Any]) -> dict[str, Any]:
    """The ``remove`` of an ``add`` body (its DV descriptor included, as the spec requires)."""
    body = {"path": add["path"], "deletionTimestamp": _now(), "dataChange": True, "extendedFileMetadata": True,
            "partitionValues": add["partitionValues"], "size": add["size"]}
    if "deletionVector" in add:
        body["deletionVector"] = add["deletionVector"]
    return {"remove": body}


def rows_of(n: int, start: int, p: Optional[str]) -> list[dict[str, Any]]:
    return [{"id": start + i, "v": f"r{start + i}", "p": p} for i in range(n)]


def dv_history(root: Path) -> list[list[dict[str, Any]]]:
    """Build the DV test table at ``root``; return the rows (sorted by id) expected at versions 0..3.

    v0: protocol with ``deletionVectors``, no files. v1: three files, no DVs. v2: file A gets an
    inline DV (array container), files B and C DVs in one ``u`` file with prefix ``ab`` (array; bitmap
    container: >4096 rows of one 64K block). v3: file A's DV replaced by a ``p`` DV (run containers).
    """
    create(root)
    a = rows_of(10, 0, "a")
    b = rows_of(10, 100, "b")
    c = rows_of(6000, 1000, "a")
    fa, fb, fc = data_file(root, a, "a"), data_file(root, b, "b"), data_file(root, c, "a")
    commit(root, 1, [{"add": fa}, {"add": fb}, {"add": fc}])
    gone_a2 = [1, 3, 5]
    gone_b = [0, 9]
    gone_c = [i for i in range(6000) if i % 7]
    dv_b, dv_c = file_dvs(root, [(gone_b, False), (gone_c, False)], prefix="ab")
    fa2, fb2, fc2 = with_dv(fa, inline_dv(gone_a2)), with_dv(fb, dv_b), with_dv(fc, dv_c)
    commit(root, 2, [remove_of(fa), {"add": fa2}, remove_of(fb), {"add": fb2}, remove_of(fc), {"add": fc2}],
           "DELETE")
    gone_a3 = [1, 2, 3, 4, 5, 7]
    (dv_a3,) = file_dvs(root, [(gone_a3, True)], absolute=True)
    commit(root, 3, [remove_of(fa2), {"add": with_dv(fa, dv_a3)}], "DELETE")

    def live(rows: list[dict[str, Any]], gone: Iterable[int]) -> list[dict[str, Any]]:
        g = set(gone)
        return [r for i, r in enumerate(rows) if i not in g]

    v1 = a + b + c
    v2 = live(a, gone_a2) + live(b, gone_b) + live(c, gone_c)
    v3 = live(a, gone_a3) + live(b, gone_b) + live(c, gone_c)
    return [sorted(v, key=lambda r: r["id"]) for v in ([], v1, v2, v3)]


def delta_rs_rows(root: Path, version: Optional[int] = None) -> list[dict[str, Any]]:
    """The table's rows as delta-rs reads them (sorted by id). Its DataFusion reader applies deletion
    vectors (``to_pyarrow_table`` refuses tables with the ``deletionVectors`` reader feature)."""
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(str(root), version=version)
    batches = QueryBuilder().register("t", dt).execute("SELECT id, v, p FROM t ORDER BY id")
    return sorted(pa.table(batches.read_all()).to_pylist(), key=lambda r: r["id"])
