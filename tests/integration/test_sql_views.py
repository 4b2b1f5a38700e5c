"""Spark tier, issue 38 (TPC-DS fixed cost): a SELECT binds each committed table version through a
session view named by its files (lv_core/engine/spark_views.py). A query on a version read before
makes no analysis round trip of its own, yet every query still reads exactly the version its
transaction pinned, its own writes included, and a returned DataFrame keeps its rows."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import lv_core
from lv_core.engine.spark_views import PREFIX, views_for
from lv_core.errors import SchemaError
from tests.integration.test_sql import bank, got

pytestmark = pytest.mark.spark

JOIN = "SELECT x.id, x.balance + y.balance AS total FROM bank_x x JOIN bank_y y ON x.id = y.id ORDER BY x.id"


@pytest.fixture
def lh(spark: Any, tmp_path: Any) -> lv_core.Lakehouse:
    h = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0)
    bank(h, {1: 100.0, 2: 200.0}, {1: 10.0, 2: 20.0})
    return h


def read(lh: lv_core.Lakehouse, text: str, preset: str = "serializable") -> list[tuple]:
    txn = lh.begin(preset)
    rows = got(txn.sql(text))
    txn.commit()
    return rows


class Calls:
    """The Spark Connect requests of ``txn.sql`` (analysis and execution) on this thread, counted on the
    client."""

    def __init__(self, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.analyze: list[str] = []
        self.commands = 0
        client, me = spark.client, threading.get_ident()
        analyze, command = client._analyze, client.execute_command

        def counted_analyze(method: str, **kw: Any) -> Any:
            if threading.get_ident() == me:  # not the fresh server's warm-up thread
                self.analyze.append(method)
            return analyze(method, **kw)

        def counted_command(*a: Any, **kw: Any) -> Any:
            if threading.get_ident() == me:
                self.commands += 1
            return command(*a, **kw)

        monkeypatch.setattr(client, "_analyze", counted_analyze)
        monkeypatch.setattr(client, "execute_command", counted_command)


@pytest.mark.parametrize("preset", ["serializable", "delta"])
def test_a_select_on_versions_read_before_costs_one_request_to_spark(lh: lv_core.Lakehouse, preset: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: one schema analysis per table and the query's (inline frames resolved every time)."""
    for _ in range(2):  # the second read of a version makes its view
        assert read(lh, JOIN, preset) == [(1, 110.0), (2, 220.0)]
    calls = Calls(lh.spark, monkeypatch)
    txn = lh.begin(preset)
    df = txn.sql(JOIN)
    assert calls.analyze == [] and calls.commands == 1  # the query's own analysis, as plain spark.sql
    assert got(df) == [(1, 110.0), (2, 220.0)]
    txn.commit()


def test_every_query_reads_its_pinned_version_and_a_result_keeps_its_rows(lh: lv_core.Lakehouse) -> None:
    assert read(lh, "SELECT sum(balance) AS s FROM bank_x") == [(300.0,)]  # the next read makes the view
    pinned = lh.begin("serializable")
    before = pinned.sql("SELECT sum(balance) AS s FROM bank_x")
    assert got(before) == [(300.0,)]
    w = lh.begin("serializable")
    w.sql("UPDATE bank_x SET balance = balance + 1 WHERE id = 1")
    w.commit()
    for _ in range(2):  # a newer version: another view (from its second read)
        assert read(lh, "SELECT sum(balance) AS s FROM bank_x") == [(301.0,)]
    assert got(pinned.sql("SELECT sum(balance) AS s FROM bank_x")) == [(300.0,)]  # still the pinned one
    pinned.commit()
    assert got(before) == [(300.0,)]  # after the commit and after a newer version was read
    assert read(lh, "SELECT sum(balance) AS s FROM bank_x", "delta") == [(301.0,)]


def test_own_writes_are_read_and_a_rollback_leaves_the_committed_version(lh: lv_core.Lakehouse) -> None:
    for _ in range(2):
        assert read(lh, "SELECT count(*) FROM bank_x") == [(2,)]
    txn = lh.begin("serializable")
    txn.sql("INSERT INTO bank_x VALUES (3, 300.0)")
    assert got(txn.sql("SELECT count(*) FROM bank_x")) == [(3,)]  # its staged file: bound inline
    txn.rollback()
    assert read(lh, "SELECT count(*) FROM bank_x") == [(2,)]


def test_a_version_read_once_makes_no_view(lh: lv_core.Lakehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table written between every read (a write-heavy workload) costs what it did without views."""
    views = views_for(lh.spark)
    made = views.created
    for i in range(3):
        w = lh.begin("serializable")
        w.sql(f"UPDATE bank_x SET balance = balance + 1 WHERE id = {1 + i % 2}")
        w.commit()
        calls = Calls(lh.spark, monkeypatch)
        assert read(lh, "SELECT count(*) FROM bank_x") == [(2,)]
        assert calls.analyze == ["schema"] and calls.commands == 1  # as before: no view made, none dropped
        monkeypatch.undo()
    assert views.created == made


def test_a_view_dropped_behind_the_registry_is_made_again(lh: lv_core.Lakehouse) -> None:
    for _ in range(2):
        assert read(lh, JOIN) == [(1, 110.0), (2, 220.0)]
    views = views_for(lh.spark)
    ours = [t.name for t in lh.spark.catalog.listTables() if t.name.startswith(PREFIX) and t.name in views]
    assert ours
    for name in ours:
        lh.spark.catalog.dropTempView(name)
    made = views.created
    assert read(lh, JOIN) == [(1, 110.0), (2, 220.0)]  # analysed again, the tables bound inline
    assert views.created == made
    assert read(lh, JOIN) == [(1, 110.0), (2, 220.0)]  # read again: made again
    assert views.created == made + 2


def test_errors_name_the_column_and_not_the_view(lh: lv_core.Lakehouse) -> None:
    for _ in range(2):
        assert read(lh, "SELECT count(*) FROM bank_x") == [(2,)]
    txn = lh.begin("serializable")
    with pytest.raises(SchemaError) as e:
        txn.sql("SELECT nope FROM bank_x")
    assert "nope" in str(e.value) and PREFIX not in str(e.value)
    txn.rollback()
