"""The parsed form of SQL statements (pure): errors, :class:`Statement` and the per-kind specs, and
the rules for what counts as a lakehouse table reference (:func:`source_refs`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence

from lv_core.errors import ConfigError

__all__ = ["SUPPORTED", "BoundStatement", "CreateSpec", "DeleteSpec", "DescribeSpec", "InsertSpec", "MergeClause",
           "MergeSpec", "OptimizeSpec", "ShowSpec", "SqlError", "Statement", "UnsupportedStatement", "UpdateSpec",
           "VacuumSpec", "check_plain", "source_refs", "unsupported"]

SUPPORTED = ("SELECT (joins, subqueries, CTEs, aggregates), INSERT INTO ... VALUES | SELECT, "
             "UPDATE ... SET ... [WHERE], DELETE FROM ... [WHERE], MERGE INTO ... USING ... ON ... "
             "WHEN [NOT] MATCHED, CREATE TABLE [IF NOT EXISTS] ... [PARTITIONED BY], SHOW TABLES, "
             "DESCRIBE [TABLE], OPTIMIZE t, VACUUM t [RETAIN n HOURS] [DRY RUN]")


class SqlError(ConfigError):
    """A statement that cannot be run as written (syntax, or a construct this layer refuses).

    Attributes:
        line, column: 1-based position in the script given to ``sql()`` (None when unknown).
        text: the offending text.
    """

    def __init__(self, message: str, *, line: Optional[int] = None, column: Optional[int] = None,
                 text: Optional[str] = None) -> None:
        super().__init__(message)
        self.line, self.column, self.text = line, column, text


class UnsupportedStatement(SqlError):
    """A statement kind (or clause) the SQL layer does not run; the message lists what is supported."""

# ---------------------------------------------------------------------------------------- specs


@dataclass
class UpdateSpec:
    target: str
    alias: str
    sets: list[tuple[str, Any]]  # (column as written, sqlglot expression)
    where: Any = None


@dataclass
class DeleteSpec:
    target: str
    alias: str
    where: Any = None


@dataclass
class InsertSpec:
    target: str
    columns: Optional[list[str]]  # the column list, or None for all columns in table order
    rows: Optional[list[list[Any]]] = None  # VALUES rows (sqlglot expressions)
    query: Any = None  # or a query


@dataclass
class MergeClause:
    matched: bool
    action: str  # "update", "delete" or "insert"
    condition: Any = None
    sets: Optional[list[tuple[str, Any]]] = None  # update: (column, expr); None = UPDATE SET *
    columns: Optional[list[str]] = None  # insert: column list; None = INSERT * (or all columns)
    values: Optional[list[Any]] = None  # insert: values; None = INSERT *


@dataclass
class MergeSpec:
    target: str
    alias: str
    source_alias: str
    on: Any
    clauses: list[MergeClause]
    source_table: Optional[str] = None  # USING <table>
    source_query: Any = None  # USING (<query>) alias


@dataclass
class CreateSpec:
    name: str
    ddl: str
    partition_by: list[str]
    if_not_exists: bool = False
    description: Optional[str] = None
    properties: dict[str, str] = field(default_factory=dict)  # TBLPROPERTIES


@dataclass
class ShowSpec:
    pattern: Optional[str] = None


@dataclass
class OptimizeSpec:
    name: str


@dataclass
class VacuumSpec:
    name: str
    retain_hours: Optional[float] = None
    dry_run: bool = False


@dataclass
class DescribeSpec:
    name: str


@dataclass
class Statement:
    """One parsed statement.

    Attributes:
        kind: "select", "insert", "update", "delete", "merge", "create", "show", "describe", "optimize"
            or "vacuum".
        text: the statement as written.
        tree: the sqlglot tree (None for SHOW).
        spec: the kind's details (None for SELECT: the tree is the query).
        target: the table written (DML) or named (DDL/DESCRIBE).
        sources: lakehouse tables read, in order of appearance (the target too when a
            sub-expression reads it).
        line: 1-based line where the statement starts in its script.
    """

    kind: str
    text: str
    tree: Any = None
    spec: Any = None
    target: Optional[str] = None
    sources: tuple[str, ...] = ()
    line: int = 1

    @property
    def tables(self) -> tuple[str, ...]:
        """Every lakehouse table the statement touches (target first), without duplicates."""
        out = [self.target] if self.target is not None and self.kind in ("insert", "update", "delete", "merge") else []
        for s in self.sources:
            if s not in out:
                out.append(s)
        return tuple(out)


@dataclass
class BoundStatement(Statement):
    """A statement bound to the lakehouse before anything ran (:func:`lv_core.engine.sql_check.check_script`):
    ``names`` maps every table it names, as written, to the lakehouse's name. Running it neither
    parses nor looks its tables up again.
    """

    names: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, st: Statement, names: Mapping[str, str]) -> "BoundStatement":
        """``st`` with its tables bound to ``names``."""
        return cls(**{f.name: getattr(st, f.name) for f in fields(Statement)}, names=dict(names))


# ---------------------------------------------------------------------------------------- table references


def unsupported(st: Statement, what: str, hint: str = "") -> UnsupportedStatement:
    """The error refusing ``what`` in ``st`` (with a ``hint`` on what to write instead)."""
    return UnsupportedStatement(f"{what} is not supported (line {st.line}).{' ' + hint if hint else ''}",
                                line=st.line, text=what)


def check_plain(st: Statement, node: Any) -> None:
    """Refuse a table reference with a database or catalog, time travel or a PARTITION clause.

    Raises:
        SqlError: a qualified name.
        UnsupportedStatement: time travel or a PARTITION clause.
    """
    parts = [p.name for p in (node.args.get("catalog"), node.args.get("db")) if p is not None]
    if parts:
        full = ".".join([*parts, node.name])
        raise SqlError(f"line {st.line}: {full!r}: lakehouse tables have no database or catalog; write "
                       f"{node.name!r} (the tables of the connected warehouse are all in one namespace)",
                       line=st.line, text=full)
    if node.args.get("version") is not None:
        raise unsupported(st, f"time travel on {node.name!r} (VERSION/TIMESTAMP AS OF)",
                          "Inside a transaction every table is read at the transaction's snapshot; read an "
                          "old version with lh.read(name, version=N).")
    if node.args.get("partition") is not None:
        raise unsupported(st, "a PARTITION clause on the target", "Give partition values as columns.")


def _is_cte(node: Any) -> bool:
    name = node.name.lower()
    p = node.parent
    while p is not None:
        w = p.args.get("with_") or p.args.get("with")
        if w is not None and any(c.alias_or_name.lower() == name for c in w.expressions):
            return True
        p = p.parent
    return False


def source_refs(tree: Any, exclude: Sequence[Any] = (), line: int = 1) -> list[Any]:
    """The lakehouse table references in ``tree`` (sqlglot Table nodes), excluding CTE names,
    table-valued functions and the nodes in ``exclude`` (a DML target).

    Raises:
        SqlError: a qualified name or time travel.
    """
    from sqlglot import expressions as exp

    skip = {id(n) for n in exclude}
    out = []
    for t in tree.find_all(exp.Table):
        if id(t) in skip or not isinstance(t.this, exp.Identifier) or _is_cte(t):
            continue
        check_plain(Statement("select", "", line=line), t)
        out.append(t)
    return out
