"""Delta tables with a history written by ``deltalake`` (delta-rs), for the conformance tier (issue 17).

Where :mod:`tests.helpers.delta_fixtures` covers types and partition values, these cover what tables
go through: appends, overwrites, deletes, updates, merges, compaction, Z-order, checkpoints, log
clean-up, vacuum, restore, partitioning by one or two columns (with escaped characters and nulls),
table configuration and constraints, many small files, and empty versions. No builder uses LakeVilla;
each returns a :class:`~tests.helpers.delta_fixtures.DeltaFixture` whose versions are all readable by
``deltalake`` (the conformance test proves that before comparing).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from tests.helpers.delta_fixtures import DeltaFixture

__all__ = ["LIFECYCLE_BUILDERS"]

UTC = dt.timezone.utc
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64()),
                    ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))])


def rows(ids: range | list[int], *, name: Callable[[int], str | None] | None = None) -> pa.Table:
    """Rows of :data:`SCHEMA` for ``ids`` (name from ``name(i)``, default ``n<i % 3>``)."""
    out = []
    for i in ids:
        out.append({"id": i, "name": (name or (lambda k: f"n{k % 3}"))(i), "value": i * 1.5,
                    "day": dt.date(2024, 1, 1) + dt.timedelta(days=i % 5),
                    "ts": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(minutes=i)})
    return pa.Table.from_pylist(out, schema=SCHEMA)


def _dt(path: Path) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(str(path))


def _write(path: Path, data: pa.Table, **kwargs: Any) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(path), data, **kwargs)


def _versions(path: Path) -> list[int]:
    latest = _dt(path).version()
    return sorted({0, latest // 2, latest})


def _fx(name: str, path: Path, parts: list[str] | None = None) -> DeltaFixture:
    return DeltaFixture(name, path, _versions(path), partition_columns=parts or [])


# --------------------------------------------------------------------------- builders
def appends(root: Path) -> DeltaFixture:
    p = root / "appends"
    for k in range(4):
        _write(p, rows(range(k * 5, k * 5 + 5)), mode="append")
    return _fx("appends", p)


def overwrite(root: Path) -> DeltaFixture:
    p = root / "overwrite"
    _write(p, rows(range(0, 10)))
    _write(p, rows(range(100, 104)), mode="overwrite")
    _write(p, rows(range(200, 203)), mode="append")
    return _fx("overwrite", p)


def deletes(root: Path) -> DeltaFixture:
    p = root / "deletes"
    _write(p, rows(range(0, 20)))
    _dt(p).delete("id % 3 = 0")
    _dt(p).delete("value > 25")
    return _fx("deletes", p)


def updates(root: Path) -> DeltaFixture:
    p = root / "updates"
    _write(p, rows(range(0, 12)))
    _dt(p).update(updates={"value": "value * 10"}, predicate="id < 4")
    _dt(p).update(new_values={"name": "renamed"}, predicate="id >= 8")
    return _fx("updates", p)


def merges(root: Path) -> DeltaFixture:
    p = root / "merges"
    _write(p, rows(range(0, 10)))
    src = rows(range(5, 15), name=lambda i: f"m{i}")
    (_dt(p).merge(src, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    (_dt(p).merge(rows([0, 1, 2]), "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_delete().execute())
    return _fx("merges", p)


def compacted(root: Path) -> DeltaFixture:
    p = root / "compacted"
    for k in range(6):
        _write(p, rows(range(k * 3, k * 3 + 3)), mode="append")
    _dt(p).optimize.compact()
    _write(p, rows(range(100, 102)), mode="append")
    return _fx("compacted", p)


def z_ordered(root: Path) -> DeltaFixture:
    p = root / "z_ordered"
    for k in range(4):
        _write(p, rows(range(k * 7, k * 7 + 7)), mode="append")
    _dt(p).optimize.z_order(["value", "id"])
    return _fx("z_ordered", p)


def checkpointed(root: Path) -> DeltaFixture:
    p = root / "checkpointed"
    for k in range(5):
        _write(p, rows(range(k * 4, k * 4 + 4)), mode="append")
    _dt(p).create_checkpoint()
    _write(p, rows(range(50, 53)), mode="append")
    _dt(p).delete("id = 1")
    return _fx("checkpointed", p)


def checkpoint_then_cleanup(root: Path) -> DeltaFixture:
    """Old commits removed after a checkpoint, as log retention does: only versions from it on are readable."""
    p = root / "checkpoint_then_cleanup"
    _write(p, rows(range(0, 4)), configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    for k in range(1, 5):
        _write(p, rows(range(k * 4, k * 4 + 4)), mode="append")
    _dt(p).create_checkpoint()
    _dt(p).cleanup_metadata()
    _write(p, rows(range(90, 92)), mode="append")
    latest = _dt(p).version()
    first = min(int(f.name.split(".")[0]) for f in (p / "_delta_log").glob("*.json") if f.name[0].isdigit())
    versions = sorted({max(first, 4), latest})
    return DeltaFixture("checkpoint_then_cleanup", p, versions)


def vacuumed(root: Path) -> DeltaFixture:
    """Files no longer referenced removed by VACUUM (retention 0): the latest version reads."""
    p = root / "vacuumed"
    _write(p, rows(range(0, 10)))
    _dt(p).delete("id < 5")
    _dt(p).optimize.compact()
    _dt(p).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    return DeltaFixture("vacuumed", p, [_dt(p).version()])


def restored(root: Path) -> DeltaFixture:
    p = root / "restored"
    _write(p, rows(range(0, 6)))
    _dt(p).delete("id > 2")
    _dt(p).restore(0)
    return _fx("restored", p)


def partitioned_one(root: Path) -> DeltaFixture:
    p = root / "partitioned_one"
    _write(p, rows(range(0, 9)), partition_by=["name"])
    _write(p, rows(range(9, 15)), partition_by=["name"], mode="append")
    _dt(p).delete("name = 'n1'")
    return _fx("partitioned_one", p, ["name"])


def partitioned_two(root: Path) -> DeltaFixture:
    p = root / "partitioned_two"
    _write(p, rows(range(0, 20)), partition_by=["day", "name"])
    _dt(p).update(updates={"value": "value + 1"}, predicate="name = 'n2'")
    return _fx("partitioned_two", p, ["day", "name"])


def partitioned_nulls(root: Path) -> DeltaFixture:
    p = root / "partitioned_nulls"
    _write(p, rows(range(0, 8), name=lambda i: None if i % 2 else f"v{i % 4}"), partition_by=["name"])
    _write(p, rows(range(8, 10), name=lambda i: None), partition_by=["name"], mode="append")
    return _fx("partitioned_nulls", p, ["name"])


def partitioned_escaped(root: Path) -> DeltaFixture:
    odd = ["a b", "x+y", "50%", "ü/ö", "k=v", "c:d", "(p)@q,r", "#h?", "it's"]
    p = root / "partitioned_escaped"
    _write(p, rows(range(0, len(odd)), name=lambda i: odd[i]), partition_by=["name"])
    _dt(p).delete("id = 2")
    return _fx("partitioned_escaped", p, ["name"])


def partitioned_by_date(root: Path) -> DeltaFixture:
    p = root / "partitioned_by_date"
    _write(p, rows(range(0, 15)), partition_by=["day"])
    _write(p, rows([15, 20, 25]), partition_by=["day"], mode="overwrite",
           predicate="day = '2024-01-01'")
    return _fx("partitioned_by_date", p, ["day"])


def many_small_files(root: Path) -> DeltaFixture:
    p = root / "many_small_files"
    for k in range(25):
        _write(p, rows([k]), mode="append")
    return _fx("many_small_files", p)


def empty_then_filled(root: Path) -> DeltaFixture:
    p = root / "empty_then_filled"
    from deltalake import DeltaTable

    DeltaTable.create(str(p), SCHEMA)
    _write(p, rows(range(0, 3)), mode="append")
    _dt(p).delete("id >= 0")
    _write(p, rows(range(3, 5)), mode="append")
    return DeltaFixture("empty_then_filled", p, [1, 2, 3])


def described(root: Path) -> DeltaFixture:
    """A table with a name, a description and configuration (kept through LakeVilla's commits)."""
    p = root / "described"
    _write(p, rows(range(0, 5)), name="described", description="a table with metadata",
           configuration={"delta.checkpointInterval": "3", "delta.logRetentionDuration": "interval 30 days"})
    for k in range(1, 5):
        _write(p, rows(range(k * 5, k * 5 + 5)), mode="append")
    return _fx("described", p)


def nulls_everywhere(root: Path) -> DeltaFixture:
    p = root / "nulls_everywhere"
    data = pa.Table.from_pylist([{"id": i} for i in range(5)], schema=SCHEMA)
    _write(p, data)
    _write(p, rows(range(5, 8)), mode="append")
    return _fx("nulls_everywhere", p)


def large_values(root: Path) -> DeltaFixture:
    """Long strings (stats truncated by the writer) and extreme numbers."""
    p = root / "large_values"
    data = pa.Table.from_pylist([
        {"id": i, "name": ("ü" * 300) + str(i), "value": [1e308, -1e308, 0.0, float("inf"), -0.0][i % 5],
         "day": dt.date(9999, 12, 31) if i % 2 else dt.date(1, 1, 1),
         "ts": dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) if i % 2 else dt.datetime(1, 1, 1, tzinfo=UTC)}
        for i in range(6)], schema=SCHEMA)
    _write(p, data)
    _write(p, rows(range(6, 9)), mode="append")
    return _fx("large_values", p)


def merge_partitioned(root: Path) -> DeltaFixture:
    p = root / "merge_partitioned"
    _write(p, rows(range(0, 12)), partition_by=["name"])
    src = rows(range(6, 18), name=lambda i: f"n{i % 3}")
    (_dt(p).merge(src, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update(updates={"value": "s.value + 1000"}).when_not_matched_insert_all().execute())
    return _fx("merge_partitioned", p, ["name"])


def append_only_cfg(root: Path) -> DeltaFixture:
    """``delta.appendOnly``: LakeVilla reads it and appends; the conformance delete is refused (checked)."""
    p = root / "append_only_cfg"
    _write(p, rows(range(0, 5)), configuration={"delta.appendOnly": "true"})
    _write(p, rows(range(5, 8)), mode="append")
    return _fx("append_only_cfg", p)


def check_constraint(root: Path) -> DeltaFixture:
    p = root / "check_constraint"
    _write(p, rows(range(0, 6)))
    _dt(p).alter.add_constraint({"value_non_negative": "value >= 0"})
    _write(p, rows(range(6, 9)), mode="append")
    return _fx("check_constraint", p)


def long_history(root: Path) -> DeltaFixture:
    """More than one checkpoint interval of commits (deltalake writes checkpoints every 100 by default;
    this table asks for one every 5)."""
    p = root / "long_history"
    _write(p, rows([0]), configuration={"delta.checkpointInterval": "5"})
    for k in range(1, 13):
        _write(p, rows([k]), mode="append")
        if k % 5 == 0:
            _dt(p).create_checkpoint()
    return _fx("long_history", p)


def overwrite_partitions(root: Path) -> DeltaFixture:
    p = root / "overwrite_partitions"
    _write(p, rows(range(0, 9)), partition_by=["name"])
    _write(p, rows([100, 103], name=lambda i: "n1"), partition_by=["name"], mode="overwrite",
           predicate="name = 'n1'")
    return _fx("overwrite_partitions", p, ["name"])


def schema_added_column(root: Path) -> DeltaFixture:
    p = root / "schema_added_column"
    _write(p, rows(range(0, 4)))
    wider = rows(range(4, 8)).append_column("extra", pa.array(["e4", None, "e6", "e7"], pa.string()))
    _write(p, wider, mode="append", schema_mode="merge")
    return _fx("schema_added_column", p)


def schema_overwritten(root: Path) -> DeltaFixture:
    p = root / "schema_overwritten"
    _write(p, rows(range(0, 4)))
    narrow = pa.table({"id": pa.array([10, 11], pa.int64()), "label": pa.array(["a", "b"])})
    _write(p, narrow, mode="overwrite", schema_mode="overwrite")
    return DeltaFixture("schema_overwritten", p, [_dt(p).version()])


LIFECYCLE_BUILDERS: dict[str, Callable[[Path], DeltaFixture]] = {f.__name__: f for f in (
    appends, overwrite, deletes, updates, merges, compacted, z_ordered, checkpointed, checkpoint_then_cleanup,
    vacuumed, restored, partitioned_one, partitioned_two, partitioned_nulls, partitioned_escaped,
    partitioned_by_date, many_small_files, empty_then_filled, described, nulls_everywhere, large_values,
    merge_partitioned, append_only_cfg, check_constraint, long_history, overwrite_partitions,
    schema_added_column, schema_overwritten)}


def many_partition_values(root: Path) -> DeltaFixture:
    """120 partition values (one file each): the direct path reads them in one Spark scan."""
    p = root / "many_partition_values"
    _write(p, rows(range(0, 120), name=lambda i: f"v{i:03d}"), partition_by=["name"])
    _dt(p).delete("id % 10 = 0")
    return _fx("many_partition_values", p, ["name"])


LIFECYCLE_BUILDERS["many_partition_values"] = many_partition_values
