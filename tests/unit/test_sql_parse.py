"""The SQL front end without Spark: splitting, parsing, classification, table references, the
placeholder rewrite, data-skipping texts and the error messages."""

from __future__ import annotations

import string

import pytest

from lv_core.delta.schema import parse_ddl
from lv_core.engine.sql_ast import (
    CreateSpec,
    DeleteSpec,
    DescribeSpec,
    InsertSpec,
    MergeSpec,
    ShowSpec,
    SqlError,
    UnsupportedStatement,
    UpdateSpec,
)
from lv_core.engine.sql_bind import Renderer, has_subquery, q, skip_text, target_conjuncts
from lv_core.engine.sql_parse import parse_script, parse_statement, show_matches
from lv_core.engine.sql_run import SqlRead
from lv_core.errors import ConfigError


def one(text: str):
    [st] = parse_script(text)
    return st


def bound(text: str, r: Renderer) -> str:
    """What pyspark's formatter makes of rendered text: placeholders -> view names, {{ -> {."""
    return string.Formatter().vformat(text, (), {k: f"VIEW_{t}" for k, t in r.refs.items()})


# ---------------------------------------------------------------------------------------- splitting


def test_script_splits_on_semicolons_outside_quotes_and_comments_and_keeps_lines():
    script = ("UPDATE bank_x SET note = 'a;b' WHERE id = 1;  -- a comment; still a comment\n"
              "/* block; comment */ DELETE FROM bank_y WHERE id = 2;\n\n"
              "SELECT `odd;name` FROM bank_x;")
    sts = parse_script(script)
    assert [s.kind for s in sts] == ["update", "delete", "select"]
    assert [s.line for s in sts] == [1, 2, 4]
    assert "'a;b'" in sts[0].text


def test_splitting_and_classifying_agree_on_comments():
    """One lexer: ``/*/`` opens a block comment for the splitter and for the first-word check alike."""
    sts = parse_script("/*/ DROP TABLE x; */ SELECT 1;\n-- UPDATE t SET a = 1;\n/* ; */ (SELECT 2)")
    assert [(s.kind, s.line) for s in sts] == [("select", 1), ("select", 3)]


def test_empty_script_is_an_error():
    for text in ("", "   ;  ; ", "-- only a comment\n", "/* nothing */"):
        with pytest.raises(SqlError, match="no SQL statement"):
            parse_script(text)
    with pytest.raises(SqlError, match="SQL text"):
        parse_script(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- classification


def test_select_kinds_and_sources():
    st = one("SELECT a.id, sum(b.v) FROM bank_x a JOIN bank_y AS b ON a.id = b.id "
             "WHERE a.id IN (SELECT id FROM z) GROUP BY a.id")
    assert st.kind == "select" and st.sources == ("bank_x", "bank_y", "z") and st.tables == ("bank_x", "bank_y", "z")
    assert one("(SELECT id FROM a) UNION ALL (SELECT id FROM b)").sources == ("a", "b")
    assert one("VALUES (1, 2)").kind == "select" and one("VALUES (1, 2)").sources == ()
    assert one("SELECT 1 + 1").sources == ()


def test_cte_names_and_table_functions_are_not_lakehouse_tables():
    st = one("WITH c AS (SELECT * FROM t), d AS (SELECT * FROM c) SELECT * FROM d JOIN range(10) r ON true")
    assert st.sources == ("t",)
    # a CTE shadows a table of the same name only inside its scope
    st = one("SELECT * FROM (WITH t AS (SELECT 1 AS x) SELECT * FROM t) s JOIN t ON true")
    assert st.sources == ("t",)


def test_dml_specs():
    st = one("UPDATE t AS x SET x.a = a + 1, b = (SELECT max(v) FROM u WHERE u.id = x.id) WHERE x.id = 3")
    assert st.kind == "update" and isinstance(st.spec, UpdateSpec)
    assert (st.target, st.spec.alias, [n for n, _ in st.spec.sets]) == ("t", "x", ["a", "b"])
    assert st.sources == ("u",) and st.tables == ("t", "u")
    st = one("DELETE FROM t WHERE v < (SELECT avg(v) FROM t)")
    assert isinstance(st.spec, DeleteSpec) and st.spec.alias == "t"
    assert st.sources == ("t",) and st.tables == ("t",)  # the subquery reads the target itself
    st = one("DELETE FROM t")
    assert st.spec.where is None and st.sources == ()


def test_insert_specs():
    st = one("INSERT INTO t (a, b) VALUES (1, 'x'), (2, NULL)")
    assert isinstance(st.spec, InsertSpec) and st.spec.columns == ["a", "b"] and len(st.spec.rows) == 2
    assert st.sources == () and st.tables == ("t",)
    st = one("INSERT INTO TABLE t SELECT id, v FROM u WHERE v > 0")
    assert st.spec.columns is None and st.spec.query is not None and st.sources == ("u",)
    st = one("INSERT INTO t VALUES (1, (SELECT max(id) FROM u))")
    assert st.sources == ("u",) and has_subquery(st.spec.rows[0][1])
    st = one("WITH c AS (SELECT id FROM u) INSERT INTO t SELECT * FROM c")  # the CTE moves into the query
    r = Renderer()
    assert st.sources == ("u",) and bound(r.expr(st.spec.query), r) == \
        "WITH c AS (SELECT id FROM VIEW_u AS `u`) SELECT * FROM c"


def test_merge_spec():
    st = one("MERGE INTO t USING (SELECT * FROM u) s ON t.id = s.id AND t.p = 'a' "
             "WHEN MATCHED AND s.x > 1 THEN UPDATE SET t.v = s.v WHEN MATCHED THEN DELETE "
             "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)")
    spec = st.spec
    assert isinstance(spec, MergeSpec) and (spec.target, spec.alias, spec.source_alias) == ("t", "t", "s")
    assert [(c.matched, c.action) for c in spec.clauses] == [(True, "update"), (True, "delete"), (False, "insert")]
    assert spec.clauses[0].condition is not None and spec.clauses[2].columns == ["id", "v"]
    assert st.sources == ("u",) and st.tables == ("t", "u")
    st = one("MERGE INTO t USING u ON t.id = u.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert st.spec.source_table == "u" and st.spec.clauses[0].sets is None and st.spec.clauses[1].values is None


def test_ddl_show_describe_specs():
    st = one("CREATE TABLE IF NOT EXISTS t (`my id` BIGINT NOT NULL, v DECIMAL(10,2) COMMENT 'money', "
             "s STRUCT<a: INT NOT NULL, b: STRING>, p STRING) USING DELTA PARTITIONED BY (p) COMMENT 'hello'")
    spec = st.spec
    assert isinstance(spec, CreateSpec) and spec.if_not_exists and spec.partition_by == ["p"]
    assert spec.description == "hello" and spec.properties == {}
    props = one("CREATE TABLE t (a INT) TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true', 'x.n' = 3)").spec
    assert props.properties == {"delta.enableInCommitTimestamps": "true", "x.n": "3"}
    schema = parse_ddl(spec.ddl)
    assert schema.names == ["my id", "v", "s", "p"] and not schema.fields[0].nullable
    assert schema.fields[1].metadata.get("comment") == "money"
    assert isinstance(one("SHOW TABLES").spec, ShowSpec) and one("show tables like 'bank*'").spec.pattern == "bank*"
    assert isinstance(one("DESCRIBE TABLE t").spec, DescribeSpec) and one("DESC t").target == "t"
    assert one("DESCRIBE EXTENDED t").kind == "describe"


def test_show_pattern_is_spark_like():
    assert show_matches(None, "x")
    assert show_matches("bank*", "bank_x") and show_matches("BANK*", "bank_x")
    assert show_matches("a|bank_y", "bank_y") and not show_matches("bank", "bank_x")
    assert show_matches("b.nk*", "b.nk_1") and not show_matches("b.nk*", "bank_1")  # '.' is literal


# ---------------------------------------------------------------------------------------- rewrite


def test_renderer_binds_each_reference_with_its_alias_and_escapes_braces():
    st = one("SELECT bank_x.id, b.v, '{not a placeholder}' AS s FROM bank_x JOIN bank_y b ON bank_x.id = b.id "
             "WHERE bank_x.id IN (SELECT id FROM bank_y)")
    r = Renderer()
    text = r.expr(st.tree)
    assert sorted(r.refs.values()) == ["bank_x", "bank_y", "bank_y"]
    sql = bound(text, r)
    assert "FROM VIEW_bank_x AS `bank_x` JOIN VIEW_bank_y AS b" in sql
    assert "(SELECT id FROM VIEW_bank_y AS `bank_y`)" in sql
    assert "'{not a placeholder}'" in sql and "bank_x.id" in sql


def test_renderer_leaves_ctes_and_table_functions_alone():
    st = one("WITH c AS (SELECT * FROM t) SELECT * FROM c JOIN range(3) AS r ON true")
    r = Renderer()
    sql = bound(r.expr(st.tree), r)
    assert list(r.refs.values()) == ["t"]
    assert "FROM c JOIN RANGE(3)" in sql and "SELECT * FROM VIEW_t AS `t`" in sql


def test_renderer_frames_and_distinct_keys_per_renderer():
    r1, r2 = Renderer(), Renderer()
    k1, k2 = r1.frame("target"), r2.frame("target")
    assert k1 != k2 and k1.startswith("{") and r1.frames[k1.strip("{}")] == "target"
    assert r1.bind(lambda t: t, {"target": "DF"}) == {k1.strip("{}"): "DF"}


def test_quoting_identifiers():
    assert q("a") == "`a`" and q("we`ird") == "`we``ird`" and q("{x}") == "`{{x}}`"


def test_skip_texts():
    st = one("UPDATE t AS x SET v = 1 WHERE x.id = 3 AND x.b IN (SELECT b FROM t WHERE t.id = x.id)")
    assert skip_text(st.spec.where, "x", "t") == "id = 3 AND b IN (SELECT b FROM t WHERE t.id = x.id)"
    assert skip_text(None, "x", "t") is None
    st = one("MERGE INTO t USING u s ON t.id = s.id AND t.p = 'a' AND s.q = 1 AND t.d > 2 "
             "WHEN MATCHED THEN DELETE")
    assert target_conjuncts(st.spec.on, "t") == "(p = 'a') AND (d > 2)"
    st = one("MERGE INTO t USING u s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert target_conjuncts(st.spec.on, "t") is None


def test_select_values_compare_by_files_read():
    a = SqlRead({"t": frozenset({("f1", 10)})}, df=object())
    b = SqlRead({"t": frozenset({("f1", 10)})}, df=object())
    c = SqlRead({"t": frozenset({("f2", 10)})}, df=object())
    assert a == b and a != c and a != "x"


# ---------------------------------------------------------------------------------------- errors


def test_syntax_error_names_line_column_and_text_in_the_script():
    with pytest.raises(SqlError) as e:
        parse_script("UPDATE t SET v = 1 WHERE id = 1;\nSELECT *\n  FROM t WHERE a = = 1")
    err = e.value
    assert (err.line, err.column, err.text) == (3, 20, "=")
    assert "line 3, column 20 near '='" in str(err) and "FROM t WHERE a = = 1" in str(err)
    assert isinstance(err, ConfigError)


def test_unterminated_quote_and_comment():
    with pytest.raises(SqlError, match=r"line 1, column 8: unterminated quoted text starting with '") as e:
        parse_script("SELECT 'abc FROM t")
    assert e.value.column == 8
    with pytest.raises(SqlError, match="unterminated block comment"):
        parse_statement("SELECT 1 /* open")


@pytest.mark.parametrize("text, pattern", [
    ("DROP TABLE t", r"'DROP' statements are not supported .*supported: SELECT"),
    ("ALTER TABLE t ADD COLUMN x INT", "'ALTER' statements are not supported"),
    ("SAVEPOINT a", r"Transaction control: BEGIN"),
    ("SHOW COLUMNS IN t", "only SHOW TABLES"),
    ("SHOW TABLES IN db", "one namespace"),
    ("CREATE VIEW v AS SELECT 1", "CREATE VIEW is not supported"),
    ("CREATE TABLE t AS SELECT 1 AS a", r"AS SELECT is not supported.*INSERT INTO t SELECT"),
    ("CREATE OR REPLACE TABLE t (a INT)", "CREATE OR REPLACE TABLE is not supported"),
    ("CREATE TABLE t (a INT) USING parquet", "USING parquet is not supported.*Delta"),
    ("CREATE TABLE t (a INT) LOCATION '/x'", "table property .*LOCATION"),
    ("INSERT OVERWRITE t SELECT * FROM u", "INSERT OVERWRITE is not supported"),
    ("INSERT INTO t PARTITION (p = 'x') VALUES (1)", "PARTITION clause"),
    ("MERGE INTO t USING u ON t.id = u.id WHEN NOT MATCHED BY SOURCE THEN DELETE", "NOT MATCHED BY SOURCE"),
    ("SELECT * FROM t VERSION AS OF 3", r"time travel .*lh.read\(name, version=N\)"),
    ("DESCRIBE HISTORY t", "DESCRIBE HISTORY is not supported"),
    ("WITH c AS (SELECT 1 AS id) UPDATE t SET v = 1 WHERE id IN (SELECT id FROM c)", r"WITH \.\.\. UPDATE"),
    ("WITH c AS (SELECT 1 AS id) DELETE FROM t WHERE id IN (SELECT id FROM c)", r"WITH \.\.\. DELETE"),
])
def test_unsupported_statements_say_what_is_supported(text, pattern):
    with pytest.raises(UnsupportedStatement, match=pattern):
        parse_script(text)


@pytest.mark.parametrize("text, pattern", [
    ("SELECT * FROM db.t", r"'db.t': lakehouse tables have no database"),
    ("UPDATE t SET u.v = 1", "'u' is not the target table"),
    ("INSERT INTO t (a, a) VALUES (1, 2)", "column 'a' appears twice"),
    ("INSERT INTO t VALUES (1, 2), (3)", "different numbers of values"),
    ("INSERT INTO t (a, b) VALUES (1)", r"1 value\(s\) per row for 2 column\(s\)"),
    ("MERGE INTO t USING (SELECT 1 AS id) ON t.id = 1 WHEN MATCHED THEN DELETE", "alias"),
    ("MERGE INTO t USING t ON t.id = t.id WHEN MATCHED THEN DELETE", "both go by 't'"),
    ("MERGE INTO t USING u ON t.id = u.id WHEN NOT MATCHED THEN INSERT (a, b) VALUES (1)", r"2 column\(s\) and 1"),
])
def test_invalid_statements(text, pattern):
    with pytest.raises(SqlError, match=pattern):
        parse_script(text)
