"""Table-feature fixtures for the conformance tier: deletion vectors and column mapping (hand-written
after the Delta protocol by :mod:`tests.helpers.dv_fixtures` and :mod:`tests.helpers.colmap_fixtures`),
as :class:`~tests.helpers.delta_fixtures.DeltaFixture` read back with delta-rs's DataFusion reader."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tests.helpers import colmap_fixtures, dv_fixtures
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


FEATURE_BUILDERS: dict[str, Callable[[Path], DeltaFixture]] = {
    "dv_partitioned": dv_partitioned,
    "dv_declared_unused": dv_declared_unused,
    **{f.__name__: f for f in (_colmap(m, p) for m in ("name", "id") for p in (False, True))},
}
