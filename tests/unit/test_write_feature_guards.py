"""Write guards of table features through a real transaction (pyarrow operations, no Spark): a write the
table's features forbid, or one whose rows nobody checked against its CHECK constraints/invariants, is
refused naming the feature and what to do, and the table (as delta-rs reads it) stays exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.engine import arrow_ops as ops
from lv_core.errors import UnsupportedFeature
from tests.helpers import feature_fixtures as ff

NEW = pa.Table.from_pylist([{"id": 4, "v": "d"}], schema=ff.SCHEMA)


def refused(tmp_path: Path, name: str, op: Any, feature: str, *patterns: str) -> None:
    root = tmp_path / "wh" / name
    before = ff.delta_state(root)
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        txn = lh.begin()
        with pytest.raises(UnsupportedFeature) as e:
            txn.execute(op)
        assert e.value.feature == feature
        for p in (feature, f"'{name}'", *patterns):
            assert p in str(e.value), f"{p!r} not in {str(e.value)!r}"
        txn.rollback()
        assert ff.delta_state(root) == before
        assert [p for p in root.rglob("*") if txn.id in p.name] == []
    finally:
        lh.close()


def test_append_only_refuses_a_delete_but_takes_an_append(tmp_path: Path) -> None:
    ff.append_only_table(tmp_path / "wh" / "ao")
    refused(tmp_path, "ao", ops.delete("ao", ops.eq("id", 2)), "appendOnly", "append-only", "INSERT")
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        with lh.transaction() as txn:
            txn.execute(ops.append("ao", NEW))
    finally:
        lh.close()
    assert ff.delta_rows(tmp_path / "wh" / "ao") == ff.ROWS + NEW.to_pylist()


@pytest.mark.parametrize("build, feature, rule", [
    (ff.check_constraint_table, "checkConstraints", "CHECK constraint 'id_positive'"),
    (ff.invariant_table, "invariants", "invariant of column 'id'"),
])
def test_rows_nobody_checked_are_refused(tmp_path: Path, build: Callable[[Path], None], feature: str,
                                         rule: str) -> None:
    build(tmp_path / "wh" / "t")
    refused(tmp_path, "t", ops.append("t", NEW), feature, rule, "Spark")
    # a copy-on-write delete writes the file's other rows again: refused too
    refused(tmp_path, "t", ops.delete("t", ops.eq("id", 1)), feature, rule)
    # removing whole files adds no row: nothing to check
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        with lh.transaction() as txn:
            txn.execute(ops.delete("t", lambda rows: pa.array([True] * rows.num_rows)))
    finally:
        lh.close()
    assert ff.delta_rows(tmp_path / "wh" / "t") == []


def test_identity_column_refuses_new_rows_but_takes_a_delete(tmp_path: Path) -> None:
    ff.identity_table(tmp_path / "wh" / "idt")
    before = ff.identity_metadata(tmp_path / "wh" / "idt")
    refused(tmp_path, "idt", ops.append("idt", NEW), "identityColumns", "identity column 'id'", "nothing was written")
    # a copy-on-write delete writes the file's other rows again: pyarrow operations cannot vouch for them
    refused(tmp_path, "idt", ops.delete("idt", ops.eq("id", 1)), "identityColumns")
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    try:
        with lh.transaction() as txn:  # removing whole files adds no row
            txn.execute(ops.delete("idt", lambda rows: pa.array([True] * rows.num_rows)))
    finally:
        lh.close()
    assert ff.delta_rows(tmp_path / "wh" / "idt") == []
    assert ff.identity_metadata(tmp_path / "wh" / "idt") == before
