"""Issue 38 (TPC-DS fixed cost): the session views of pinned table versions (lv_core/engine/spark_views.py).

The view name must change with anything that changes the rows (so a view can never serve another
version than the one a transaction pinned), and a view may be dropped only when nothing uses it.
No Spark here: a recording fake stands for the session.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import pytest

from lv_core.delta.actions import AddFile, Metadata, Protocol
from lv_core.delta.snapshot import Snapshot
from lv_core.engine.spark_views import PREFIX, TableViews, view_key

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
DV = {"deletionVector": {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
                         "sizeInBytes": 36, "cardinality": 2}}


def snap(files: list[AddFile], *, version: int = 3, schema: str = SCHEMA, parts: tuple[str, ...] = ()) -> Snapshot:
    md = Metadata(id="tid", schema_string=schema, partition_columns=parts)
    return Snapshot("t", version, Protocol(1, 2), md, {f.path: f for f in files})


def add(path: str, size: int = 100, **extra: Any) -> AddFile:
    return AddFile(path, {}, size, 0, extra=extra)


def key(files: list[AddFile], location: str = "file:/wh/t", **kw: Any) -> str:
    return view_key(location, snap(files, **kw), files)


def test_equal_content_gives_one_name_whatever_the_order_or_the_version_number() -> None:
    a, b = add("a.parquet"), add("b.parquet")
    assert key([a, b]) == key([b, a]) == key([a, b], version=7)  # a version that changed nothing else
    assert key([a]).startswith(PREFIX)


@pytest.mark.parametrize("change", ["file added", "file removed", "other path", "other size", "deletion vector",
                                    "other deletion vector", "partition value", "schema", "location"])
def test_anything_that_changes_the_rows_changes_the_name(change: str) -> None:
    a, b = add("a.parquet"), add("b.parquet")
    base = key([a, b])
    other = {
        "file added": lambda: key([a, b, add("c.parquet")]),
        "file removed": lambda: key([a]),
        "other path": lambda: key([a, add("c.parquet")]),
        "other size": lambda: key([a, add("b.parquet", 101)]),
        "deletion vector": lambda: key([a, add("b.parquet", **DV)]),  # same file, rows deleted by a DV
        "other deletion vector": lambda: key([a, add("b.parquet", deletionVector={**DV["deletionVector"],
                                                                                  "cardinality": 3})]),
        "partition value": lambda: key([a, dataclasses.replace(b, partition_values={"p": "1"})]),
        "schema": lambda: key([a, b], schema=SCHEMA.replace('"long"', '"integer"')),
        "location": lambda: key([a, b], location="file:/other/t"),
    }[change]()
    assert other != base


class FakeFrame:
    def __init__(self, spark: FakeSpark) -> None:
        self.spark = spark

    def createOrReplaceTempView(self, name: str) -> None:  # noqa: N802 - pyspark's name
        self.spark.views.add(name)


class FakeCatalog:
    def __init__(self, spark: FakeSpark) -> None:
        self.spark = spark

    def dropTempView(self, name: str) -> bool:  # noqa: N802 - pyspark's name
        self.spark.views.discard(name)
        self.spark.drops.append(name)
        return True


class FakeSpark:
    def __init__(self) -> None:
        self.views: set[str] = set()
        self.drops: list[str] = []
        self.catalog = FakeCatalog(self)


class Owner:
    """Something a view is held by (a statement's scope, a DataFrame's plan)."""


def test_a_view_is_made_once_and_dropped_only_when_idle_beyond_the_cap() -> None:
    spark = FakeSpark()
    views = TableViews(spark, keep_idle=2)
    held = Owner()
    assert views.use(held, "v0", lambda: FakeFrame(spark), "x")
    assert not views.use(Owner(), "v0", lambda: FakeFrame(spark), "x")  # made once; that owner is gone
    for i in range(1, 5):
        views.use(Owner(), f"v{i}", lambda: FakeFrame(spark), "x")  # each idle as soon as made
    assert views.created == 5
    # dropped when a view is made: the least recently used idle ones beyond 2 (v4 was in use then)
    assert spark.drops == ["v1"]
    assert spark.views == {"v0", "v2", "v3", "v4"}  # v0 is still held
    del held
    gc.collect()
    assert views.idle() == ["v2", "v3", "v4", "v0"]  # v0 idle now, the most recently released
    views.use(Owner(), "v5", lambda: FakeFrame(spark), "x")
    assert spark.drops == ["v1", "v2", "v3"] and spark.views == {"v0", "v4", "v5"}


def test_a_result_holds_its_views_after_the_statement_is_gone() -> None:
    spark = FakeSpark()
    views = TableViews(spark, keep_idle=0)
    scope, result = Owner(), Owner()
    views.use(scope, "v", lambda: FakeFrame(spark), "x")
    views.hold(result, ["v"])
    del scope
    gc.collect()
    views.use(Owner(), "w", lambda: FakeFrame(spark), "x")  # a new view: idle ones beyond 0 are dropped
    assert "v" in spark.views and "v" in views  # the result still reads it
    del result
    gc.collect()
    views.use(Owner(), "z", lambda: FakeFrame(spark), "x")
    assert "v" not in spark.views and "v" not in views


def test_a_view_lost_by_the_session_is_made_again_and_old_holders_do_not_release_the_new_one() -> None:
    spark = FakeSpark()
    views = TableViews(spark, keep_idle=0)
    old = Owner()
    views.use(old, "v", lambda: FakeFrame(spark), "x")
    spark.views.clear()  # dropped behind the registry's back
    views.forget(["v"])
    new = Owner()
    assert views.use(new, "v", lambda: FakeFrame(spark), "x")  # made again
    del old  # the old entry's holder: must not make the new one idle
    gc.collect()
    views.use(Owner(), "w", lambda: FakeFrame(spark), "x")
    assert "v" in spark.views


def test_a_version_is_made_a_view_when_read_a_second_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A version read once binds inline (a table changing between reads gets no view to make and drop)."""
    import lv_core.engine.spark_views as sv

    monkeypatch.setattr(sv, "SEEN", 2)
    spark = FakeSpark()
    views = TableViews(spark)
    assert not views.wanted("a")  # first read: inline
    assert views.wanted("a")  # second: make the view
    views.use(Owner(), "a", lambda: FakeFrame(spark), "x")
    assert views.wanted("a")  # it exists
    assert [views.wanted(n) for n in ("b", "c", "d")] == [False, False, False]
    assert not views.wanted("b")  # forgotten: only the last 2 versions read once are remembered
    assert spark.views == {"a"}
