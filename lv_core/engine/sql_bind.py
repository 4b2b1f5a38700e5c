"""Binding table references (pure): render sqlglot expressions as Spark SQL whose lakehouse table
references are ``{placeholders}``, bound by the executor to DataFrames of the transaction's view of
each table (``spark.sql(text, **frames)``); plus the predicate texts data skipping uses.

Why placeholders and not named temporary views: Spark Connect resolves a view *name* each time a
DataFrame runs, so a DataFrame returned by SELECT over ``lv_<txn>_<table>`` views would silently
change when a later statement of the same transaction re-binds the view, and fail once the view is
dropped at commit. pyspark's ``spark.sql(text, **frames)`` embeds each DataFrame's plan in the
query under a name scoped to that one query (``SubqueryAlias`` relations sent with the plan): the
binding is per statement, nothing is registered in the Spark session, so two transactions on one
session can never see each other's bindings and there is nothing to drop when a transaction ends;
a returned DataFrame stays valid (and unchanged) after later statements and after the commit.

A committed table version read by a SELECT is the exception (:mod:`lv_core.engine.spark_views`): it
is named by a temporary view whose name is a digest of exactly the files it reads, made once and
never re-bound, so the concern above does not arise, and Spark does not resolve the table's files
again for every query. :meth:`Renderer.with_views` puts those names in the text.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Callable, Mapping, Optional

from lv_core.engine.sql_ast import source_refs

__all__ = ["Renderer", "has_subquery", "q", "skip_text", "target_conjuncts"]


def q(name: str) -> str:
    """``name`` as a back-quoted Spark identifier, safe inside a placeholder-formatted query."""
    return "`" + name.replace("`", "``").replace("{", "{{").replace("}", "}}") + "`"


class Renderer:
    """Turns sqlglot expressions into Spark SQL text where every lakehouse table reference is a
    ``{placeholder}`` (for ``spark.sql(text, **frames)``), aliased as written (or by its own name,
    so ``bank_x.balance`` keeps resolving). Braces in the text are escaped for the formatter.

    ``refs`` maps each placeholder to the table name as written; :meth:`frame` registers extra
    placeholders for DataFrames the caller provides (e.g. a scan of a DML target).
    """

    def __init__(self) -> None:
        self._tag = secrets.token_hex(4)
        self._n = 0
        self.refs: dict[str, str] = {}  # placeholder -> table (as written)
        self.frames: dict[str, str] = {}  # placeholder -> caller's label

    def _key(self) -> str:
        self._n += 1
        return f"lvref{self._tag}x{self._n}y"

    def frame(self, label: str) -> str:
        """A placeholder (``{key}``) for a DataFrame the caller binds under ``label``."""
        k = self._key()
        self.frames[k] = label
        return "{" + k + "}"

    def expr(self, node: Any) -> str:
        """``node`` as Spark SQL with its table references replaced by placeholders."""
        from sqlglot import expressions as exp

        copy = node.copy()
        for t in source_refs(copy):
            k = self._key()
            self.refs[k] = t.name
            if t.args.get("alias") is None:
                t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name, quoted=True)))
            t.set("this", exp.to_identifier(k))
        text = copy.sql(dialect="spark").replace("{", "{{").replace("}", "}}")
        return re.sub(rf"lvref{self._tag}x\d+y", lambda m: "{" + m.group(0) + "}", text)

    def with_views(self, text: str, views: Mapping[str, str]) -> str:
        """``text`` (rendered by this renderer) with the placeholders of ``views`` (placeholder -> the
        name of a temporary view holding that table, see :mod:`lv_core.engine.spark_views`) replaced by
        the quoted view names; the other placeholders and the brace escapes stay."""
        return re.sub(rf"\{{(lvref{self._tag}x\d+y)\}}",
                      lambda m: q(views[m.group(1)]) if m.group(1) in views else m.group(0), text)

    def bind(self, table_frame: Callable[[str], Any], frames: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """The ``spark.sql`` keyword arguments: table references via ``table_frame(name)``, extra
        placeholders from ``frames`` (label -> DataFrame)."""
        out = {k: table_frame(t) for k, t in self.refs.items()}
        for k, label in self.frames.items():
            out[k] = (frames or {})[label]
        return out


def has_subquery(node: Any) -> bool:
    from sqlglot import expressions as exp

    return any(isinstance(n, (exp.Subquery, exp.Query, exp.Exists)) for n in node.walk())


def skip_text(where: Any, alias: str, target: str) -> Optional[str]:
    """The WHERE of an UPDATE/DELETE as text for data skipping: target-qualified columns outside
    subqueries unqualified (skipping knows only the table's own columns). None: no predicate."""
    if where is None:
        return None
    from sqlglot import expressions as exp

    copy = where.copy()
    names = {alias.lower(), target.lower()}
    for c in list(copy.find_all(exp.Column)):
        if c.table and c.table.lower() in names and not c.args.get("db") and not _inside_subquery(c, copy):
            c.set("table", None)
    return copy.sql(dialect="spark")


def _inside_subquery(node: Any, root: Any) -> bool:
    from sqlglot import expressions as exp

    p = node.parent
    while p is not None and p is not root:
        if isinstance(p, (exp.Subquery, exp.Query, exp.Exists)):
            return True
        p = p.parent
    return False


def target_conjuncts(on: Any, alias: str) -> Optional[str]:
    """The conjuncts of a MERGE ON condition that only use target columns qualified by ``alias``
    (no subqueries), unqualified, as text for data skipping; None if there are none."""
    from sqlglot import expressions as exp

    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    keep = []
    for p in parts:
        cols = list(p.find_all(exp.Column))
        if not cols or has_subquery(p):
            continue
        if all(c.table and c.table.lower() == alias.lower() and not c.args.get("db") for c in cols):
            c2 = p.copy()
            for c in c2.find_all(exp.Column):
                c.set("table", None)
            keep.append(c2.sql(dialect="spark"))
    return " AND ".join(f"({k})" for k in keep) if keep else None
