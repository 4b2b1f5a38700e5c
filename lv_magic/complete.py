"""Tab completion for the magics, through IPython's completer (a matcher of its API v2, registered on
the shell by :func:`register`):

- in ``%%lvtxn`` / ``%%lvsql`` cells: table names, the columns of the tables the cell names (also
  after ``alias.``), and SQL keywords (:func:`candidates`);
- on a magic's own line (:func:`line_candidates`): ``%lv`` commands, presets (``%lv begin NAME ``,
  ``%%lvtxn ``), the open transactions' names (``%lv commit ``, ``%lv rollback ``, ``--name ``),
  tables (``%lv markers ``, ``%lv log ``), chart kinds (``--chart ``) and the options of the command.
"""

from __future__ import annotations

import re
from typing import Any

from IPython.core.completer import CompletionContext, SimpleCompletion, completion_matcher

from lv_core.engine.sql_hints import KEYWORDS
from lv_core.presets import PRESETS
from lv_magic import args as lv_args
from lv_magic.state import KernelState

__all__ = ["candidates", "line_candidates", "register"]

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


def _open_names(state: KernelState) -> list[str]:
    """Names of the transactions ``%lv commit``/``rollback`` and ``--name`` can take (still open)."""
    return [n for n, ot in list(state.txns.items()) if getattr(ot.txn, "state", "active") == "active"]


def _options(parser: Any) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


_LINE_OPTIONS = {"connect": lv_args.connect_parser, "begin": lv_args.begin_parser,
                 "recover": lv_args.recover_parser, "selftest": lv_args.selftest_parser,
                 "inspect": lv_args.inspect_parser}


def line_candidates(state: KernelState, line: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(fragment, [(completion, type)]) for a cursor at the end of ``line`` when it is a magic's own
    line (``%lv ...``, ``%%lvtxn ...``, ``%%lvsql ...``), else None."""
    text = line.lstrip()
    words = text.split()
    if not words or words[0] not in ("%lv", "%%lvtxn", "%%lvsql") or len(words) == 1 and not text[-1:].isspace():
        return None
    frag = "" if text[-1].isspace() else words[-1]
    done = words[1:len(words) - (1 if frag else 0)]
    prev = done[-1] if done else ""
    if words[0] == "%lv":
        if not done:
            return frag, [(c, "command") for c in lv_args.COMMANDS if c.startswith(frag.lower())]
        cmd = done[0].lower()
        given = [w for w in done[1:] if not w.startswith("-")]
        if frag.startswith("-") and cmd in _LINE_OPTIONS:
            found = [(o, "option") for o in _options(_LINE_OPTIONS[cmd]()) if o.startswith(frag)]
        elif cmd in ("commit", "rollback") and not given:
            found = [(n, "transaction") for n in _open_names(state) if n.startswith(frag)]
        elif cmd == "begin" and len(given) == 1 and not prev.startswith("-"):
            found = [(p, "preset") for p in PRESETS if p.startswith(frag.lower())]
        elif cmd in ("markers", "log") and not given:
            found = [(t, "table") for t in _tables(state) if t.lower().startswith(frag.lower())]
        else:
            found = []
        return frag, found
    parser = lv_args.lvtxn_parser() if words[0] == "%%lvtxn" else lv_args.lvsql_parser()
    if prev == "--name":
        return frag, [(n, "transaction") for n in _open_names(state) if n.startswith(frag)]
    if prev == "--chart":
        return frag, [(k, "chart") for k in lv_args.CHART_KINDS if k.startswith(frag.lower())]
    if prev in ("--x", "--y", "--out", "--features", "--slack", "--retries", "--timeout"):
        return frag, []
    found = [(o, "option") for o in _options(parser) if frag and o.startswith(frag)] if frag.startswith("-") else []
    positional = [w for i, w in enumerate(done) if not w.startswith("-") and not (i and done[i - 1] in (
        "--name", "--chart", "--x", "--y", "--out", "--features", "--slack", "--retries", "--timeout"))]
    if words[0] == "%%lvtxn" and not positional and not frag.startswith("-"):
        found = [(p, "preset") for p in PRESETS if p.startswith(frag.lower())]
    return frag, found


def matcher_for(state: KernelState) -> Any:
    """The IPython matcher completing SQL in the magics' cells."""

    @completion_matcher(identifier="lv_magic.sql", api_version=2, priority=10)
    def lv_sql(context: CompletionContext) -> dict[str, Any]:
        own = line_candidates(state, context.text_until_cursor)
        if own is not None:
            frag, found = own
            return {"completions": [SimpleCompletion(text, type=kind) for text, kind in found],
                    "matched_fragment": frag, "suppress": bool(found) or not frag}
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
