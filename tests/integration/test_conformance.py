"""Conformance tier (issue 17): LakeVilla reads and transacts on Delta tables written by other tools
exactly as ``deltalake`` (delta-rs) sees them.

For every fixture table (:mod:`tests.helpers.lifecycle_fixtures`: histories written by delta-rs;
:mod:`tests.helpers.delta_fixtures`: types and partition values, by delta-rs and by hand after the
Delta protocol; :mod:`tests.helpers.table_feature_fixtures`: deletion vectors and column mapping,
by hand after the protocol): at its first, a middle and its
latest version, LakeVilla's snapshot names the same data files as ``deltalake`` and both data paths
(Spark ``direct`` and ``arrow``) read the same rows. Then a LakeVilla transaction appends a row and
another deletes one, and after each commit ``deltalake`` reads exactly LakeVilla's rows. Tables whose
configuration forbids a write (``delta.appendOnly``) must refuse it with a clear error and stay as
they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lv_core
from lv_core.engine import api
from lv_core.errors import UnsupportedFeature
from lv_core.protocol import ict
from lv_core.protocol.layout import commit_key
from tests.helpers.delta_fixtures import BUILDERS as TYPE_BUILDERS
from tests.helpers.delta_fixtures import DeltaFixture, canonical_rows, check_fixture, expected_rows
from tests.helpers.lifecycle_fixtures import LIFECYCLE_BUILDERS
from tests.helpers.table_feature_fixtures import FEATURE_BUILDERS

pytestmark = [pytest.mark.spark, pytest.mark.conformance]

ALL: dict[str, Callable[[Path], DeltaFixture]] = {**LIFECYCLE_BUILDERS, **TYPE_BUILDERS, **FEATURE_BUILDERS}


def _deltalake_files(fx: DeltaFixture, version: int) -> set[str]:
    from deltalake import DeltaTable

    adds = DeltaTable(str(fx.path), version=version).get_add_actions(flatten=True)
    return {unquote(p) for p in adds.column("path").to_pylist()}


def _lv_rows(lh: lv_core.Lakehouse, fx: DeltaFixture, version: int | None = None) -> list[dict[str, Any]]:
    return canonical_rows(lh.read(fx.path.name, version).toArrow(), fx.key)


def _lakehouse(wh: Path, spark: Any, data_path: str) -> lv_core.Lakehouse:
    lh = lv_core.connect(wh, spark=spark)
    api.configure(lh, data_path=data_path)
    return lh


def test_the_tier_covers_at_least_forty_tables() -> None:
    assert len(ALL) >= 40


@pytest.mark.parametrize("name", sorted(ALL))
def test_reads_and_commits_agree_with_deltalake(spark: Any, tmp_path: Path, name: str) -> None:
    wh = tmp_path / "wh"
    fx = ALL[name](wh)
    check_fixture(fx)
    direct, arrow = _lakehouse(wh, spark, "direct"), _lakehouse(wh, spark, "arrow")
    table = fx.path.name
    for v in fx.versions:
        snap = direct.snapshot(table, v)
        assert snap.version == v
        assert set(snap.files) == _deltalake_files(fx, v), f"{name}@{v}: data files"
        want = expected_rows(fx, v)
        assert _lv_rows(direct, fx, v) == want, f"{name}@{v}: direct path rows"
        assert _lv_rows(arrow, fx, v) == want, f"{name}@{v}: arrow path rows"

    latest = direct.read(table).toArrow()
    ids = latest.column(fx.key)
    if len(latest) == 0:
        pytest.fail(f"{name}: a fixture's latest version must hold rows")
    new_row = latest.filter(pc.equal(ids, pc.max(ids))).slice(0, 1)
    new_row = new_row.set_column(new_row.schema.get_field_index(fx.key), fx.key,
                                 pa.array([10_000], new_row.schema.field(fx.key).type))
    with direct.transaction() as txn:
        txn.insert(table, new_row)
    appended = _lv_rows(direct, fx)
    assert appended == expected_rows(fx) == _lv_rows(arrow, fx), f"{name}: after the LakeVilla append"

    gone = pc.min(ids).as_py()
    before = direct.version(table)
    if direct.snapshot(table).metadata.configuration.get("delta.appendOnly") == "true":
        txn = direct.begin()
        with pytest.raises(UnsupportedFeature, match="appendOnly"):
            txn.delete(table, f"{fx.key} = {gone}")
        txn.rollback()
        assert direct.version(table) >= before and _lv_rows(direct, fx) == appended == expected_rows(fx)
        return
    with direct.transaction() as txn:
        assert txn.delete(table, f"{fx.key} = {gone}") >= 1
    after = _lv_rows(direct, fx)
    assert after == [r for r in appended if r[fx.key] != gone]
    assert after == expected_rows(fx) == _lv_rows(arrow, fx), f"{name}: after the LakeVilla delete"
    snap = direct.snapshot(table)
    if "inCommitTimestamp" in (snap.protocol.writer_features or ()):  # every version stamped, increasing
        stamped = [ict.stamped(direct.store.get(commit_key(table, v)).data) for v in range(snap.version + 1)]
        assert all(isinstance(s, int) for s in stamped) and stamped == sorted(set(stamped)), stamped
