"""Spark tier: SQL errors. Each case raises its clear message (type and text), writes nothing (the
tables read by delta-rs are unchanged and no data file of the transaction is left), and the
transaction stays usable afterwards."""

from __future__ import annotations

from typing import Any

import pytest

import lv_core
from lv_core.engine.sql import SqlError, UnsupportedStatement
from lv_core.errors import ConfigError, LvError, SchemaError, TableExists, TableNotFound
from lv_core.txn.cleaner import drain

pytestmark = pytest.mark.spark

TABLES = ("bank_x", "bank_y", "small")


@pytest.fixture(scope="module")
def lh(spark: Any, tmp_path_factory: Any) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path_factory.mktemp("sql_errors") / "wh"), lease_s=10.0)
    lh.create_table("bank_x", "id BIGINT NOT NULL, balance DOUBLE")
    lh.create_table("bank_y", "id BIGINT NOT NULL, balance DOUBLE")
    lh.create_table("small", "id BIGINT, n TINYINT, note STRING")
    with lh.transaction() as txn:
        for i in (1, 2):
            txn.insert("bank_x", [{"id": i, "balance": 100.0 * i}])
            txn.insert("bank_y", [{"id": i, "balance": 10.0 * i}])
        txn.insert("small", [{"id": 1, "n": 1, "note": "a"}])
    return lh


def state(lh: lv_core.Lakehouse) -> dict[str, list[dict[str, Any]]]:
    import deltalake

    return {t: sorted(deltalake.DeltaTable(lh.store.url(t)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
            for t in TABLES}


def staged(lh: lv_core.Lakehouse, txn: lv_core.Transaction) -> list[str]:
    drain(60.0)  # staged files of finished transactions are deleted in the background
    return [m.key for t in TABLES for m in lh.store.list(f"{t}/") if txn.id in m.key]


CASES = [
    # (id, statement, error type, message pattern)
    ("syntax-second-statement", "UPDATE bank_x SET balance = 0 WHERE id = 1;\nSELECT * FROM bank_x WHERE id = = 1",
     SqlError, r"SQL syntax error at line 2, column 33 near '='.*\n.*WHERE id = = 1\n +\^"),
    ("unterminated-string", "SELECT * FROM bank_x WHERE note = 'open", SqlError,
     r"line 1, column 35: unterminated quoted text"),
    ("unsupported-drop", "DROP TABLE bank_x", UnsupportedStatement,
     r"'DROP' statements are not supported .*supported: SELECT .*INSERT INTO .*MERGE INTO"),
    ("unsupported-commit", "UPDATE bank_x SET balance = 0; COMMIT", UnsupportedStatement, r"%%lvtxn or txn.commit"),
    ("unknown-table", "SELECT * FROM bank_z", TableNotFound,
     r"table 'bank_z' does not exist; the lakehouse has: bank_x, bank_y, small"),
    ("unknown-table-in-subquery", "DELETE FROM bank_x WHERE id IN (SELECT id FROM nope)", TableNotFound, "'nope'"),
    ("qualified-name", "SELECT * FROM spark_catalog.default.bank_x", SqlError, "no database or catalog"),
    ("unknown-column-select", "SELECT nope FROM bank_x", SchemaError, r"SELECT: .*`nope` cannot be resolved"),
    ("unknown-column-set", "UPDATE bank_x SET nope = 1", SchemaError,
     r"UPDATE bank_x: table 'bank_x' has no column 'nope'; its columns are id, balance"),
    ("unknown-column-where", "UPDATE bank_x SET balance = 0 WHERE nope = 1", SchemaError, r"`nope` cannot be resolved"),
    ("insert-type-mismatch", "INSERT INTO bank_x VALUES ('abc', 1.0)", SchemaError,
     r"INSERT INTO bank_x: column 'id' is bigint; the value is string"),
    ("insert-arity", "INSERT INTO bank_x VALUES (1, 2, 3)", SchemaError, r"3 value\(s\) per row for 2 column\(s\)"),
    ("insert-unknown-column", "INSERT INTO bank_x (id, nope) VALUES (1, 2)", SchemaError,
     "has no column 'nope'; its columns are id, balance"),
    ("insert-missing-not-null-column", "INSERT INTO bank_x (balance) VALUES (5)", SchemaError,
     r"column\(s\) 'id' are NOT NULL and get no value"),
    ("insert-select-null-not-null", "INSERT INTO bank_x SELECT NULL, 1.0 UNION ALL SELECT 9, 2.0", SchemaError,
     "NOT NULL but the data has a null; nothing was written"),
    ("insert-out-of-range", "INSERT INTO small (id, n) VALUES (5, 300)", SchemaError,
     r"INSERT INTO small: a value does not fit column 'n' \(tinyint\)"),
    ("update-type-mismatch", "UPDATE bank_x SET balance = 'lots' WHERE id = 1", SchemaError,
     "column 'balance' is double; the value is string"),
    ("update-divide-by-zero", "UPDATE bank_x SET balance = balance / (id - 1) WHERE id >= 1", SqlError,
     r"UPDATE bank_x: \[DIVIDE_BY_ZERO\]"),
    ("merge-ambiguous-match",
     "MERGE INTO bank_x t USING (SELECT 1 AS id UNION ALL SELECT 1) s ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET balance = 0", SqlError, "1 target row.* match more than one source row"),
    ("merge-insert-star-missing-column",
     "MERGE INTO bank_x t USING small s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
     SchemaError, "needs a source column 'balance'; the source has id, n, note"),
    ("insert-overwrite", "INSERT OVERWRITE bank_x SELECT * FROM bank_y", UnsupportedStatement,
     "INSERT OVERWRITE is not supported"),
    ("create-existing", "CREATE TABLE bank_x (id BIGINT)", TableExists, "already exists"),
    ("create-parquet", "CREATE TABLE t2 (id BIGINT) USING parquet", UnsupportedStatement, "Delta"),
    ("duplicate-set", "UPDATE bank_x SET balance = 1, balance = 2", ConfigError, "assigned twice"),
    # the queries inside DML are analysed at their first action (sql_run.RunScope.query): still this statement's
    ("unknown-column-delete-where", "DELETE FROM bank_x WHERE nope = 1", SchemaError, r"`nope` cannot be resolved"),
    ("unknown-column-merge-on", "MERGE INTO bank_x t USING bank_y s ON t.nope = s.id WHEN MATCHED THEN "
     "UPDATE SET balance = 0", SchemaError, r"`t`.`nope` cannot be resolved"),
    ("unknown-column-insert-select", "INSERT INTO bank_x SELECT id, nope FROM bank_y", SchemaError,
     r"`nope` cannot be resolved"),
]


@pytest.mark.parametrize("sql, error, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_is_clear_and_writes_nothing(lh: lv_core.Lakehouse, sql: str, error: type, pattern: str) -> None:
    before = state(lh)
    txn = lh.begin("repeatable_read")
    try:
        with pytest.raises(error, match=pattern):
            txn.sql(sql)
        assert txn.state == "active" and staged(lh, txn) == []
    finally:
        txn.rollback()  # frees its markers: the next case must not wait for them
    assert state(lh) == before
    assert lh.list_tables() == sorted(TABLES)


def test_autocommit_error_rolls_back_only_the_failed_statement(lh: lv_core.Lakehouse) -> None:
    before = state(lh)
    with pytest.raises(SchemaError, match="column 'n'"):
        lh.sql("UPDATE small SET note = 'x' WHERE id = 1; INSERT INTO small (id, n) VALUES (2, 1000); "
               "DELETE FROM small")
    after = state(lh)
    assert after["small"] == [{"id": 1, "n": 1, "note": "x"}]  # the first statement committed, the rest did not
    lh.sql("UPDATE small SET note = 'a' WHERE id = 1")
    assert state(lh) == before


def test_transaction_stays_usable_after_errors(lh: lv_core.Lakehouse) -> None:
    before = state(lh)
    txn = lh.begin("repeatable_read")
    txn.sql("UPDATE bank_x SET balance = balance - 1 WHERE id = 1")
    for bad in ("INSERT INTO bank_x VALUES (NULL, 1)", "UPDATE bank_x SET balance = 'x'", "SELEC 1"):
        with pytest.raises(LvError):  # SchemaError, SqlError, UnsupportedStatement
            txn.sql(bad)
    txn.sql("UPDATE bank_y SET balance = balance + 1 WHERE id = 1")
    txn.commit()
    after = state(lh)
    assert after["bank_x"][0]["balance"] == before["bank_x"][0]["balance"] - 1
    assert after["bank_y"][0]["balance"] == before["bank_y"][0]["balance"] + 1
    lh.sql("UPDATE bank_x SET balance = balance + 1 WHERE id = 1; UPDATE bank_y SET balance = balance - 1 WHERE id = 1")
    assert state(lh) == before
