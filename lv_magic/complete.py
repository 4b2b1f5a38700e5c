"""Tab completion in ``%%lvtxn`` / ``%%lvsql`` cells: table names, the columns of the tables the cell
names (also after ``alias.``), and SQL keywords, through IPython's completer (a matcher of its
API v2, registered on the shell by :func:`register`)."""

from __future__ import annotations

import re
from typing import Any

from IPython.core.completer import CompletionContext, SimpleCompletion, completion_matcher

from lv_core.engine.sql_hints import KEYWORDS
from lv_magic.state import KernelState

__all__ = ["candidates", "register"]

_REF = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO|USING|TABLE)\s+`?([A-Za-z_]\w*)`?(?:\s+(?:AS\s+)?([A-Za-z_]\w*))?",
                  re.I)
_WORD = re.compile(r"(?:([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)?$")
_MAGICS = ("%%lvtxn", "%%lvsql")


def _tables(state: KernelState) -> list[str]:
    if state.lh is None:
        return []
    try:
        return list(state.lh.list_tables())
    except Exception:  # completion must never raise
        return []


def _columns(state: KernelState, table: str) -> list[str]:
    try:
        return [f.name for f in state.lh.snapshot(table).schema]
    except Exception:
        return []


def candidates(state: KernelState, cell: str, before: str) -> tuple[str, list[tuple[str, str]]]:
    """(the fragment being completed, [(completion, type)]) for a cursor after ``before`` in ``cell``."""
    m = _WORD.search(before)
    qualifier, frag = (m.group(1), m.group(2) or "") if m else (None, "")
    tables = _tables(state)
    by_lower = {t.lower(): t for t in tables}
    refs: dict[str, str] = {}  # alias or name -> table, lower case
    for r in _REF.finditer(cell):
        t = by_lower.get(r.group(1).lower())
        if t is None:
            continue
        refs[t.lower()] = t
        alias = r.group(2)
        if alias and alias.upper() not in KEYWORDS and alias.upper() not in ("SET", "WHERE", "ON", "VALUES"):
            refs[alias.lower()] = t
    low = frag.lower()
    if qualifier is not None:
        t = refs.get(qualifier.lower()) or by_lower.get(qualifier.lower())
        cols = _columns(state, t) if t else []
        return frag, [(c, "column") for c in cols if c.lower().startswith(low)]
    out: list[tuple[str, str]] = [(t, "table") for t in tables if t.lower().startswith(low)]
    seen = {t.lower() for t in tables}
    for t in dict.fromkeys(refs.values()):
        for c in _columns(state, t):
            if c.lower().startswith(low) and c.lower() not in seen:
                seen.add(c.lower())
                out.append((c, "column"))
    upper = not frag or frag[0].isupper()
    for k in KEYWORDS:
        if k.lower().startswith(low) and frag:
            out.append((k if upper else k.lower(), "keyword"))
    return frag, out


def matcher_for(state: KernelState) -> Any:
    """The IPython matcher completing SQL in the magics' cells."""

    @completion_matcher(identifier="lv_magic.sql", api_version=2, priority=10)
    def lv_sql(context: CompletionContext) -> dict[str, Any]:
        head = context.full_text.lstrip().split("\n", 1)[0]
        first = context.full_text.split("\n").index(head) if head in context.full_text.split("\n") else 0
        if not head.startswith(_MAGICS) or context.cursor_line <= first:
            return {"completions": [], "suppress": False}
        lines = context.full_text.split("\n")
        before = "\n".join(lines[:context.cursor_line] + [context.text_until_cursor])
        frag, found = candidates(state, context.full_text, before)
        return {"completions": [SimpleCompletion(text, type=kind) for text, kind in found],
                "matched_fragment": frag, "suppress": bool(found)}

    return lv_sql


def register(shell: Any, state: KernelState) -> None:
    """Add the matcher to the shell's completer (once)."""
    completer = getattr(shell, "Completer", None)
    if completer is None:
        return
    completer.custom_matchers[:] = [m for m in completer.custom_matchers
                                    if getattr(m, "matcher_identifier", None) != "lv_magic.sql"]
    completer.custom_matchers.append(matcher_for(state))
