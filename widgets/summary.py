"""The compact parts of the transaction widget: the one-line status, the progress line and the "why" panel.

Pure functions of a :class:`~widgets.model.TxnView` (HTML and text); every dynamic string is escaped.
The status line holds the essentials (outcome, preset, tables with versions, time, requests); the
"why" panel explains an abort or a redo: the other transaction, the rule and what it changed.
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping

from widgets.model import STATE_COLOURS, TxnView, short_id

#: Short names of abort rules, shown next to the rule code.
RULE_TITLES: Mapping[str, str] = {
    "R1": "outdated read", "R2": "version taken", "R3": "lost update", "timeout": "wait timed out",
    "deadlock": "dependency cycle", "conflict": "conflicting commit", "exposed_read": "returned result changed",
    "crashed": "crashed", "rollback": "rolled back", "unknown": "outcome unknown",
    "global_log": "foreign global version", "voided": "plan voided",
}
_ID = re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{6,}\b")


def _esc(x: object) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _secs(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s" if seconds < 120 else \
        f"{int(seconds) // 60} min {int(seconds) % 60:02d} s"


def named(view: TxnView, text: str) -> str:
    """``text`` with the transaction ids it mentions replaced by their display names."""
    return _ID.sub(lambda m: view.label(m.group(0)), text)


# ---------------------------------------------------------------------------------- status line
def table_versions(view: TxnView) -> list[str]:
    """``bank_x@4`` per table: the committed version, else the marker held, else the version read."""
    res = view.result
    out = []
    for t in sorted(set(view.markers) | set(res.versions if res else ())):
        row = view.markers.get(t)
        if res is not None and t in res.versions:
            out.append(f"{t}@{res.versions[t]}")
        elif row is not None and row.version is not None and row.state not in ("freed", "read"):
            out.append(f"{t}@{row.version}")
        elif row is not None and row.read_version is not None:
            out.append(f"{t} (read @{row.read_version})")
        else:
            out.append(t)
    return out


def state_words(view: TxnView) -> str:
    """The outcome or live state as words: ``committed``, ``aborted (R1)``, ``waiting on T1``."""
    st, res = view.state, view.result
    if res is not None and res.outcome != "committed":
        if res.rule == "rollback":
            return "rolled back"
        return "outcome unknown" if res.outcome == "unknown" else f"aborted ({res.rule})"
    if st == "waiting":
        others = sorted({view.label(txn) for txn, _ in view.waits.values()})
        return "waiting on " + ", ".join(others) if others else st
    if view.progress is not None and st == "active":
        return "running"
    return st


def status_bits(view: TxnView, now: float | None = None) -> list[str]:
    """The status line after the name and state: preset, tables, time, requests, redos."""
    n = time.time() if now is None else now
    bits = [view.preset or "?"]
    tables = table_versions(view)
    if tables:
        bits.append(" ".join(tables))
    bits.append(_secs(view.elapsed(n)))
    if view.requests:
        bits.append(f"{view.requests_total} requests")
    if view.redos:
        bits.append(f"{len(view.redos)} redo{'s' if len(view.redos) != 1 else ''}")
    return bits


def summary_html(view: TxnView, now: float | None = None) -> str:
    """The one-line status (what the collapsed widget shows)."""
    st = view.state
    colour = view.colour if view.done else STATE_COLOURS.get(st, "#777")
    bits = "".join(f'<span class="lv-sum-sep">·</span><span class="lv-sum-{i}">{_esc(b)}</span>'
                   for i, b in enumerate(status_bits(view, now)))
    return (f'<span class="lv-sum" data-state="{_esc(st)}" data-name="{_esc(view.name or "")}" '
            f'data-txn="{_esc(view.txn)}"><b class="lv-sum-name">{_esc(view.name or short_id(view.txn))}</b>'
            f'<span class="lv-badge lv-sum-state" style="background:{colour}">{_esc(state_words(view))}</span>'
            f"{bits}</span>")


def summary_text(view: TxnView, now: float | None = None) -> str:
    return f"{view.name or short_id(view.txn)} [{state_words(view)}] " + " · ".join(status_bits(view, now))


# ---------------------------------------------------------------------------------- progress
def _tasks(p: Any) -> str:
    if p.total <= 0:
        return f"{p.running} tasks running" if p.running else "starting"
    return f"{p.done}/{p.total} tasks" + (f" ({p.running} running)" if p.running else "")


def progress_html(view: TxnView) -> str:
    """The running statement's progress line ('' when no statement runs): tasks done of those known
    so far, a moving stripe for tasks in flight, an indeterminate bar while none is known."""
    p = view.progress
    if p is None or view.done or p.finished:
        return ""
    frac = p.fraction
    pct = f" · {frac * 100:.0f}%" if frac is not None else ""
    if frac is None:
        bar = '<span class="lv-bar lv-bar-busy"></span>'
    else:
        # the tasks in flight (at least the next one: Spark may report none) as a moving stripe
        busy = min(1.0 - frac, max(p.running, 1) / p.total)
        bar = (f'<span class="lv-bar"><span class="lv-bar-fill" style="width:{frac * 100:.1f}%"></span>'
               + (f'<span class="lv-bar-run" style="width:{busy * 100:.1f}%"></span>' if busy > 0 else "")
               + "</span>")
    return (f'<div class="lv-prog" data-statement="{p.statement}" data-done="{p.done}" data-total="{p.total}" '
            f'data-running="{p.running}"><span class="lv-prog-what">statement {p.statement} · {_esc(p.stage)}</span>'
            f'{bar}<span class="lv-prog-num">{_esc(_tasks(p))}{pct} · {_esc(_secs(p.elapsed_s))}</span></div>')


def progress_text(view: TxnView) -> str:
    p = view.progress
    if p is None or view.done or p.finished:
        return ""
    return f"statement {p.statement}: {_tasks(p)}, {_secs(p.elapsed_s)}"


# ---------------------------------------------------------------------------------- why
@dataclass(frozen=True)
class Why:
    """One explanation: an abort or a redo, the other transaction, the rule and what it changed."""

    kind: str  # "abort" | "redo"
    rule: str
    other: str  # display name of the other transaction ('' when unknown or none)
    changed: str  # what the other transaction changed
    detail: str  # the rule's comparison or the abort sentence
    help: str = ""


def _changes(extra: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = extra.get("changes")
    return [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []


def _who(view: TxnView, txn: Any) -> str:
    return view.label(str(txn)) if txn else "a writer outside LakeVilla"


def _abort_why(view: TxnView) -> Why | None:
    res = view.result
    if res is None or res.outcome == "committed":
        return None
    title = RULE_TITLES.get(res.rule, res.rule)
    rule = f"{res.rule} ({title})" if title != res.rule else res.rule
    val = view.validation
    if val is not None and not val.compatible:
        t, tv = next(((t, tv) for t, tv in val.tables.items() if not tv.passed), ("", None))
        if tv is not None:
            failed = tv.rules.get(val.failed_rule or "")
            detail = failed.detail if failed is not None else ""
            changes = _changes(tv.extra)
            other = ", ".join(dict.fromkeys(view.label(str(c["txn"])) if c.get("txn") else "a writer outside "
                                            "LakeVilla" for c in changes))
            changed = "; ".join(f"{_who(view, c.get('txn'))} changed {t}@{c.get('version')}: {c.get('why', '')}"
                                for c in changes) or \
                f"{t}: version {tv.h} was committed after the read at version {tv.r}"
            return Why("abort", rule, other, changed, named(view, detail or res.reason), res.help)
    others = list(dict.fromkeys(res.blocked_by))
    mentioned = [m.group(0) for m in _ID.finditer(res.reason)]
    other = ", ".join(dict.fromkeys(view.label(x) for x in [*others, *mentioned] if x != view.txn))
    changed = ""
    if res.rule in ("conflict", "exposed_read") and view.conflict_log:
        c = view.conflict_log[-1]
        who = view.by_whom(c.table, c.version)
        other = other or (view.label(who) if who else "")
        changed = (f"{view.label(who)} committed {c.table}@{c.version}, which" if who else
                   f"the commit at {c.table}@{c.version}") + f" invalidated step {c.step}"
    return Why("abort", rule, other, changed, named(view, res.reason), res.help)


def whys(view: TxnView) -> list[Why]:
    """The explanations to show: each redo (oldest first), then the abort."""
    out = []
    for c in view.conflict_log:
        who = view.by_whom(c.table, c.version)
        files = f" ({len(c.files)} file{'s' if len(c.files) != 1 else ''})" if c.files else ""
        out.append(Why("redo", "conflict", view.label(who) if who else "", f"committed {c.table}@{c.version},",
                       f"which changed what step {c.step} read{files}: redone from step {c.step}"))
    abort = _abort_why(view)
    if abort is not None:
        out.append(abort)
    return out


def why_html(view: TxnView) -> str:
    """The "why" panel ('' when nothing needs explaining)."""
    items = []
    for w in whys(view):
        head = "Aborted" if w.kind == "abort" else "Redo"
        if w.kind == "abort" and w.rule.startswith("rollback"):
            head = "Rolled back"
        other = f' by <b class="lv-why-other">{_esc(w.other)}</b>' if w.other else ""
        changed = f'<div class="lv-why-changed">{_esc(w.changed)}</div>' if w.changed and w.kind == "abort" else ""
        line = (f'<span class="lv-why-changed">{_esc(w.changed)}</span> <span class="lv-muted">{_esc(w.detail)}'
                "</span>") if w.kind == "redo" else f'<div class="lv-why-detail">{_esc(w.detail)}</div>'
        help_ = f'<div class="lv-why-help">What to do: {_esc(w.help)}</div>' if w.help else ""
        items.append(f'<div class="lv-why-item" data-kind="{w.kind}" data-rule="{_esc(w.rule)}" '
                     f'data-other="{_esc(w.other)}"><span class="lv-why-head">{head}</span> '
                     f'<span class="lv-why-rule">{_esc(w.rule)}</span>{other}'
                     f'{":" if w.kind == "redo" else ""} {line if w.kind == "redo" else ""}'
                     f'{changed}{line if w.kind != "redo" else ""}{help_}</div>')
    if not items:
        return ""
    tone = view.tone if view.done else "ok"  # a redo while running: not an error either
    return (f'<div class="lv-why-panel lv-why-{tone}" data-tone="{tone}"><div class="lv-sec">Why</div>'
            + "".join(items) + "</div>")


def why_text(view: TxnView) -> list[str]:
    out = []
    for w in whys(view):
        by = f" by {w.other}" if w.other else ""
        out.append(f"  why: {w.kind} {w.rule}{by}: {w.changed + '; ' if w.changed else ''}{w.detail}")
    return out


__all__ = ["RULE_TITLES", "Why", "named", "progress_html", "progress_text", "state_words", "status_bits",
           "summary_html", "summary_text", "table_versions", "why_html", "why_text", "whys"]
