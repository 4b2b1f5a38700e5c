"""The SQL front end, pure (no Spark, no I/O): split a script, parse each statement with sqlglot
(Spark dialect), classify it and extract what each kind needs (:mod:`lv_core.engine.sql_ast`).

Supported statements (:data:`SUPPORTED`): SELECT (joins, subqueries, CTEs, set operations,
aggregates), ``INSERT INTO t [(cols)] VALUES ... | SELECT ...``, ``UPDATE t [AS a] SET ... [WHERE]``,
``DELETE FROM t [AS a] [WHERE]``, ``MERGE INTO t USING s ON ... WHEN [NOT] MATCHED ...``,
``CREATE TABLE [IF NOT EXISTS] t (cols) [USING DELTA] [PARTITIONED BY (cols)] [COMMENT '...']``,
``SHOW TABLES [LIKE 'pattern']`` and ``DESCRIBE [TABLE] t``. Anything else raises
:class:`UnsupportedStatement` naming what is supported; syntax errors raise :class:`SqlError` with
the line and column (within the whole script) and the offending text.

A *table reference* is an unqualified table name in a FROM/JOIN/USING position that is not the
name of a CTE in scope; table-valued functions (``range(10)``) are left to Spark. Qualified names
(``db.t``) and time travel (``VERSION AS OF``) are refused: every lakehouse table is read at the
transaction's snapshot.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from lv_core.engine.sql_ast import (
    SUPPORTED,
    CreateSpec,
    DeleteSpec,
    DescribeSpec,
    InsertSpec,
    MergeClause,
    MergeSpec,
    OptimizeSpec,
    ShowSpec,
    SqlError,
    Statement,
    UnsupportedStatement,
    UpdateSpec,
    VacuumSpec,
    check_plain,
    source_refs,
    unsupported,
)
from lv_core.engine.sql_hints import STATEMENT_WORDS, closest, keyword_hint
from lv_core.engine.sql_txn import control, split_atomic
from lv_core.engine.sqlsplit import first_unterminated, skip_comments, split_statements

__all__ = ["parse_script", "parse_statement", "show_matches"]

_FIRST_WORDS = {"SELECT", "WITH", "VALUES", "FROM", "INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "SHOW",
                "DESCRIBE", "DESC", "OPTIMIZE", "VACUUM"}
_TXN_WORDS = {"BEGIN", "START", "COMMIT", "ROLLBACK", "ABORT", "END", "SAVEPOINT"}


# ---------------------------------------------------------------------------------------- helpers

def _first_word(text: str) -> str:
    s = skip_comments(text)
    while s.startswith("("):
        s = skip_comments(s[1:])
    m = re.match(r"[A-Za-z_]+", s)
    return m.group(0).upper() if m else s[:20]


def _plain_table(st: Statement, node: Any, role: str) -> tuple[str, str]:
    """(name, alias-or-name) of a target table node; refuses qualified names and extras."""
    from sqlglot import expressions as exp

    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise SqlError(f"line {st.line}: the {role} must be a table name", line=st.line)
    check_plain(st, node)
    alias = node.args.get("alias")
    return node.name, (alias.name if alias is not None and alias.name else node.name)


def _names(nodes: Sequence[Any]) -> tuple[str, ...]:
    """The names of table nodes, first appearance first, without duplicates."""
    out: list[str] = []
    for n in nodes:
        if n.name not in out:
            out.append(n.name)
    return tuple(out)


def _pos(script: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``script``."""
    line = script.count("\n", 0, offset) + 1
    return line, offset - (script.rfind("\n", 0, offset) + 1) + 1


def _caret(script: str, line: int, col: int, width: int) -> str:
    lines = script.split("\n")
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"\n  {src}\n  {' ' * (col - 1)}{'^' * max(1, min(width, len(src) - col + 1))}"


_DESCRIPTIONS = [
    (re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>"), "an expression is incomplete"),
    (re.compile(r"Invalid expression / Unexpected token"), "unexpected text"),
    (re.compile(r"Expecting (.+)"), "expected {0}"),
]


def _describe(desc: str) -> str:
    for rx, text in _DESCRIPTIONS:
        m = rx.search(desc)
        if m:
            return text.format(*m.groups())
    return desc


def _syntax_error(err: Exception, stmt: str, script: str, start: int) -> SqlError:
    from sqlglot.errors import ParseError

    if isinstance(err, ParseError) and getattr(err, "errors", None):
        e = err.errors[0]
        hl = str(e.get("highlight") or "")
        ctx = str(e.get("start_context") or "")
        # sqlglot's line/col point at the end of the highlighted token; recompute from the context.
        local = len(ctx) - len(hl) if ctx.endswith(hl) and hl else len(ctx)
        off = stmt.find(ctx + hl) if ctx else -1
        if off >= 0:
            local = off + len(ctx)
        line, col = _pos(script, start + max(0, local))
        near = f" near {hl!r}" if hl else " at the end of the statement"
        before = re.findall(r"[A-Za-z_]\w*", ctx)
        hint = keyword_hint([hl, *reversed(before[-2:])])
        return SqlError(f"SQL syntax error at line {line}, column {col}{near}: {_describe(str(e.get('description')))}"
                        f"{hint or '.'}"
                        f"{_caret(script, line, col, len(hl))}", line=line, column=col, text=hl or None)
    open_at = first_unterminated(stmt)
    if open_at is not None:
        line, col = _pos(script, start + open_at)
        what = "block comment" if stmt.startswith("/*", open_at) else f"quoted text starting with {stmt[open_at]}"
        return SqlError(f"SQL syntax error at line {line}, column {col}: unterminated {what}."
                        f"{_caret(script, line, col, 1)}", line=line, column=col, text=stmt[open_at:open_at + 20])
    line, col = _pos(script, start)
    return SqlError(f"SQL syntax error in the statement starting at line {line}: {err}", line=line, column=col,
                    text=stmt[:40])


# ---------------------------------------------------------------------------------------- parsing


def parse_script(script: str) -> list[Statement]:
    """Split ``script`` on ``;`` (outside quotes and comments) and parse every statement.

    All statements are parsed before any runs, so a syntax error anywhere runs nothing.

    Raises:
        SqlError: empty script, or a syntax error (line and column within ``script``).
        UnsupportedStatement: a statement kind that is not supported.
    """
    if not isinstance(script, str):
        raise SqlError(f"sql() takes SQL text, not {type(script).__name__}")
    parts = split_statements(script)
    if not parts:
        raise SqlError("there is no SQL statement to run (the text is empty or only comments)")
    out, pos = [], 0
    for p in parts:
        start = script.find(p, pos)
        start = pos if start < 0 else start
        pos = start + len(p)
        atomic = split_atomic(p)
        if atomic is not None:  # BEGIN ATOMIC and its block's first statement share one ';'-part
            out.append(parse_statement(atomic[0], script=script, start=start))
            p, start = atomic[1], start + len(atomic[0])
        out.append(parse_statement(p, script=script, start=start))
    return out


def parse_statement(text: str, *, script: Optional[str] = None, start: int = 0) -> Statement:
    """Parse one statement (no ``;`` separators). ``script``/``start`` place error positions."""
    import sqlglot
    from sqlglot import expressions as exp
    from sqlglot.errors import ParseError, TokenError

    script = text if script is None else script
    line = _pos(script, start + len(text) - len(skip_comments(text)))[0]  # where its code starts
    word = _first_word(text)
    if word in _TXN_WORDS:
        ctl = control(skip_comments(text), line)
        if ctl is not None:
            return ctl
    if word not in _FIRST_WORDS:
        near = closest(word, STATEMENT_WORDS, n=1, cutoff=0.7) if word.isidentifier() else []
        if near and word not in _TXN_WORDS:
            raise UnsupportedStatement(f"{word!r} statements are not supported (line {line}); did you mean {near[0]}?",
                                       line=line, text=word)
        hint = (" Transaction control: BEGIN [TRANSACTION] [ISOLATION LEVEL level], COMMIT, ROLLBACK, "
                "BEGIN ATOMIC ... END (or %%lvtxn, txn.commit()/txn.rollback())."
                if word in _TXN_WORDS else "")
        raise UnsupportedStatement(f"{word or text[:20]!r} statements are not supported (line {line}); "
                                   f"supported: {SUPPORTED}.{hint}", line=line, text=word)
    if word == "SHOW":
        return Statement("show", text, None, _show(text, line), line=line)
    if word in ("OPTIMIZE", "VACUUM"):
        return _maintenance(text, word, line)
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except (ParseError, TokenError) as e:
        raise _syntax_error(e, text, script, start) from None
    st = Statement("select", text, tree, line=line)
    if isinstance(tree, exp.Command):
        raise UnsupportedStatement(f"{word} {str(tree.args.get('expression') or '')[:30]!r}... is not supported "
                                   f"(line {line}); supported: {SUPPORTED}.", line=line, text=word)
    if isinstance(tree, (exp.Query, exp.Values)) and not isinstance(tree, exp.Command):
        st.sources = _names(source_refs(tree, line=st.line))
        return st
    if isinstance(tree, exp.Insert):
        return _insert(st, tree)
    if isinstance(tree, exp.Update):
        return _update(st, tree)
    if isinstance(tree, exp.Delete):
        return _delete(st, tree)
    if isinstance(tree, exp.Merge):
        return _merge(st, tree)
    if isinstance(tree, exp.Create):
        return _create(st, tree)
    if isinstance(tree, exp.Describe):
        return _describe_stmt(st, tree)
    raise UnsupportedStatement(f"{type(tree).__name__.upper()} statements are not supported (line {line}); "
                               f"supported: {SUPPORTED}.", line=line, text=word)

def _set_items(st: Statement, eqs: Sequence[Any], alias: str, target: str) -> list[tuple[str, Any]]:
    from sqlglot import expressions as exp

    out = []
    for e in eqs:
        if not isinstance(e, exp.EQ) or not isinstance(e.this, exp.Column):
            raise SqlError(f"line {st.line}: SET expects column = expression, got {e.sql('spark')!r}", line=st.line)
        c = e.this
        if c.table and c.table.lower() not in (alias.lower(), target.lower()):
            raise SqlError(f"line {st.line}: SET {c.sql('spark')}: {c.table!r} is not the target table "
                           f"{target!r}", line=st.line, text=c.sql("spark"))
        if c.args.get("db"):
            raise SqlError(f"line {st.line}: SET {c.sql('spark')}: only top-level columns can be assigned",
                           line=st.line)
        out.append((c.name, e.expression))
    return out


def _dml_target(st: Statement, tree: Any, verb: str, clauses: tuple[str, ...], help_: str) -> tuple[str, str, Any]:
    """UPDATE/DELETE: refuse WITH and the ``clauses`` not supported; return (target, alias, WHERE condition)."""
    from sqlglot import expressions as exp

    if tree.args.get("with_") is not None:
        raise unsupported(st, f"WITH ... {verb}", "Put the query inside the statement: a subquery, or "
                          "MERGE ... USING (WITH ... SELECT ...) AS s.")
    for k in clauses:
        if tree.args.get(k):
            raise unsupported(st, f"{verb} ... {k.rstrip('_').upper()}", help_)
    target, alias = _plain_table(st, tree.this, f"{verb} target")
    where = tree.args.get("where")
    return target, alias, where.this if isinstance(where, exp.Where) else where


def _update(st: Statement, tree: Any) -> Statement:
    target, alias, where = _dml_target(st, tree, "UPDATE", ("from", "from_", "joins", "order", "limit", "returning"),
                                       "Use a subquery in SET or WHERE, or MERGE.")
    sets = _set_items(st, tree.expressions, alias, target)
    st.kind, st.target = "update", target
    st.spec = UpdateSpec(target, alias, sets, where)
    st.sources = _names(source_refs(tree, exclude=[tree.this], line=st.line))
    return st


def _delete(st: Statement, tree: Any) -> Statement:
    target, alias, where = _dml_target(st, tree, "DELETE",
                                       ("using", "tables", "order", "limit", "returning", "cluster"),
                                       "Use a subquery in WHERE.")
    st.kind, st.target = "delete", target
    st.spec = DeleteSpec(target, alias, where)
    st.sources = _names(source_refs(tree, exclude=[tree.this], line=st.line))
    return st


def _insert(st: Statement, tree: Any) -> Statement:
    from sqlglot import expressions as exp

    if tree.args.get("overwrite"):
        raise unsupported(st, "INSERT OVERWRITE",
                          "In a transaction, DELETE FROM t; then INSERT INTO t ... does the same.")
    if tree.args.get("by_name"):
        raise unsupported(st, "INSERT ... BY NAME", "Give a column list: INSERT INTO t (a, b) SELECT a, b ...")
    for k in ("conflict", "returning", "where", "alternative", "ignore", "exists"):
        if tree.args.get(k):
            raise unsupported(st, f"INSERT ... {k.upper()}")
    node, columns = tree.this, None
    if isinstance(node, exp.Schema):
        columns = [c.name for c in node.expressions]
        node = node.this
        seen: set[str] = set()
        for c in columns:
            if c.lower() in seen:
                raise SqlError(f"line {st.line}: column {c!r} appears twice in the INSERT column list", line=st.line,
                               text=c)
            seen.add(c.lower())
    target, _ = _plain_table(st, node, "INSERT target")
    src = tree.expression
    rows = None
    query = None
    if isinstance(src, exp.Values):
        rows = [list(t.expressions) if isinstance(t, exp.Tuple) else [t] for t in src.expressions]
        widths = {len(r) for r in rows}
        if len(widths) > 1:
            raise SqlError(f"line {st.line}: the VALUES rows have different numbers of values "
                           f"({', '.join(map(str, sorted(widths)))})", line=st.line)
        if columns is not None and rows and len(rows[0]) != len(columns):
            raise SqlError(f"line {st.line}: INSERT INTO {target}: {len(rows[0])} value(s) per row for "
                           f"{len(columns)} column(s) ({', '.join(columns)})", line=st.line)
    elif isinstance(src, exp.Query):
        query = src
        cte = tree.args.get("with_")
        if cte is not None:  # WITH c AS (...) INSERT INTO t SELECT ... FROM c: the CTEs belong to the query
            if query.args.get("with_") is not None:
                raise unsupported(st, "WITH both before INSERT and inside its query")
            query.set("with_", cte.copy())
    else:
        raise unsupported(st, f"INSERT from {type(src).__name__}", "Use VALUES or a SELECT.")
    st.kind, st.target = "insert", target
    st.spec = InsertSpec(target, columns, rows, query)
    st.sources = _names(source_refs(src, line=st.line))
    return st


def _merge(st: Statement, tree: Any) -> Statement:
    from sqlglot import expressions as exp

    if tree.args.get("with_") is not None:
        raise unsupported(st, "WITH ... MERGE", "Put the query inside the statement: a subquery, or "
                          "MERGE ... USING (WITH ... SELECT ...) AS s.")
    target, alias = _plain_table(st, tree.this, "MERGE target")
    using = tree.args.get("using")
    source_table = source_query = None
    if isinstance(using, exp.Table) and isinstance(using.this, exp.Identifier):
        check_plain(st, using)
        source_table = using.name
        a = using.args.get("alias")
        source_alias = a.name if a is not None and a.name else using.name
    elif isinstance(using, exp.Subquery):
        a = using.args.get("alias")
        if a is None or not a.name:
            raise SqlError(f"line {st.line}: give the MERGE source subquery an alias: USING (SELECT ...) AS s",
                           line=st.line)
        source_alias, source_query = a.name, using.this
    else:
        raise SqlError(f"line {st.line}: MERGE ... USING needs a table or a (subquery) with an alias", line=st.line)
    if source_alias.lower() == alias.lower():
        raise SqlError(f"line {st.line}: the MERGE target and source both go by {alias!r}; alias one of them "
                       "(MERGE INTO t USING t AS s ...)", line=st.line)
    if tree.args.get("on") is None:
        raise SqlError(f"line {st.line}: MERGE needs an ON condition", line=st.line)
    whens = tree.args.get("whens")
    clauses: list[MergeClause] = []
    for w in (whens.expressions if whens is not None else []):
        matched = bool(w.args.get("matched"))
        if w.args.get("source"):
            raise unsupported(st, "WHEN NOT MATCHED BY SOURCE",
                              "Use a separate DELETE/UPDATE ... WHERE NOT EXISTS (...) in the same transaction.")
        then = w.args.get("then")
        cond = w.args.get("condition")
        if isinstance(then, exp.Update):
            if not matched:
                raise SqlError(f"line {st.line}: WHEN NOT MATCHED can only INSERT", line=st.line)
            star = len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star)
            sets = None if star else _set_items(st, then.expressions, alias, target)
            clauses.append(MergeClause(True, "update", cond, sets=sets))
        elif isinstance(then, exp.Insert):
            if matched:
                raise SqlError(f"line {st.line}: WHEN MATCHED can UPDATE or DELETE, not INSERT", line=st.line)
            if isinstance(then.this, exp.Star):
                clauses.append(MergeClause(False, "insert", cond))
                continue
            cols = [c.name for c in then.this.expressions] if isinstance(then.this, exp.Tuple) else None
            if cols is not None and len({c.lower() for c in cols}) != len(cols):
                raise SqlError(f"line {st.line}: a column appears twice in the MERGE INSERT column list",
                               line=st.line)
            vals = then.expression
            values = list(vals.expressions) if isinstance(vals, exp.Tuple) else ([vals] if vals is not None else None)
            if values is None:
                raise SqlError(f"line {st.line}: WHEN NOT MATCHED THEN INSERT needs VALUES (...) or *", line=st.line)
            if cols is not None and len(cols) != len(values):
                raise SqlError(f"line {st.line}: MERGE INSERT lists {len(cols)} column(s) and {len(values)} "
                               "value(s)", line=st.line)
            clauses.append(MergeClause(False, "insert", cond, columns=cols, values=values))
        elif (isinstance(then, exp.Var) and then.name.upper() == "DELETE") or (
                isinstance(then, exp.Delete)):
            if not matched:
                raise SqlError(f"line {st.line}: WHEN NOT MATCHED can only INSERT", line=st.line)
            clauses.append(MergeClause(True, "delete", cond))
        else:
            raise unsupported(st, f"MERGE action {then.sql('spark') if then is not None else '?'}")
    if not clauses:
        raise SqlError(f"line {st.line}: MERGE needs at least one WHEN clause", line=st.line)
    st.kind, st.target = "merge", target
    st.spec = MergeSpec(target, alias, source_alias, tree.args["on"], clauses, source_table, source_query)
    st.sources = _names(source_refs(tree, exclude=[tree.this], line=st.line))
    return st


def _create(st: Statement, tree: Any) -> Statement:
    from sqlglot import expressions as exp

    kind = str(tree.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise unsupported(st, f"CREATE {kind or '?'}", "Only CREATE TABLE is supported.")
    if tree.args.get("replace"):
        raise unsupported(st, "CREATE OR REPLACE TABLE", "Create a new table, or DELETE its rows in a transaction.")
    if tree.args.get("expression") is not None:
        raise unsupported(st, "CREATE TABLE ... AS SELECT",
                          "Create the table with its columns, then INSERT INTO t SELECT ... in a transaction.")
    schema = tree.this
    if not isinstance(schema, exp.Schema) or not schema.expressions:
        raise SqlError(f"line {st.line}: CREATE TABLE needs a column list: CREATE TABLE t (id BIGINT, ...)",
                       line=st.line)
    name, _ = _plain_table(st, schema.this, "table name")
    cols = []
    for c in schema.expressions:
        if not isinstance(c, exp.ColumnDef) or c.args.get("kind") is None:
            raise SqlError(f"line {st.line}: {c.sql('spark')!r} is not a column definition (name TYPE)", line=st.line)
        for con in c.args.get("constraints") or []:
            if not isinstance(con.args.get("kind"), (exp.NotNullColumnConstraint, exp.CommentColumnConstraint)):
                raise unsupported(st, f"column constraint {con.sql('spark')!r}", "Columns take NOT NULL and COMMENT.")
        cols.append(c.sql("spark"))
    parts: list[str] = []
    description = None
    props: dict[str, str] = {}
    for p in (tree.args.get("properties").expressions if tree.args.get("properties") is not None else []):
        if isinstance(p, exp.FileFormatProperty):
            fmt = p.this.name if p.this is not None else ""
            if fmt.upper() != "DELTA":
                raise unsupported(st, f"USING {fmt}", "Lakehouse tables are Delta tables (USING DELTA or nothing).")
        elif isinstance(p, exp.PartitionedByProperty):
            inner = p.this.expressions if isinstance(p.this, (exp.Schema, exp.Tuple)) else [p.this]
            for e in inner:
                if not isinstance(e, (exp.Identifier, exp.Column)):
                    raise unsupported(st, f"PARTITIONED BY {e.sql('spark')}",
                                      "Name columns of the table: PARTITIONED BY (region).")
                parts.append(e.name)
        elif isinstance(p, exp.SchemaCommentProperty):
            description = p.this.name
        elif type(p) is exp.Property and isinstance(p.args.get("value"), exp.Literal):  # TBLPROPERTIES ('k' = v)
            props[p.name] = str(p.args["value"].this)
        else:
            raise unsupported(st, f"table property {p.sql('spark')!r}", "CREATE TABLE takes USING DELTA, "
                              "PARTITIONED BY (...), COMMENT '...' and TBLPROPERTIES ('delta.x' = 'value').")
    st.kind, st.target = "create", name
    st.spec = CreateSpec(name, ", ".join(cols), parts, bool(tree.args.get("exists")), description, props)
    return st


def _describe_stmt(st: Statement, tree: Any) -> Statement:
    style = str(tree.args.get("style") or "").upper()
    if style not in ("", "EXTENDED", "FORMATTED"):
        hint = "The table's log: %lv log TABLE." if style in ("HISTORY", "DETAIL") else ""
        raise unsupported(st, f"DESCRIBE {style}", hint)
    if tree.args.get("partition") is not None or tree.args.get("expressions"):
        raise unsupported(st, "DESCRIBE of a column or partition", "DESCRIBE TABLE t lists the columns.")
    name, _ = _plain_table(st, tree.this, "DESCRIBE target")
    st.kind, st.target, st.spec = "describe", name, DescribeSpec(name)
    return st


_SHOW = re.compile(r"^\s*SHOW\s+TABLES(?:\s+(?:IN|FROM)\s+(?P<db>\S+))?(?:\s+(?:LIKE\s+)?'(?P<pat>[^']*)')?\s*$",
                   re.I | re.S)


def _show(text: str, line: int) -> ShowSpec:
    m = _SHOW.match(skip_comments(text))
    if not m:
        raise UnsupportedStatement(f"{text.strip()[:40]!r} is not supported (line {line}); of the SHOW statements "
                                   f"only SHOW TABLES [LIKE 'pattern'] is. Supported: {SUPPORTED}.", line=line)
    if m.group("db"):
        raise UnsupportedStatement(f"SHOW TABLES IN {m.group('db')} is not supported (line {line}): the warehouse "
                                   "has one namespace; use SHOW TABLES.", line=line)
    return ShowSpec(m.group("pat"))


def show_matches(pattern: Optional[str], name: str) -> bool:
    """Spark's SHOW TABLES LIKE: ``*`` any characters, ``|`` alternatives, case-insensitive."""
    if pattern is None:
        return True
    alts = [re.escape(a.strip()).replace(r"\*", ".*") for a in pattern.split("|")]
    return re.fullmatch("|".join(alts), name, re.I) is not None


_NAME = r"(?P<name>`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_OPTIMIZE = re.compile(rf"^\s*OPTIMIZE\s+{_NAME}(?P<rest>.*?)\s*$", re.I | re.S)
_VACUUM = re.compile(rf"^\s*VACUUM\s+{_NAME}(?:\s+RETAIN\s+(?P<n>[0-9]+(?:\.[0-9]*)?)\s+HOURS?)?"
                     r"(?P<dry>\s+DRY\s+RUN)?\s*$", re.I | re.S)


def _maintenance(text: str, word: str, line: int) -> Statement:
    """``OPTIMIZE t`` and ``VACUUM t [RETAIN n HOURS] [DRY RUN]`` (Delta Lake's syntax)."""
    body = skip_comments(text)
    if word == "OPTIMIZE":
        m = _OPTIMIZE.match(body)
        if m is None:
            raise SqlError(f"line {line}: OPTIMIZE needs a table name: OPTIMIZE t", line=line)
        if m.group("rest").strip():
            raise UnsupportedStatement(f"line {line}: OPTIMIZE {m.group('name')} {m.group('rest').strip()[:30]!r} is "
                                       "not supported: only OPTIMIZE t (compaction of the whole table; no WHERE, no "
                                       "ZORDER BY)", line=line)
        name = m.group("name").strip("`")
        return Statement("optimize", text, None, OptimizeSpec(name), target=name, line=line)
    m = _VACUUM.match(body)
    if m is None:
        raise SqlError(f"line {line}: expected VACUUM t [RETAIN n HOURS] [DRY RUN], got {body.strip()[:60]!r}",
                       line=line)
    name = m.group("name").strip("`")
    hours = float(m.group("n")) if m.group("n") is not None else None
    return Statement("vacuum", text, None, VacuumSpec(name, hours, bool(m.group("dry"))), target=name, line=line)
