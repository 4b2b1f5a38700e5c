"""Binding a parsed script before any statement runs (pure): every table a statement names exists,
every column it names exists in its table, and literals assigned to columns fit their types.

The check is conservative: it reports only what certainly fails (a name that no table in scope and
no alias of the statement defines, a string literal stored into a numeric column); whatever it
cannot judge without Spark (expressions, functions, sources that are not lakehouse tables) is left
to Spark when the statement runs. Errors name the line and the cause and suggest close names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from lv_core.engine.sql_ast import BoundStatement, Statement
from lv_core.engine.sql_hints import did_you_mean
from lv_core.errors import SchemaError, TableNotFound

__all__ = ["Columns", "check_script"]

#: table name -> {column name: Delta type ("long", "decimal(10,2)", ...; "" for nested types)}.
Columns = Callable[[str], Mapping[str, str]]

_NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")


def check_script(statements: Sequence[Statement], tables: Sequence[str], columns: Columns) -> list[BoundStatement]:
    """Check every statement of a script against the lakehouse's tables, in order (a table created
    by an earlier CREATE TABLE of the script counts as existing; its columns are not checked), and
    bind its table names: as written -> the lakehouse's name (the exact name, else the one name that
    differs only in case). Running the bound statements looks none of them up again.

    Raises:
        TableNotFound: a table that does not exist (with the close names), or a name that only
            differs in case from several tables.
        SchemaError: an unknown column, or a string literal stored into a numeric column.
    """
    known: dict[str, list[str]] = {}  # lower-case name -> the tables of that name
    for t in tables:
        known.setdefault(t.lower(), []).append(t)
    created: set[str] = set()
    out: list[BoundStatement] = []
    for st in statements:
        if st.kind == "create":
            created.add(st.spec.name.lower())
            same = known.setdefault(st.spec.name.lower(), [])
            if st.spec.name not in same:
                same.append(st.spec.name)
            out.append(BoundStatement.of(st, {}))
            continue
        names = list(st.tables)
        if st.kind in ("describe", "optimize", "vacuum"):
            names = [st.spec.name]
        bound = {n: _bind(st, n, known) for n in names}
        out.append(BoundStatement.of(st, bound))
        if st.tree is None or any(n.lower() in created for n in names):
            continue
        cols = {n.lower(): {c.lower(): (c, t) for c, t in columns(bound[n]).items()} for n in names}
        _check_columns(st, cols)
    return out


def _bind(st: Statement, name: str, known: Mapping[str, list[str]]) -> str:
    """The lakehouse's name of table ``name`` as ``st`` writes it."""
    same = known.get(name.lower(), [])
    if name in same:
        return name
    if len(same) == 1:
        return same[0]
    if same:
        raise TableNotFound(f"line {st.line}: table {name!r} does not exist; tables {', '.join(sorted(same))} differ "
                            "from it only in case: write the exact name")
    every = [t for ts in known.values() for t in ts]
    near = did_you_mean(name, every)
    have = f" (tables: {', '.join(sorted(every))})" if every else " (the lakehouse has no tables)"
    raise TableNotFound(f"line {st.line}: table {name!r} does not exist{near}{'' if near else have}")


def _unknown(st: Statement, table: str, col: str, have: Mapping[str, tuple[str, str]]) -> SchemaError:
    names = [c for c, _ in have.values()]
    hint = did_you_mean(col, names) or f" (its columns: {', '.join(names)})"
    return SchemaError(f"line {st.line}: table {table!r} has no column {col!r}{hint}")


def _check_columns(st: Statement, cols: Mapping[str, Mapping[str, tuple[str, str]]]) -> None:
    from sqlglot import expressions as exp

    tree = st.tree
    if not cols:
        return
    aliases: dict[str, str] = {}  # alias (or name) -> lakehouse table, lower case
    for t in tree.find_all(exp.Table):
        if t.name.lower() in cols and isinstance(t.this, exp.Identifier):
            a = t.args.get("alias")
            aliases[(a.name if a is not None and a.name else t.name).lower()] = t.name.lower()
    target = st.target.lower() if st.target and st.kind in ("insert", "update", "merge") else None
    if target is not None:
        _check_targets(st, target, cols[target])
    defined = _defined_names(tree)
    derived = {ta.name.lower() for ta in tree.find_all(exp.TableAlias)  # aliases of subqueries and CTEs
               if ta.name and not (isinstance(ta.parent, exp.Table) and ta.parent.name.lower() in cols)}
    everywhere = {c for table in cols.values() for c in table}
    judge_bare = _only_lakehouse_sources(tree, cols)
    for c in tree.find_all(exp.Column):
        if not isinstance(c.this, exp.Identifier) or c.args.get("db") is not None:
            continue
        name = c.name.lower()
        if c.table:
            table = aliases.get(c.table.lower())
            if table is not None and name not in cols[table] and c.table.lower() not in derived:
                raise _unknown(st, table, c.name, cols[table])
        elif judge_bare and name not in everywhere and name not in defined:
            if len(cols) == 1:
                only = next(iter(cols))
                raise _unknown(st, only, c.name, cols[only])
            near = did_you_mean(c.name, [n for table in cols.values() for n, _ in table.values()])
            raise SchemaError(f"line {st.line}: no table of the statement ({', '.join(cols)}) has a column "
                              f"{c.name!r}{near}")


def _check_targets(st: Statement, table: str, have: Mapping[str, tuple[str, str]]) -> None:
    """Columns assigned by UPDATE SET, INSERT (column list and VALUES literals) and MERGE clauses."""
    assigned: list[tuple[str, Any]] = []
    spec = st.spec
    if st.kind == "update":
        assigned = list(spec.sets)
    elif st.kind == "insert":
        names = spec.columns or [c for c, _ in have.values()]
        for n in names:
            if n.lower() not in have:
                raise _unknown(st, table, n, have)
        for row in spec.rows or []:
            assigned += [(n, v) for n, v in zip(names, row, strict=False)]
    elif st.kind == "merge":
        for cl in spec.clauses:
            assigned += list(cl.sets or [])
            if cl.columns is not None:
                assigned += [(n, v) for n, v in zip(cl.columns, cl.values or [None] * len(cl.columns), strict=False)]
    for n, value in assigned:
        if n.lower() not in have:
            raise _unknown(st, table, n, have)
        _check_type(st, have[n.lower()], value)


def _check_type(st: Statement, column: tuple[str, str], value: Optional[Any]) -> None:
    from sqlglot import expressions as exp

    name, dtype = column
    if isinstance(value, exp.Literal) and value.is_string and dtype.startswith(_NUMERIC):
        raise SchemaError(f"line {st.line}: column {name!r} is {dtype}; the value {value.sql('spark')} is a string. "
                          "Help: write a number, or CAST(... AS ...) on purpose")


def _defined_names(tree: Any) -> set[str]:
    """Names the statement itself defines (lower case): select aliases, table/CTE aliases and their
    column lists, lambda parameters."""
    from sqlglot import expressions as exp

    out: set[str] = set()
    for a in tree.find_all(exp.Alias):
        if a.alias:
            out.add(a.alias.lower())
    for ta in tree.find_all(exp.TableAlias):
        if ta.name:
            out.add(ta.name.lower())
        out |= {c.name.lower() for c in ta.columns}
    for lam in tree.find_all(exp.Lambda):
        out |= {e.name.lower() for e in lam.expressions}
    return out


def _only_lakehouse_sources(tree: Any, cols: Mapping[str, Any]) -> bool:
    """True when every row source is a lakehouse table or a CTE/subquery (whose output columns are
    aliases or come from lakehouse tables): then a bare column must come from one of them."""
    from sqlglot import expressions as exp

    if any(True for _ in tree.find_all(exp.Values, exp.Unnest, exp.Lateral)):
        return False
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier):
            return False  # a table-valued function
        if t.name.lower() not in cols and not _is_cte_name(tree, t.name):
            return False
    return any(True for _ in tree.find_all(exp.Table)) or tree.args.get("from") is not None


def _is_cte_name(tree: Any, name: str) -> bool:
    from sqlglot import expressions as exp

    return any(c.alias_or_name.lower() == name.lower() for c in tree.find_all(exp.CTE))
