"""Which columns a statement can refer to, for scans that cannot prune columns themselves.

Spark prunes the columns of its own Parquet reads; the ``stream`` data path's Python data source
(:mod:`lv_core.engine.pyds`) gets no such pushdown and reads every column it is given. The SQL layer
therefore gives it only the columns a statement can name: every identifier in the statement's parse
tree (columns, but also tables and aliases: a superset is harmless), or all columns whenever the
statement could refer to columns without naming them (``*``, ``t.*``, ``NATURAL JOIN``).
"""

from __future__ import annotations

from typing import Any, Optional

from sqlglot import exp

__all__ = ["referenced"]


def referenced(*trees: Any) -> Optional[frozenset[str]]:
    """Lower-cased names of every identifier in ``trees`` (None entries skipped); None when a tree may
    refer to columns it does not name (then every column is needed). ``count(*)`` names no column."""
    names: set[str] = set()
    for tree in trees:
        if tree is None:
            continue
        for node in tree.walk():
            if isinstance(node, exp.Star):
                if isinstance(node.parent, exp.Count):
                    continue
                return None
            if isinstance(node, exp.Join) and node.args.get("method"):
                return None  # NATURAL JOIN: the join columns are not written
            if isinstance(node, (exp.Identifier, exp.Var)):
                names.add(str(node.this).lower())
    return frozenset(names)
