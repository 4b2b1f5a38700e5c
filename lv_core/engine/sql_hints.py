"""Suggestions for SQL errors (pure): close table, column and keyword names ("did you mean")."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["KEYWORDS", "STATEMENT_WORDS", "closest", "did_you_mean", "keyword_hint"]

#: First words of the statements the SQL layer runs (transaction control included).
STATEMENT_WORDS = ("SELECT", "WITH", "VALUES", "FROM", "INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "SHOW",
                   "DESCRIBE", "OPTIMIZE", "VACUUM", "BEGIN", "COMMIT", "ROLLBACK", "END")

#: Keywords offered by completion and checked for typos near a syntax error.
KEYWORDS = STATEMENT_WORDS + (
    "DISTINCT", "WHERE", "GROUP BY", "ORDER BY", "HAVING", "LIMIT", "JOIN", "LEFT JOIN", "INNER JOIN", "ON",
    "USING", "AS", "SET", "INTO", "TABLE", "TABLES", "WHEN", "MATCHED", "NOT", "THEN", "AND", "OR", "IN", "IS",
    "NULL", "LIKE", "BETWEEN", "CASE", "ELSE", "UNION", "ALL", "EXISTS", "ASC", "DESC", "TRANSACTION",
    "ISOLATION LEVEL", "ATOMIC", "PARTITIONED BY", "RETAIN", "HOURS", "DRY RUN")


def closest(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates closest to ``word`` (case-insensitive), best first; exact matches excluded."""
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    if word.lower() in by_lower:
        return []
    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=cutoff)]


def did_you_mean(word: str, candidates: Iterable[str], quote: bool = True) -> str:
    """``"; did you mean 'x'?"`` (or ``'x' or 'y'``) when a candidate is close, else ``""``."""
    near = closest(word, candidates)
    if not near:
        return ""
    shown = [repr(c) if quote else c for c in near]
    listed = " or ".join(shown) if len(shown) <= 2 else f"{', '.join(shown[:-1])} or {shown[-1]}"
    return f"; did you mean {listed}?"


def keyword_hint(words: Iterable[str]) -> str:
    """``"; did you mean WHERE?"`` for the first of ``words`` that is a misspelt single keyword."""
    singles = [k for k in KEYWORDS if " " not in k] + ["GROUP", "ORDER", "BY", "PARTITIONED", "ISOLATION"]
    for w in words:
        if w and w.isidentifier() and w.upper() not in singles:
            near = closest(w.upper(), singles, n=1, cutoff=0.75)
            if near:
                return f"; did you mean {near[0]}?"
    return ""
