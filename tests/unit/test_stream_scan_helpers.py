"""Helpers of the stream data path: the columns a statement can name (lv_core.engine.sql_cols), and how the
stream writer cuts rows into files (lv_core.engine.pyds)."""

from __future__ import annotations

import pytest
from sqlglot import parse_one

from lv_core.engine.sql_cols import referenced


@pytest.mark.parametrize("sql,want", [
    ("SELECT count(*), sum(V) FROM t", {"v", "t"}),
    ("SELECT s.f FROM t WHERE k IN (SELECT k2 FROM u)", {"s", "f", "t", "k", "k2", "u"}),
    ("SELECT `Odd Name` FROM t JOIN u USING (id)", {"odd name", "t", "u", "id"}),
    ("SELECT x FROM t GROUP BY ALL", {"x", "t"}),
    ("SELECT * FROM t", None),
    ("SELECT a.* FROM t a", None),
    ("SELECT struct(*) FROM t", None),
    ("SELECT x FROM t NATURAL JOIN u", None),
    ("WITH c AS (SELECT * FROM t) SELECT x FROM c", None),
])
def test_referenced(sql: str, want: set[str] | None) -> None:
    got = referenced(parse_one(sql, read="spark"))
    assert (None if got is None else set(got)) == want


def test_several_trees_and_none() -> None:
    assert referenced(None) == frozenset()
    assert referenced(parse_one("a > 1", read="spark"), None, parse_one("b + c", read="spark")) == {"a", "b", "c"}


def test_stream_writer_slices_fill_files_up_to_max_rows() -> None:
    import pyarrow as pa

    from lv_core.engine.pyds import _slices

    t = pa.table({"a": list(range(10))})
    assert [x.num_rows for x in _slices(t, 0, 0)] == [10]        # no limit
    assert [x.num_rows for x in _slices(t, 0, 4)] == [4, 4, 2]
    assert [x.num_rows for x in _slices(t, 3, 4)] == [1, 4, 4, 1]  # the open file has room for 1
    assert [x.num_rows for x in _slices(t, 4, 4)] == [4, 4, 2]     # the open file is full
