"""Spark tier: the Spark Connect calls one short statement makes, counted on the client's gRPC stub.

Every call is a round trip to the Spark server (about 40-50 ms each on this machine's local server), and
a notebook user waits for them on every cell. The queries inside UPDATE, DELETE, INSERT and MERGE are
sent unanalysed and analysed by the action that runs them (:meth:`lv_core.engine.sql_run.RunScope.query`),
so each costs one ExecutePlan; before, each also cost the round trip of ``spark.sql()``
(UPDATE 5 ExecutePlan, MERGE 8; ``benchmarks/statement_latency.py`` measures both trees side by side).
A SELECT's DataFrame, handed to the user, is still analysed at the statement.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Iterator

import pytest

import lv_core

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lh(spark: Any, tmp_path_factory: Any) -> Iterator[lv_core.Lakehouse]:
    lh = lv_core.connect(str(tmp_path_factory.mktemp("spark_calls") / "wh"))
    lh.sql("CREATE TABLE acct (id BIGINT, v DOUBLE)")
    for f in range(4):  # four files: data skipping leaves one candidate per one-row statement
        lh.sql(f"INSERT INTO acct SELECT id, CAST(id AS DOUBLE) FROM range({f * 10}, {f * 10 + 10})")
    yield lh
    lh.close()


@pytest.fixture
def calls(lh: lv_core.Lakehouse) -> Iterator[Counter[str]]:
    """gRPC calls of the lakehouse's Spark session by method, made by the test's thread while it runs (the
    product's background warm-up of a fresh server shares the session)."""
    stub = lh.spark.client._stub
    me = threading.get_ident()
    counted: Counter[str] = Counter()
    methods = {name: getattr(stub, name) for name in ("ExecutePlan", "AnalyzePlan")}
    for name, method in methods.items():
        def count(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
            if threading.get_ident() == me:
                counted[_n] += 1
            return _m(*a, **k)
        setattr(stub, name, count)
    try:
        yield counted
    finally:
        for name, method in methods.items():
            setattr(stub, name, method)


def _table(lh: lv_core.Lakehouse) -> dict[int, float]:
    return {r["id"]: r["v"] for r in lh.sql("SELECT id, v FROM acct").collect()}


@pytest.mark.parametrize("sql, executions, change", [
    ("UPDATE acct SET v = v + 1 WHERE id = 3", 2, {3: 4.0}),  # which rows match (count), the rewrite
    ("DELETE FROM acct WHERE id = 13", 2, {13: None}),
    ("INSERT INTO acct VALUES (100, 1.5)", 1, {100: 1.5}),  # the write
    ("MERGE INTO acct USING (SELECT 23 AS id, 5.0 AS v) s ON acct.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
     "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)", 3, {23: 5.0}),  # matches, rewrite, inserts
], ids=["update", "delete", "insert", "merge"])
def test_a_one_row_statement_runs_each_query_once(lh: lv_core.Lakehouse, calls: Counter[str], sql: str,
                                                  executions: int, change: dict[int, Any]) -> None:
    before = _table(lh)
    calls.clear()
    with lh.transaction("serializable") as txn:
        txn.sql(sql)
    assert calls["ExecutePlan"] == executions, dict(calls)
    expected = {**before, **change}
    assert _table(lh) == {k: v for k, v in expected.items() if v is not None}
