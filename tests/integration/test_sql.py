"""Spark tier: SQL inside transactions (``txn.sql``) and in autocommit (``lh.sql``), checked against
expected rows (read back through delta-rs, an independent Delta reader), the bank transfer as a
concurrent SQL script, and how SQL reads take part in redo and ``exposed_read``.

Tables are seeded with one row per data file (pyarrow writes, no Spark job), so conflicts are
file-granular per row and UPDATE ... WHERE id = k rewrites one file.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import lv_core
from lv_core.errors import TransactionAborted

pytestmark = pytest.mark.spark

BANK = "id BIGINT NOT NULL, balance DOUBLE"


@pytest.fixture
def lh(spark: Any, tmp_path: Any) -> lv_core.Lakehouse:
    return lv_core.connect(str(tmp_path / "wh"), lease_s=10.0)


def seed(lh: lv_core.Lakehouse, table: str, ddl: str, rows: list[dict[str, Any]], partition_by: Any = None) -> None:
    lh.create_table(table, ddl, partition_by=partition_by)
    with lh.transaction() as txn:
        for r in rows:
            txn.insert(table, [r])


def bank(lh: lv_core.Lakehouse, x: dict[int, float], y: dict[int, float]) -> None:
    seed(lh, "bank_x", BANK, [{"id": k, "balance": v} for k, v in x.items()])
    seed(lh, "bank_y", BANK, [{"id": k, "balance": v} for k, v in y.items()])


def delta(lh: lv_core.Lakehouse, table: str, key: str = "id") -> list[tuple]:
    """The committed table as delta-rs reads it, rows as tuples sorted by ``key``."""
    import deltalake

    t = deltalake.DeltaTable(lh.store.url(table)).to_pyarrow_table()
    return [tuple(r.values()) for r in sorted(t.to_pylist(), key=lambda r: (r[key] is None, r[key]))]


def got(df: Any) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


# ---------------------------------------------------------------------------------------- statement kinds


def test_select_joins_subqueries_ctes_aggregates(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0, 3: 300.0}, {1: 10.0, 3: 30.0, 4: 40.0})
    queries = {
        "SELECT x.id, x.balance + y.balance AS total FROM bank_x x JOIN bank_y AS y ON x.id = y.id ORDER BY x.id":
            [(1, 110.0), (3, 330.0)],
        "SELECT id FROM bank_x WHERE id NOT IN (SELECT id FROM bank_y) ORDER BY id": [(2,)],
        "WITH rich AS (SELECT id FROM bank_x WHERE balance >= 200) "
        "SELECT count(*) AS n, (SELECT sum(balance) FROM bank_y) AS y FROM rich": [(2, 80.0)],
        "SELECT bank_x.id, max(bank_y.balance) AS m FROM bank_x LEFT JOIN bank_y ON bank_x.id = bank_y.id "
        "GROUP BY bank_x.id HAVING count(bank_y.id) = 0": [(2, None)],
        "SELECT 1 + 1 AS two, '{braces}; and a semicolon' AS s": [(2, "{braces}; and a semicolon")],
    }
    txn = lh.begin()  # serializable
    for sql, want in queries.items():
        assert got(txn.sql(sql)) == want, sql
    txn.commit()
    for sql, want in list(queries.items())[1:3]:  # autocommit
        assert got(lh.sql(sql)) == want, sql


def test_insert_values_and_select_with_column_lists(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0}, {7: 70.0, 8: 80.0})
    seed(lh, "acct", "id BIGINT NOT NULL, owner STRING, balance DECIMAL(10,2), region STRING", [],
         partition_by=["region"])
    txn = lh.begin()
    res = txn.sql("INSERT INTO acct (region, id, owner) VALUES ('eu', 1, 'ann'), ('us', 2, NULL)")
    assert res.columns == ["num_affected_rows", "num_inserted_rows"] and got(res) == [(2, 2)]
    # INSERT ... SELECT from another table, by position into a column list; ints and doubles convert
    assert got(txn.sql("INSERT INTO acct (id, balance, region) SELECT id, balance / 2, 'eu' FROM bank_y")) == [(2, 2)]
    # read your writes inside the transaction, not visible outside before the commit
    assert got(txn.sql("SELECT count(*), sum(balance) FROM acct WHERE region = 'eu'")) == [(3, 75)]
    assert delta(lh, "acct") == []
    txn.commit()
    assert delta(lh, "acct") == [(1, "ann", None, "eu"), (2, None, None, "us"), (7, None, 35, "eu"),
                                 (8, None, 40, "eu")]
    # autocommit: INSERT ... VALUES with a scalar subquery, then INSERT ... SELECT from itself
    assert got(lh.sql("INSERT INTO bank_x VALUES ((SELECT max(id) + 1 FROM bank_y), 5)")) == [(1, 1)]
    assert got(lh.sql("INSERT INTO bank_x (balance, id) SELECT balance * 10, id + 100 FROM bank_x")) == [(2, 2)]
    assert delta(lh, "bank_x") == [(1, 100.0), (9, 5.0), (101, 1000.0), (109, 50.0)]


def test_update_and_delete_with_subqueries(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0}, {1: 5.0, 2: 7.0})
    txn = lh.begin("repeatable_read")
    res = txn.sql("UPDATE bank_x SET balance = balance - 50 WHERE id = 1")
    assert res.columns == ["num_affected_rows"] and got(res) == [(1,)]
    step = txn.book.ops[-1].result
    assert len(step.removes["bank_x"]) == 1 and step.reads["bank_x"] and len(step.reads["bank_x"]) == 1  # skipping
    # SET and WHERE with subqueries over the other table, one correlated
    assert got(txn.sql("UPDATE bank_x AS x "
                       "SET balance = x.balance + (SELECT y.balance FROM bank_y y WHERE y.id = x.id) "
                       "WHERE x.id IN (SELECT id FROM bank_y)")) == [(2,)]
    assert set(txn.book.ops[-1].result.reads) == {"bank_x", "bank_y"}
    # a subquery over the target itself sees the transaction's own writes
    assert got(txn.sql("DELETE FROM bank_x WHERE balance > (SELECT avg(balance) FROM bank_x)")) == [(2,)]
    assert got(txn.sql("SELECT * FROM bank_x ORDER BY id")) == [(1, 55.0), (2, 207.0)]
    txn.commit()
    assert delta(lh, "bank_x") == [(1, 55.0), (2, 207.0)]
    # autocommit, and an UPDATE matching nothing
    assert got(lh.sql("UPDATE bank_y SET balance = balance * 2 WHERE id = 2")) == [(1,)]
    assert got(lh.sql("UPDATE bank_y SET balance = 0 WHERE id = 99")) == [(0,)]
    assert got(lh.sql("DELETE FROM bank_y WHERE id = 1")) == [(1,)]
    assert delta(lh, "bank_y") == [(2, 14.0)]
    assert got(lh.sql("DELETE FROM bank_y")) == [(1,)] and delta(lh, "bank_y") == []


def test_merge_matched_update_delete_and_not_matched_insert(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0, 3: 300.0}, {1: 1.0, 2: -1.0, 5: 50.0, 6: 60.0})
    txn = lh.begin()
    res = txn.sql("""
        MERGE INTO bank_x AS t USING (SELECT id, balance AS delta FROM bank_y) AS s ON t.id = s.id
        WHEN MATCHED AND s.delta < 0 THEN DELETE
        WHEN MATCHED THEN UPDATE SET t.balance = t.balance + s.delta
        WHEN NOT MATCHED AND s.delta > 55 THEN INSERT (id, balance) VALUES (s.id, s.delta * 10)
        WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)""")
    assert res.columns == ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    assert got(res) == [(4, 1, 1, 2)]
    txn.commit()
    assert delta(lh, "bank_x") == [(1, 101.0), (3, 300.0), (5, None), (6, 600.0)]
    # autocommit, by name: UPDATE SET * and INSERT *
    assert got(lh.sql("MERGE INTO bank_y USING bank_x AS src ON bank_y.id = src.id "
                      "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")) == [(4, 3, 0, 1)]
    assert delta(lh, "bank_y") == [(1, 101.0), (2, -1.0), (3, 300.0), (5, None), (6, 600.0)]


def test_create_show_describe_in_autocommit_and_in_a_transaction(lh: lv_core.Lakehouse) -> None:
    assert lh.sql("CREATE TABLE IF NOT EXISTS sales (id BIGINT NOT NULL COMMENT 'key', amount DECIMAL(12,2), "
                  "day DATE, region STRING) USING DELTA PARTITIONED BY (region) COMMENT 'sales'") is None
    assert lh.sql("CREATE TABLE IF NOT EXISTS sales (x INT)") is None  # exists: nothing happens
    snap = lh.snapshot("sales")
    assert list(snap.partition_columns) == ["region"] and snap.schema.names == ["id", "amount", "day", "region"]
    assert not snap.schema.fields[0].nullable and snap.metadata.description == "sales"
    txn = lh.begin()
    txn.sql("CREATE TABLE notes (id BIGINT, text STRING); INSERT INTO notes VALUES (1, 'a;b')")
    assert got(txn.sql("SHOW TABLES")) == [("notes",), ("sales",)]
    assert got(txn.sql("SHOW TABLES LIKE 'sa*|x'")) == [("sales",)]
    txn.rollback()  # CREATE TABLE is not transactional; the INSERT is rolled back
    assert lh.list_tables() == ["notes", "sales"] and delta(lh, "notes") == []
    desc = lh.sql("DESCRIBE TABLE sales")
    assert desc.columns == ["col_name", "data_type", "comment"]
    assert got(desc) == [("id", "bigint", "key"), ("amount", "decimal(12,2)", None), ("day", "date", None),
                         ("region", "string", None), ("# Partition Information", "", None),
                         ("# col_name", "data_type", "comment"), ("region", "string", None)]
    assert got(lh.sql("DESC notes")) == [("id", "bigint", None), ("text", "string", None)]


def test_select_result_is_bound_to_its_statement_and_private_to_its_transaction(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0}, {1: 0.0})
    t1, t2 = lh.begin("repeatable_read"), lh.begin("repeatable_read")
    before = t1.sql("SELECT sum(balance) AS s FROM bank_x")
    t1.sql("UPDATE bank_x SET balance = balance + 1 WHERE id = 1")
    after = t1.sql("SELECT sum(balance) AS s FROM bank_x")
    other = t2.sql("SELECT sum(balance) AS s FROM bank_x")  # same Spark session, other transaction
    assert got(before) == [(300.0,)] and got(after) == [(301.0,)] and got(other) == [(300.0,)]
    t1.commit()
    with pytest.raises(TransactionAborted, match="select on bank_x"):  # t2 showed the state before t1
        t2.commit()
    assert got(before) == [(300.0,)] and got(after) == [(301.0,)]  # still valid after the commit


# ---------------------------------------------------------------------------------------- protocol


@pytest.mark.parametrize("preset", ["serializable", "repeatable_read"])
def test_bank_transfer_script_from_threads_conserves_the_total(lh: lv_core.Lakehouse, preset: str) -> None:
    accounts = 3
    bank(lh, {i: 100.0 for i in range(accounts)}, {i: 100.0 for i in range(accounts)})
    rng = random.Random(7)
    plans = [[(rng.randrange(accounts), rng.randrange(accounts), rng.randint(1, 20)) for _ in range(2)]
             for _ in range(3)]
    contention = {"waits": 0, "redos": 0, "aborts": 0}
    lock = threading.Lock()

    def worker(plan: list[tuple[int, int, int]]) -> int:
        moved = 0
        for src, dst, amount in plan:
            for _ in range(10):
                txn = lh.begin(preset, timeout_s=60)
                try:
                    txn.sql(f"UPDATE bank_x SET balance = balance - {amount} WHERE id = {src};\n"
                            f"UPDATE bank_y SET balance = balance + {amount} WHERE id = {dst}")
                    result = txn.commit()
                    moved += amount
                    with lock:
                        contention["waits"] += result.waits
                        contention["redos"] += result.redo_count
                    break
                except TransactionAborted:
                    with lock:
                        contention["aborts"] += 1
            else:
                raise AssertionError("a transfer never committed")
        return moved

    with ThreadPoolExecutor(len(plans)) as pool:
        moved = sum(pool.map(worker, plans))
    x = sum(b for _, b in delta(lh, "bank_x"))
    y = sum(b for _, b in delta(lh, "bank_y"))
    assert x + y == 2 * 100.0 * accounts  # conserved
    assert (x, y) == (100.0 * accounts - moved, 100.0 * accounts + moved)  # every transfer exactly once
    assert sum(contention.values()) > 0  # they did run into each other


def test_select_shown_then_invalidated_aborts_with_exposed_read(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0}, {1: 0.0})
    t1 = lh.begin("repeatable_read")
    t1.sql("UPDATE bank_x SET balance = balance + 1 WHERE id = 1")
    t2 = lh.begin(features={"R", "CT"})  # its markers come after t1's: t1 precedes it
    seen = got(t2.sql("SELECT sum(balance) FROM bank_x"))
    assert seen == [(300.0,)]  # the caller saw the state before t1
    t2.sql("UPDATE bank_y SET balance = 300 WHERE id = 1")  # ... and acted on it
    fut = t2.commit_async()
    t1.commit()
    with pytest.raises(TransactionAborted) as e:
        fut.result(timeout=60)
    assert e.value.rule == "exposed_read" and "select on bank_x" in e.value.reason
    assert delta(lh, "bank_y") == [(1, 0.0)]


def test_same_dependency_as_update_with_subquery_is_redone_and_commits(lh: lv_core.Lakehouse) -> None:
    bank(lh, {1: 100.0, 2: 200.0}, {1: 0.0})
    t1 = lh.begin("repeatable_read")
    t1.sql("UPDATE bank_x SET balance = balance + 1 WHERE id = 1")
    t2 = lh.begin("repeatable_read")
    assert got(t2.sql("UPDATE bank_y SET balance = (SELECT sum(balance) FROM bank_x) WHERE id = 1")) == [(1,)]
    fut = t2.commit_async()
    t1.commit()
    result = fut.result(timeout=60)
    assert result.redo_count >= 1
    assert delta(lh, "bank_y") == [(1, 301.0)]  # computed on the state after t1
