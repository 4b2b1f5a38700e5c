"""Table maintenance in SQL: ``OPTIMIZE t`` (compaction, a transaction operation) and ``VACUUM t``.

``OPTIMIZE t`` bin-packs the table's small files (smaller than the target size: the table property
``delta.targetFileSize`` in bytes, default 128 MiB) per partition into files of up to that size, read
and written by Spark (deletion vectors are applied, so their rows are gone from the new files). It is
an operation of the transaction like any DML: markers, sublog, redo and validation apply. Its commit
is ``remove`` + ``add`` with ``dataChange: false``: it reads exactly the files it rewrites and scans
no predicate, so a concurrent commit that adds files (or touches other files) never conflicts with
it; one that removed a file it compacts makes it redo on the new state. Result: one row
``numFilesRemoved``, ``numFilesAdded`` (files of a partition that is already compact are left alone).

``VACUUM t [RETAIN n HOURS] [DRY RUN]`` is not transactional (like CREATE TABLE): it deletes at once
the files no version within the retention window needs (:meth:`Lakehouse.vacuum`); a retention
below the table's ``delta.deletedFileRetentionDuration`` is refused unless the Spark setting
``spark.databricks.delta.retentionDurationCheck.enabled`` is ``false``. Result: one ``path`` row per
file deleted (with DRY RUN: that would be deleted), as Delta Lake returns.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lv_core.delta.actions import AddFile
from lv_core.delta.dv import dv_of
from lv_core.engine.spark_io import SparkEngine
from lv_core.engine.spark_schema import spark_errors
from lv_core.txn.context import OpContext
from lv_core.txn.ops import Operation, OpResult
from lv_core.txn.ports import LakehousePort

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DEFAULT_TARGET_BYTES", "RETENTION_CHECK", "bins", "optimize_op", "vacuum_sql"]

DEFAULT_TARGET_BYTES = 128 * 1024 * 1024
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


def target_bytes(configuration: Any) -> int:
    """``delta.targetFileSize`` (bytes) of the table, else :data:`DEFAULT_TARGET_BYTES`."""
    try:
        v = int(str((configuration or {}).get("delta.targetFileSize", "")).strip())
    except ValueError:
        return DEFAULT_TARGET_BYTES
    return v if v > 0 else DEFAULT_TARGET_BYTES


def bins(files: list[AddFile], target: int) -> list[list[AddFile]]:
    """Groups of small files (per partition, at most ``target`` bytes each) worth rewriting together:
    two or more files, or one file carrying a deletion vector (pure; deterministic order)."""
    by_part: dict[tuple, list[AddFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        if f.size < target or dv_of(f) is not None:
            by_part.setdefault(tuple(sorted((f.partition_values or {}).items())), []).append(f)
    out: list[list[AddFile]] = []
    for _key, group in sorted(by_part.items()):
        current: list[AddFile] = []
        size = 0
        for f in sorted(group, key=lambda f: (f.size, f.path)):
            if current and size + f.size > target:
                out.append(current)
                current, size = [], 0
            current.append(f)
            size += f.size
        if current:
            out.append(current)
    return [b for b in out if len(b) > 1 or dv_of(b[0]) is not None]


def optimize_op(engine: SparkEngine, table: str) -> Operation:
    """``OPTIMIZE table``: compaction as a ``dataChange: false`` rewrite; value ``(removed, added)``."""

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        groups = bins(list(ctx.files(table).values()), target_bytes(snap.metadata.configuration))
        res = OpResult(value=(0, 0), adds={table: []}, removes={table: []}, reads={table: set()})
        for group in groups:
            with spark_errors(f"OPTIMIZE {table}"):
                df = engine.scan(table, snap, group).coalesce(1)
                adds = engine.write(ctx, table, df, conformed=True)
            res.adds[table] += [dataclasses.replace(a, data_change=False) for a in adds]
            res.removes[table] += [f.remove(data_change=False) for f in group]
            res.reads[table].update(f.path for f in group)
        res.value = (len(res.removes[table]), len(res.adds[table]))
        return res

    return Operation("optimize", (table,), run, logical={"optimize": table})


def vacuum_sql(lh: LakehousePort, spark: Any, table: str, retain_hours: float | None, dry_run: bool) -> "DataFrame":
    """Run VACUUM; the retention check follows the Spark setting of Delta Lake (default on)."""
    try:
        check = str(spark.conf.get(RETENTION_CHECK, "true")).strip().lower() != "false"
    except Exception:  # a session that cannot answer: keep the check on  # noqa: BLE001
        check = True
    rep = lh.vacuum(table, retain_hours, dry_run=dry_run, enforce_retention=check)
    return spark.createDataFrame([(p,) for p in rep.deleted], "path string")
