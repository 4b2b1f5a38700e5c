"""Static rendering of a :class:`~widgets.model.TxnView`: HTML parts, a whole HTML page fragment, text.

The live widget shows the same parts (one ``ipywidgets.HTML`` each), so what a notebook converted
to HTML or a terminal shows is what the live widget showed. Every dynamic string is escaped.
"""

from __future__ import annotations

import html
import time
from typing import Callable

from widgets.dag_svg import txn_dag_html
from widgets.model import STATE_COLOURS, MarkerRow, TableValidation, TxnView, short_id, versions_text
from widgets.summary import named, progress_html, progress_text, summary_html, table_versions, why_html, why_text

#: Parts of the widget: the status line and the progress line are always shown; the rest (``DETAILS``)
#: only when the widget is expanded.
PARTS: tuple[str, ...] = ("summary", "progress", "why", "header", "markers", "dag", "validation", "timeline",
                          "result")
DETAILS: tuple[str, ...] = PARTS[2:]
TIMELINE_SHOWN = 200

CSS = """<style>
.lv-txn, .lv-inspector {font-size: var(--jp-content-font-size1, 13px); line-height: 1.35;
  color: var(--jp-content-font-color1, #1f1f1f);}
.lv-txn {border: 1px solid var(--jp-border-color2, #e0e0e0); border-radius: 4px; padding: 2px 6px;
  background: var(--jp-layout-color1, transparent); max-width: 100%;}
.lv-txn table, .lv-inspector table {border-collapse: collapse; margin: 2px 0 6px 0;}
.lv-txn th, .lv-txn td, .lv-inspector th, .lv-inspector td {padding: 1px 8px; text-align: left !important;
  border-bottom: 1px solid var(--jp-border-color2, rgba(128,128,128,.25)); vertical-align: top;
  white-space: nowrap; color: inherit; background: transparent;}
.lv-txn th, .lv-inspector th {font-weight: 600;}
.lv-sec {font-weight: 600; margin-top: 4px;}
.lv-badge {display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-weight: 600;}
.lv-muted {color: var(--jp-ui-font-color2, #616161);}
.lv-id {font-family: var(--jp-code-font-family, monospace); font-size: 11px; color: var(--jp-ui-font-color2, #616161);}
.lv-h {padding: 0 0 0 8px;}
.lv-bar-row {display: flex; align-items: center; gap: 6px; min-height: 22px;}
.lv-sum {display: flex; flex-wrap: wrap; align-items: center; gap: 0 6px;}
.lv-sum-name {font-weight: 600;} .lv-sum-sep {color: var(--jp-ui-font-color3, #9e9e9e);}
.lv-toggle label {cursor: pointer; user-select: none; font-size: 11px; color: var(--jp-ui-font-color2, #616161);
  display: inline-block; width: 1.2em; text-align: center;}
.lv-toggle input {display: none;}
.lv-toggle .lv-open {display: none;} .lv-toggle input:checked ~ .lv-open {display: inline;}
.lv-toggle input:checked ~ .lv-closed {display: none;}
.lv-txn:not(:has(.lv-toggle input:checked)) > .lv-details {display: none !important;}
.lv-details {border-top: 1px solid var(--jp-border-color2, #e0e0e0); margin-top: 2px;}
.lv-static details > summary {cursor: pointer; list-style-position: inside;}
.lv-static details > summary .lv-sum {display: inline-flex;}
.lv-prog {display: flex; align-items: center; gap: 8px; font-size: 12px;}
.lv-bar {display: inline-flex; width: 160px; height: 8px; border-radius: 4px; overflow: hidden;
  background: var(--jp-layout-color3, #e0e0e0);}
.lv-bar-fill {display: block; height: 100%; background: var(--jp-brand-color1, #1976d2);}
.lv-bar-run, .lv-bar-busy {background: repeating-linear-gradient(-45deg, var(--jp-brand-color3, #90caf9) 0 6px,
  var(--jp-layout-color3, #e0e0e0) 6px 12px); background-size: 17px 8px; animation: lv-bar-move 1s linear infinite;}
.lv-bar-run {display: block; height: 100%;}
@keyframes lv-bar-move {from {background-position: 0 0;} to {background-position: 17px 0;}}
.lv-cancel-box .lv-cancel {height: 22px; line-height: 20px; padding: 0 10px; font-size: 12px;}
.lv-why-panel {margin: 2px 0 4px 0; padding: 2px 8px; border-left: 3px solid var(--jp-border-color1, #9e9e9e);
  background: var(--jp-layout-color2, rgba(128,128,128,.05));}
.lv-why-panel.lv-why-error {border-left-color: var(--jp-error-color1, #c62828);
  background: var(--jp-layout-color2, rgba(198,40,40,.05));}
.lv-why-panel.lv-why-ok {border-left-color: var(--jp-warn-color1, #b05a00);}
.lv-why-item {margin: 2px 0;} .lv-why-head {font-weight: 600;}
.lv-why-rule {font-family: var(--jp-code-font-family, monospace);}
.lv-why-item[data-kind="redo"] .lv-why-head {color: var(--jp-warn-color1, #b05a00);}
.lv-why-error .lv-why-item[data-kind="abort"] .lv-why-head {color: var(--jp-error-color1, #c62828);}
.lv-tl-box {max-height: 14em; overflow-y: auto;}
.lv-txn .lv-tl {margin: 2px 0; padding-left: 0 !important; list-style: none !important;
  font-family: var(--jp-code-font-family, monospace);
  font-size: 12px;}
.lv-tl li {white-space: pre-wrap;}
.lv-tl .lv-t {display: inline-block; min-width: 6.5em; color: var(--jp-ui-font-color2, #616161);}
.lv-tl-wait {color: var(--jp-warn-color1, #c77700);} .lv-tl-warn {color: var(--jp-warn-color1, #b05a00);}
.lv-tl-ok {color: var(--jp-success-color1, #2e7d32);}
.lv-tl-error {color: var(--jp-error-color1, #c62828); font-weight: 600;}
.lv-rule-pass {color: var(--jp-success-color1, #2e7d32);}
.lv-rule-fail {color: var(--jp-error-color1, #c62828); font-weight: 600;}
.lv-rule-na {color: var(--jp-ui-font-color2, #757575);}
.lv-val-box, .lv-markers {overflow-x: auto;} .lv-val-note {font-size: 12px;}
.lv-st-waiting {color: var(--jp-warn-color1, #c77700); font-weight: 600;}
.lv-st-committed {color: var(--jp-success-color1, #2e7d32);}
.lv-st-shifted {color: var(--jp-warn-color1, #b05a00);} .lv-st-lost {color: var(--jp-error-color1, #c62828);}
.lv-st-freed {color: var(--jp-ui-font-color2, #757575);}
.lv-st-live {color: var(--jp-brand-color1, #1f6fb2);}
.lv-st-expired, .lv-st-decided {color: var(--jp-error-color1, #c62828); font-weight: 600;}
.lv-result-committed {color: var(--jp-success-color1, #2e7d32); font-weight: 600;}
.lv-result-aborted {color: var(--jp-error-color1, #c62828); font-weight: 600;}
.lv-help {margin-top: 2px;}
.lv-dag-svg g.edge text, .lv-dag-svg g.graph > text {fill: var(--jp-ui-font-color1, #444);}
.lv-dag-svg g.lv-edge-pending path, .lv-dag-svg g.lv-edge-resolved path {stroke: var(--jp-ui-font-color2, #777);}
.lv-dag-svg g.lv-edge-pending polygon, .lv-dag-svg g.lv-edge-resolved polygon {stroke: var(--jp-ui-font-color2, #777);
  fill: var(--jp-ui-font-color2, #777);}
.lv-dag-svg g.node text {fill: #1f1f1f;}
</style>"""


def esc(x: object) -> str:
    """HTML-escape anything (attributes too)."""
    return html.escape("" if x is None else str(x), quote=True)


def fmt_s(seconds: float | None) -> str:
    """Seconds for humans: ``0.05 s``, ``12.3 s``, ``2 min 05 s``."""
    if seconds is None:
        return "–"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    m, s = divmod(int(seconds), 60)
    return f"{m} min {s:02d} s"


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def state_text(view: TxnView, row: MarkerRow) -> str:
    """A marker row's state as words: ``placed``, ``waiting on T1@3``, ``shifted (from @3)``..."""
    if row.state == "waiting" and row.waiting_on is not None:
        return f"waiting on {view.label(row.waiting_on[0])}@{row.waiting_on[1]}"
    if row.state == "shifted" and row.shifted_from is not None:
        return f"shifted (from @{row.shifted_from})"
    if row.state == "freed" and row.detail:
        return f"freed ({row.detail})"
    return row.state


# ---------------------------------------------------------------------------------- parts
def header_html(view: TxnView, now: float | None = None) -> str:
    """The details' first line: what the status line leaves out (features, counts, the full id)."""
    st = view.state
    feats = "+".join(view.features) if view.features else "none"
    stats = [f"{view.steps} step{'s' if view.steps != 1 else ''}"]
    if view.waits_total:
        stats.append(f"{view.waits_total} wait{'s' if view.waits_total != 1 else ''}")
    if view.redos:
        stats.append(f"{len(view.redos)} redo{'s' if len(view.redos) != 1 else ''}")
    if view.requests:
        stats.append(f"{view.requests_total} requests")
    return (
        f'<div class="lv-h" data-state="{esc(st)}" data-txn="{esc(view.txn)}" data-name="{esc(view.name or "")}" '
        f'style="border-left: 3px solid {view.colour if view.done else STATE_COLOURS.get(st, "#777")};">'
        f'<span class="lv-preset">{esc(view.preset or "?")}</span> · '
        f'<span class="lv-muted">features {esc(feats)}</span> · '
        f'<span class="lv-elapsed">{esc(fmt_s(view.elapsed(_now(now))))}</span> · '
        f'<span class="lv-muted">{esc(", ".join(stats))}</span> · '
        f'<span class="lv-id">{esc(view.txn)}</span></div>'
    )


def markers_html(view: TxnView, now: float | None = None) -> str:
    if not view.markers:
        return '<div class="lv-sec">Markers</div><div class="lv-empty lv-muted">no tables touched yet</div>'
    n = _now(now)
    rows = []
    for t in sorted(view.markers):
        row = view.markers[t]
        since = f"+{fmt_s(view.offset(row.since))}" if view.began is not None else ""
        if row.state == "waiting" and not view.done:
            since += f" (for {fmt_s(max(0.0, n - row.since))})"
        rows.append(
            f'<tr class="lv-marker-row" data-table="{esc(t)}" data-version="{esc(row.version)}" '
            f'data-state="{esc(row.state)}">'
            f"<td>{esc(t)}</td><td>{esc('@' + str(row.version) if row.version is not None else '–')}</td>"
            f'<td class="lv-st-{esc(row.state)}">{esc(state_text(view, row))}</td>'
            f"<td>{esc(row.read_version if row.read_version is not None else '–')}</td>"
            f"<td>{esc(since)}</td><td class=\"lv-muted\">{esc(row.detail if row.state != 'freed' else '')}</td></tr>")
    return ('<div class="lv-sec">Markers</div><table class="lv-marker-table"><thead><tr><th>table</th>'
            "<th>marker</th><th>state</th><th>read at</th><th>since</th><th></th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def dag_html(view: TxnView) -> str:
    others = len(view.live_nodes) if not view.done else 0
    return (f'<div class="lv-sec">Dependency DAG</div>'
            f'<div class="lv-dag-body" data-edges="{len(view.dag.edges)}" data-cycles="{len(view.dag.cycles)}" '
            f'data-shifts="{len(view.dag.shifts)}" data-others="{others}">{txn_dag_html(view)}</div>')


def _rule_cell(name: str, tv: TableValidation) -> str:
    r = tv.rules.get(name)
    if r is None:
        return '<td class="lv-rule lv-rule-na">–</td>'
    if not r.applies:
        cls, mark = "lv-rule-na", "–"
    elif r.passed:
        cls, mark = "lv-rule-pass", "✓ pass"
    else:
        cls, mark = "lv-rule-fail", "✗ FAIL"
    shown = r.applies and not r.passed and r.detail  # only a failure's comparison is spelled out
    detail = f'<br><span class="lv-rule-detail">{esc(r.detail)}</span>' if shown else ""
    return (f'<td class="lv-rule {cls}" data-rule="{esc(name)}" data-applies="{str(r.applies).lower()}" '
            f'data-passed="{str(r.passed).lower()}" title="{esc(r.detail)}">{mark}{detail}</td>')


def _new_table(tv: TableValidation) -> bool:
    return bool(tv.extra.get("new_table")) or (tv.l is None and bool(tv.rules) and all(
        not r.applies and "not in the global log" in r.detail for r in tv.rules.values()))


def validation_html(view: TxnView) -> str:
    head = '<div class="lv-sec">Validation (LV[I])</div>'
    val = view.validation
    if val is None:
        if "I" in view.features:
            msg = "runs at commit: R1-R3 per table against the global version log"
        else:
            feats = "+".join(view.features) or "none"
            msg = f"not part of this preset ({view.preset or '?'}: features {feats}): no global version log check"
        return f'{head}<div class="lv-val-none lv-muted" data-validated="false">{esc(msg)}</div>'
    if val.compatible:
        gv = f" → global version {val.gvl_version}" if val.gvl_version is not None else ""
        summary = f'<div class="lv-val-summary lv-rule-pass">compatible{esc(gv)}</div>'
    else:
        where = next((t for t, tv in val.tables.items() if not tv.passed), "")
        summary = (f'<div class="lv-val-summary lv-rule-fail">incompatible: {esc(val.failed_rule or "a rule")} '
                   f'failed{" on " + esc(where) if where else ""}</div>')
    rows, new = [], []
    for t, tv in val.tables.items():
        written = tv.extra.get("written")
        role = "" if written is None else (" (written)" if written else " (read)")
        nums = "".join(f"<td>{esc('–' if x is None else x)}</td>" for x in (tv.r, tv.h, tv.w, tv.l, tv.written_logs))
        if _new_table(tv):  # one note for all of them, not one sentence per rule and table
            new.append(t)
            rules = '<td class="lv-rule lv-rule-na lv-rule-new" colspan="3">new to the global log *</td>'
        else:
            rules = "".join(_rule_cell(n, tv) for n in ("R1", "R2", "R3"))
        rows.append(f'<tr class="lv-val-row" data-table="{esc(t)}" data-passed="{str(tv.passed).lower()}">'
                    f"<td>{esc(t)}{esc(role)}</td>{nums}{rules}</tr>")
    note = (f'<div class="lv-val-note lv-muted">* not in the global log yet ({esc(", ".join(new))}): always '
            "compatible; the commit adds it</div>") if new else ""
    return (f'{head}<div class="lv-val" data-validated="true" data-compatible="{str(val.compatible).lower()}" '
            f'data-failed-rule="{esc(val.failed_rule or "")}">{summary}<div class="lv-val-box">'
            '<table class="lv-val-table"><thead><tr><th>table</th><th title="read version">r</th>'
            '<th title="hidden version: highest committed at validation">h</th><th title="write version">w</th>'
            '<th title="log version: the global log\'s version of the table">l</th><th>written logs</th>'
            '<th title="outdated read: r &lt; h - slack">R1</th><th title="version taken: w &lt;= h">R2</th>'
            '<th title="lost update: l + written_logs + 1 != w">R3</th></tr></thead><tbody>'
            + "".join(rows) + f"</tbody></table></div>{note}</div>")


def timeline_html(view: TxnView, limit: int = TIMELINE_SHOWN) -> str:
    shown = view.timeline[-limit:]
    hidden = view.dropped + len(view.timeline) - len(shown)
    bits = [f"{view.events_seen} events"]
    if view.redos:
        bits.append("redo from step " + ", ".join(str(s) for s, _, _ in view.redos))
    if view.requests:
        bits.append("requests: " + ", ".join(f"{k} {v}" for k, v in sorted(view.requests.items()) if v))
    more = f'<li class="lv-muted">… {hidden} earlier event(s)</li>' if hidden else ""
    items = "".join(  # newest first: what just happened is on top, nothing is clipped
        f'<li class="lv-tl-{esc(e.level)}" data-kind="{esc(e.kind)}"><span class="lv-t">'
        f"+{esc(fmt_s(view.offset(e.ts)))}</span>{esc(named(view, e.text))}</li>" for e in reversed(shown))
    return (f'<div class="lv-sec">Timeline <span class="lv-muted">(newest first; {esc(" · ".join(bits))})'
            f'</span></div><div class="lv-tl-box"><ol class="lv-tl">{items}{more}</ol></div>')


def result_html(view: TxnView) -> str:
    res = view.result
    if res is None:
        st = view.state
        msg = {"waiting": "waiting for other transactions to commit or roll back",
               "committing": "committing", "validating": "validating"}.get(st, "open: not committed yet")
        return f'<div class="lv-result-inner lv-muted" data-outcome="running">Result: {esc(msg)}</div>'
    if res.outcome == "committed":
        what = versions_text(sorted(res.versions.items()), "nothing written (read-only)")
        redo = f" · {res.redo_count} redo{'s' if res.redo_count != 1 else ''}" if res.redo_count else ""
        return (f'<div class="lv-result-inner lv-result-committed" data-outcome="committed">'
                f"Committed: {esc(what)}{esc(redo)} · {esc(fmt_s(view.elapsed()))}</div>")
    label = "Outcome unknown" if res.outcome == "unknown" else "Aborted"
    return (f'<div class="lv-result-inner lv-result-aborted" data-outcome="{esc(res.outcome)}" '
            f'data-rule="{esc(res.rule)}">{label} ({esc(res.rule)}): {esc(named(view, res.reason))}</div>'
            f'<div class="lv-help">What to do: {esc(res.help)}</div>')


PART_RENDERERS: dict[str, Callable[..., str]] = {
    "summary": summary_html, "progress": lambda v, now=None: progress_html(v),
    "why": lambda v, now=None: why_html(v),
    "header": header_html, "markers": markers_html, "dag": lambda v, now=None: dag_html(v),
    "validation": lambda v, now=None: validation_html(v), "timeline": lambda v, now=None: timeline_html(v),
    "result": lambda v, now=None: result_html(v),
}


def render_parts(view: TxnView, now: float | None = None) -> dict[str, str]:
    """Every part's HTML, keyed by part name (see :data:`PARTS`)."""
    return {name: PART_RENDERERS[name](view, now) for name in PARTS}


def render_html(view: TxnView, now: float | None = None, *, expanded: bool = False) -> str:
    """The whole transaction as static HTML (for nbconvert and other widget-less frontends): the status
    line in a ``<summary>`` that opens the details without any script (``expanded``: open)."""
    parts = render_parts(view, now)
    body = "".join(f'<div class="lv-{name}">{parts[name]}</div>' for name in DETAILS if parts[name])
    prog = f'<div class="lv-progress">{parts["progress"]}</div>' if parts["progress"] else ""
    opened = " open" if expanded else ""
    return (f'{CSS}<div class="lv-txn lv-static lv-state-{esc(view.state)}" data-state="{esc(view.state)}" '
            f'data-txn="{esc(view.txn)}"><details{opened}><summary class="lv-summary">{parts["summary"]}</summary>'
            f'<div class="lv-details">{body}</div></details>{prog}</div>')


def render_text(view: TxnView, now: float | None = None) -> str:
    """The whole transaction as plain text (terminal IPython, logs)."""
    feats = "+".join(view.features) or "none"
    extra = "".join(f" · {b}" for b in [" ".join(table_versions(view))] if b)
    extra += f" · {view.requests_total} requests" if view.requests else ""
    out = [f"Transaction {view.name or short_id(view.txn)} [{view.state}] preset {view.preset or '?'} "
           f"(features {feats}), {fmt_s(view.elapsed(_now(now)))}{extra}  id {view.txn}"]
    prog = progress_text(view)
    if prog:
        out.append(f"  running: {prog}")
    out.extend(why_text(view))
    if view.markers:
        out.append("  markers:")
        for t in sorted(view.markers):
            row = view.markers[t]
            ver = f"@{row.version}" if row.version is not None else "-"
            read = f", read at {row.read_version}" if row.read_version is not None else ""
            out.append(f"    {t:<20} {ver:<7} {state_text(view, row)}{read}")
    if view.dag.edges:
        out.append("  dependencies:")
        for e in view.dag.edges:
            flags = [e.status] + (["cycle"] if e.in_cycle else []) + (["inverted by shift"] if e.inverted else [])
            out.append(f"    {view.label(e.src)} -> {view.label(e.dst)} at {e.label} ({', '.join(flags)})")
    for s in view.dag.shifts:
        out.append(f"  marker shift ({s.reason}): " + ", ".join(f"{t} @{a} -> @{b}" for t, a, b in s.moves))
    val = view.validation
    if val is not None:
        verdict = "compatible" if val.compatible else "INCOMPATIBLE (" + (val.failed_rule or "?") + ")"
        out.append(f"  validation: {verdict}"
                   + (f", global version {val.gvl_version}" if val.gvl_version is not None else ""))
        for t, tv in val.tables.items():
            rules = " ".join(f"{n}:{'-' if not r.applies else 'ok' if r.passed else 'FAIL'}"
                             for n, r in tv.rules.items())
            out.append(f"    {t:<20} r={tv.r} h={tv.h} w={tv.w} l={tv.l} written_logs={tv.written_logs}  {rules}")
            for n, r in tv.rules.items():
                if r.applies and not r.passed and r.detail:
                    out.append(f"      {n}: {r.detail}")
    if view.redos:
        out.append("  redo: " + ", ".join(f"from step {s} (attempt {a})" for s, a, _ in view.redos))
    if view.requests:
        out.append("  requests: " + ", ".join(f"{k} {v}" for k, v in sorted(view.requests.items())))
    res = view.result
    if res is None:
        out.append(f"  result: {view.state}")
    elif res.outcome == "committed":
        what = versions_text(sorted(res.versions.items()), "nothing written")
        out.append(f"  result: committed {what}" + (f", {res.redo_count} redo(s)" if res.redo_count else ""))
    else:
        outcome = "outcome unknown" if res.outcome == "unknown" else "aborted"
        out.append(f"  result: {outcome} ({res.rule}): {res.reason}")
        out.append(f"  what to do: {res.help}")
    return "\n".join(out)


__all__ = ["CSS", "DETAILS", "PARTS", "esc", "fmt_s", "header_html", "markers_html", "dag_html", "render_html",
           "render_parts", "render_text", "result_html", "state_text", "timeline_html", "validation_html"]
