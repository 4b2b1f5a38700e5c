"""The pure steps that prepare a SQL cell before anything runs: variables as literals, transaction
control statements, binding tables/columns/literal types, and the suggestions in errors."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from lv_core.engine.sql_ast import SqlError, UnsupportedStatement
from lv_core.engine.sql_bind import Renderer
from lv_core.engine.sql_check import check_script
from lv_core.engine.sql_params import bind_params, literal
from lv_core.engine.sql_parse import parse_script
from lv_core.errors import SchemaError, TableNotFound

TABLES = {"acct": {"id": "long", "balance": "double", "owner": "string"}, "acct_b": {"id": "long", "bonus": "double"}}


def check(sql: str) -> None:
    check_script(parse_script(sql), list(TABLES), lambda t: TABLES[t])


@pytest.mark.parametrize("value, text", [
    (None, "NULL"), (True, "TRUE"), (False, "FALSE"), (42, "42"), (-7, "-7"), (1.5, "CAST('1.5' AS DOUBLE)"),
    (float("nan"), "CAST('nan' AS DOUBLE)"), (decimal.Decimal("123.45"), "CAST('123.45' AS DECIMAL(5, 2))"),
    (decimal.Decimal("1E+3"), "CAST('1000' AS DECIMAL(4, 0))"), ("it's", "'it\\'s'"), ("a\\b", "'a\\\\b'"),
    (b"\x01\xff", "X'01ff'"), (dt.date(2024, 2, 29), "DATE '2024-02-29'"),
    (dt.datetime(2024, 1, 2, 3, 4, 5), "TIMESTAMP '2024-01-02 03:04:05'"),
])
def test_literals(value: object, text: str) -> None:
    assert literal(value) == text


def test_variables_in_code_only_and_parsed_back_as_the_same_values() -> None:
    ns = {"n": 5, "who": "O'Brien -- not a comment; DROP TABLE x", "when": dt.date(2024, 1, 2)}
    text = bind_params("SELECT {n}, :who, :when, '{n} :who', x::int, {{n}} -- {n} :who\nFROM acct", ns)
    assert text.startswith("SELECT 5, 'O\\'Brien -- not a comment; DROP TABLE x', DATE '2024-01-02', '{n} :who', "
                           "x::int, {n} -- {n} :who\n")
    (st,) = parse_script(text)  # one statement: the string stayed one literal
    rendered = Renderer().expr(st.tree)
    assert "'O\\'Brien -- not a comment; DROP TABLE x'" in rendered


def test_undefined_and_unbindable_variables() -> None:
    with pytest.raises(SqlError, match=r"line 2: variable 'amout' is not defined; did you mean 'amount'\?"):
        bind_params("SELECT 1;\nSELECT :amout", {"amount": 1, "print": print})
    with pytest.raises(SqlError, match="variable 'xs' is a list: it has no SQL literal"):
        bind_params("SELECT {xs}", {"xs": [1, 2]})


def test_transaction_control_statements() -> None:
    sts = parse_script("BEGIN ATOMIC\n  UPDATE acct SET balance = 1;\n  DELETE FROM acct_b;\nEND;\n"
                       "START TRANSACTION ISOLATION LEVEL REPEATABLE READ; ROLLBACK WORK; BEGIN; COMMIT")
    assert [(s.kind, s.line) for s in sts][:4] == [("txn", 1), ("update", 2), ("delete", 3), ("txn", 4)]
    assert [(s.spec.action, s.spec.preset, s.spec.atomic) for s in sts if s.kind == "txn"] == [
        ("begin", None, True), ("commit", None, True), ("begin", "repeatable_read", False),
        ("rollback", None, False), ("begin", None, False), ("commit", None, False)]
    with pytest.raises(SqlError, match="unknown isolation level 'chaos'"):
        parse_script("BEGIN ISOLATION LEVEL chaos")


@pytest.mark.parametrize("sql, error, pattern", [
    ("UPDATE acct SET balance = 0;\nUPDATE acct_bb SET bonus = 1", TableNotFound,
     r"line 2: table 'acct_bb' does not exist; did you mean 'acct_b'"),
    ("SELECT * FROM nothing_like_it", TableNotFound, r"does not exist \(tables: acct, acct_b\)"),
    ("SELECT id, balnce FROM acct", SchemaError, r"table 'acct' has no column 'balnce'; did you mean 'balance'\?"),
    ("SELECT a.id FROM acct a JOIN acct_b b ON a.id = b.id WHERE b.balance > 0", SchemaError,
     r"table 'acct_b' has no column 'balance' \(its columns: id, bonus\)"),
    ("DELETE FROM acct WHERE id IN (SELECT id FROM acct_b WHERE bonsu > 0)", SchemaError,
     r"no table of the statement \(acct, acct_b\) has a column 'bonsu'; did you mean 'bonus'\?"),
    ("INSERT INTO acct (id, bal) VALUES (1, 2)", SchemaError, "has no column 'bal'; did you mean 'balance'"),
    ("UPDATE acct SET balance = 'lots'", SchemaError, "column 'balance' is double; the value 'lots' is a string"),
    ("MERGE INTO acct t USING acct_b s ON t.id = s.id WHEN MATCHED THEN UPDATE SET balnce = s.bonus", SchemaError,
     "has no column 'balnce'"),
    ("UPDTE acct SET balance = 0", UnsupportedStatement,
     r"'UPDTE' statements are not supported \(line 1\); did you mean UPDATE\?"),
    ("SELECT * FORM acct", SqlError, r"did you mean FROM\?"),
    ("UPDATE acct SET balance = 0 WHRE id = 1", SqlError, r"near 'WHRE'.*did you mean WHERE\?"),
])
def test_binding_errors(sql: str, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        check(sql)


@pytest.mark.parametrize("sql", [
    "SELECT transform(array(1), x -> x + 1) AS k FROM acct ORDER BY k",
    "WITH c AS (SELECT id AS k FROM acct) SELECT k FROM c",
    "SELECT id FROM range(10)",
    "SELECT owner, sum(balance) AS s FROM acct GROUP BY owner HAVING s > 1",
    "MERGE INTO acct t USING (SELECT id, bonus AS b FROM acct_b) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET balance = s.b WHEN NOT MATCHED THEN INSERT (id, balance) VALUES (s.id, s.b)",
    "SELECT * FROM acct WHERE EXISTS (SELECT 1 FROM acct_b b WHERE b.id = acct.id)",
    "CREATE TABLE fresh (x INT); INSERT INTO fresh VALUES (1); SELECT x FROM fresh",
    "SELECT struct(id AS a).a, c.k FROM acct, (SELECT 1 AS k) c",
    "SELECT ID, Balance FROM ACCT",
])
def test_valid_statements_pass(sql: str) -> None:
    check(sql)


def test_lh_sql_transaction_control_without_spark(tmp_path: object) -> None:
    import lv_core

    lh = lv_core.connect(str(tmp_path))
    with pytest.raises(SqlError, match="line 1: COMMIT without a transaction"):
        lh.sql("COMMIT")
    with pytest.raises(SqlError, match="BEGIN ATOMIC without END"):
        lh.sql("BEGIN ATOMIC CREATE TABLE t (id INT)")
    with pytest.raises(SqlError, match="line 2: END without BEGIN ATOMIC"):
        lh.sql("CREATE TABLE t (id INT);\nEND")
    lh.sql("BEGIN ISOLATION LEVEL SNAPSHOT")  # opens the lakehouse's SQL transaction (across calls)
    with pytest.raises(SqlError, match="BEGIN while a transaction is open"):
        lh.sql("BEGIN")
    lh.sql("ROLLBACK")
    assert lh.list_tables() == []


def test_binding_names_every_table_as_the_lakehouse_spells_it() -> None:
    tables = {**TABLES, "Ledger": {"id": "long"}, "kv": {"id": "long"}, "KV": {"id": "long"}}
    sts = check_script(parse_script("SELECT a.id FROM ACCT a JOIN acct_b USING (id);\nDESCRIBE ledger;\n"
                                    "UPDATE kv SET id = 1;\nCREATE TABLE Fresh (x INT);\nINSERT INTO fresh VALUES (1)"),
                       list(tables), lambda t: tables[t])
    assert [st.names for st in sts] == [{"ACCT": "acct", "acct_b": "acct_b"}, {"ledger": "Ledger"}, {"kv": "kv"}, {},
                                        {"fresh": "Fresh"}]
    assert [st.kind for st in sts] == ["select", "describe", "update", "create", "insert"]  # still the statements
    with pytest.raises(TableNotFound, match=r"line 1: table 'Kv' does not exist; tables KV, kv differ from it only "
                                            "in case"):
        check_script(parse_script("SELECT * FROM Kv"), list(tables), lambda t: tables[t])
