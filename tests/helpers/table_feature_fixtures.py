"""Table-feature fixtures for the conformance tier: deletion vectors, column mapping and in-commit
timestamps (hand-written after the Delta protocol by :mod:`tests.helpers.dv_fixtures`,
:mod:`tests.helpers.colmap_fixtures` and :mod:`tests.helpers.feature_fixtures`),
as :class:`~tests.helpers.delta_fixtures.DeltaFixture` read back with delta-rs's DataFusion reader."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import colmap_fixtures, dv_fixtures
from tests.helpers import feature_fixtures as ff
from tests.helpers.delta_fixtures import DeltaFixture

__all__ = ["FEATURE_BUILDERS"]


def dv_partitioned(root: Path) -> DeltaFixture:
    """Inline, relative (``u`` with prefix) and absolute (``p``) deletion vectors; array, bitmap and run
    containers; a DV replaced by another."""
    path = root / "dv_partitioned"
    dv_fixtures.dv_history(path)
    return DeltaFixture("dv_partitioned", path, [1, 2, 3], partition_columns=["p"], reader="sql")


def dv_declared_unused(root: Path) -> DeltaFixture:
    """The ``deletionVectors`` feature declared, no file has one (delta-rs writes such tables)."""
    path = root / "dv_declared_unused"
    dv_fixtures.create(path)
    f1 = dv_fixtures.data_file(path, dv_fixtures.rows_of(5, 0, "a"), "a")
    dv_fixtures.commit(path, 1, [{"add": f1}])
    f2 = dv_fixtures.data_file(path, dv_fixtures.rows_of(4, 50, None), None)
    dv_fixtures.commit(path, 2, [{"add": f2}])
    return DeltaFixture("dv_declared_unused", path, [1, 2], partition_columns=["p"], reader="sql")


def _colmap(mode: str, partitioned: bool) -> Callable[[Path], DeltaFixture]:
    name = f"colmap_{mode}{'_partitioned' if partitioned else ''}"

    def build(root: Path) -> DeltaFixture:
        table = colmap_fixtures.build_colmap_table(root / name, mode, partitioned=partitioned)
        return DeltaFixture(name, table.root, sorted(table.rows), partition_columns=table.partition_by, reader="sql")

    build.__name__ = name
    return build


def ict_history(root: Path) -> DeltaFixture:
    """In-commit timestamps (writer 7, ``inCommitTimestamp``), log written by hand: version 0 holds three
    rows, version 1 appends a file; each commitInfo comes first and is stamped a millisecond after the
    one before (an hour ahead of the clock: a writer must follow the log, not its clock)."""
    path = root / "ict_history"
    ict0 = int(time.time() * 1000) + 3_600_000
    ff.in_commit_timestamp_table(path, ict=ict0)
    name = f"part-00001-{uuid.uuid4()}.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": 7, "v": "g"}], schema=ff.SCHEMA), path / name)
    now = int(time.time() * 1000)
    lines = [{"commitInfo": {"timestamp": now, "operation": "WRITE", "inCommitTimestamp": ict0 + 1}},
             {"add": {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size,
                      "modificationTime": now, "dataChange": True}}]
    (path / "_delta_log" / f"{1:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return DeltaFixture("ict_history", path, [0, 1])


FEATURE_BUILDERS: dict[str, Callable[[Path], DeltaFixture]] = {
    "dv_partitioned": dv_partitioned,
    "dv_declared_unused": dv_declared_unused,
    "ict_history": ict_history,
    **{f.__name__: f for f in (_colmap(m, p) for m in ("name", "id") for p in (False, True))},
}
