"""Static rendering of a :class:`~widgets.lakehouse_scan.LakehouseScan` (HTML parts, whole HTML, text)."""

from __future__ import annotations

import time

from widgets.dag_svg import GEdge, GNode, graph_html
from widgets.lakehouse_scan import LakehouseScan
from widgets.model import short_id, versions_text
from widgets.render import CSS, esc, fmt_s

INSPECTOR_PARTS: tuple[str, ...] = ("summary", "tables", "live-markers", "global-dag", "gvl", "stuck")


def _ago(ts: float | None, now: float) -> str:
    return "–" if not ts else f"{fmt_s(max(0.0, now - ts))} ago"


def txn_label(txn: str, names: dict[str, str] | None = None) -> str:
    """A transaction as the inspector shows it: ``NAME (short-id)`` when a name is known (this kernel's
    own transactions, or the name another client's markers or lease carry), else the short id."""
    name = (names or {}).get(txn)
    return f"{name} ({short_id(txn)})" if name else short_id(txn)


def txn_ref(txn: str | None, names: dict[str, str] | None = None) -> str:
    """:func:`txn_label` as HTML, the full id on hover (``title``) and in ``data-txn``."""
    if not txn:
        return "–"
    return (f'<span class="lv-txn-ref" title="{esc(txn)}" data-txn="{esc(txn)}">'
            f"{esc(txn_label(txn, names))}</span>")


def _names(scan: LakehouseScan | None, names: dict[str, str] | None) -> dict[str, str]:
    """This kernel's names first, then the names other clients recorded (scan.names)."""
    return {**(scan.names if scan is not None else {}), **(names or {})}


def _waits(preds: tuple[tuple[str, str, int], ...], names: dict[str, str]) -> str:
    return ", ".join(f"{txn_ref(t, names)} at {esc(tb)}@{v}" for t, tb, v in preds) or "–"


def summary_html(scan: LakehouseScan | None) -> str:
    if scan is None:
        return '<div class="lv-summary lv-muted" data-scanned="false">Not scanned yet: press Refresh.</div>'
    n_live = sum(1 for m in scan.markers if m.state == "live")
    bits = [f"{len(scan.tables)} table(s)", f"{n_live} live marker(s)",
            f"{len(scan.owners)} transaction(s) holding markers"]
    if scan.stuck:
        bits.append(f"{len(scan.stuck)} stuck")
    errs = "".join(f'<div class="lv-error lv-rule-fail">{esc(e)}</div>' for e in scan.errors)
    return (f'<div class="lv-summary" data-scanned="true" data-live-markers="{n_live}" '
            f'data-stuck="{len(scan.stuck)}"><b>Lakehouse</b> <span class="lv-id">{esc(scan.url)}</span><br>'
            f'{esc(" · ".join(bits))} <span class="lv-muted">(scanned '
            f'{esc(time.strftime("%H:%M:%S", time.localtime(scan.at)))} in {esc(fmt_s(scan.elapsed_s))})</span>'
            f"{errs}</div>")


def tables_html(scan: LakehouseScan | None) -> str:
    head = '<div class="lv-sec">Tables</div>'
    if scan is None:
        return head
    if not scan.tables:
        return head + '<div class="lv-muted">no tables</div>'
    rows = "".join(
        f'<tr class="lv-table-row" data-table="{esc(t.name)}" data-version="{esc(t.version)}">'
        f"<td>{esc(t.name)}</td><td>{esc('–' if t.version is None else t.version)}</td>"
        f"<td>{esc('–' if t.checkpoint is None else t.checkpoint)}</td><td>{t.markers}</td>"
        f'<td class="lv-muted">{esc(t.error or ("only the newest versions checked" if t.truncated else ""))}</td></tr>'
        for t in scan.tables)
    return (head + '<table class="lv-tables-table"><thead><tr><th>table</th><th>version</th>'
            "<th>checkpoint</th><th>pending markers</th><th></th></tr></thead><tbody>" + rows + "</tbody></table>")


def markers_html(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    head = '<div class="lv-sec">Live markers</div>'
    if scan is None:
        return head
    names = _names(scan, names)
    if not scan.markers:
        return head + '<div class="lv-no-markers lv-muted">no pending markers: no transaction is running</div>'
    now = scan.at
    rows = []
    for m in sorted(scan.markers, key=lambda m: (m.table, m.version)):
        exp = m.expires_in(now)
        lease = ("no lease" if exp is None else f"expires in {fmt_s(exp)}" if exp >= 0
                 else f"expired {fmt_s(-exp)} ago")
        age = m.lease_age(now)
        rows.append(
            f'<tr class="lv-live-marker" data-table="{esc(m.table)}" data-version="{m.version}" '
            f'data-txn="{esc(m.txn)}" data-state="{esc(m.state)}">'
            f"<td>{esc(m.table)}@{m.version}</td>"
            f"<td>{txn_ref(m.txn, names)}</td>"
            f'<td class="lv-st-{esc(m.state)}">{esc(m.state)}</td>'
            f"<td>{esc('–' if age is None else fmt_s(age))}</td><td>{esc(lease)}</td>"
            f"<td>{esc(_ago(m.created, now))}</td><td class=\"lv-muted\">{esc(m.client)}</td>"
            f"<td>{_waits(m.predecessors, names)}</td></tr>")
    return (head + '<table class="lv-markers-table"><thead><tr><th>marker</th><th>owner</th><th>state</th>'
            "<th>lease age</th><th>lease</th><th>placed</th><th>client</th><th>waits behind</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>")


def global_dag_html(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    head = '<div class="lv-sec">Global dependency DAG</div>'
    if scan is None:
        return head
    names = _names(scan, names)
    owners = scan.owners
    if not owners:
        return head + '<div class="lv-dag-empty lv-muted">no transactions hold markers</div>'
    state_of = {m.txn: ("live" if m.state == "live" else "expired") for m in scan.markers}
    nodes = [GNode(t, txn_label(t, names), state_of.get(t, "pending"), tooltip=t) for t in owners]
    edges = [GEdge(e.src, e.dst, e.label, "pending", e.cycle) for e in scan.edges]
    attrs = f'data-edges="{len(edges)}" data-cycle="{str(scan.has_cycle).lower()}"'
    stale = (f'<div class="lv-muted">{scan.stale_edges} predecessor entr{"y" if scan.stale_edges == 1 else "ies"} '
             "point at markers resolved since</div>" if scan.stale_edges else "")
    if not edges:
        return (head + f'<div class="lv-dag-body" {attrs}><div class="lv-dag-empty lv-muted">'
                f"{len(owners)} transaction(s) hold markers; none waits behind another</div>{stale}</div>")
    note = "a cycle: one of its transactions will shift its markers" if scan.has_cycle else ""
    return head + f'<div class="lv-dag-body" {attrs}>{graph_html(nodes, edges, note=note)}{stale}</div>'


def gvl_html(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    head = '<div class="lv-sec">Global version log (LV[I])</div>'
    if scan is None:
        return head
    g = scan.gvl
    if not g.in_use:
        msg = ("not in use (no transaction validated with LV[I] yet)" if g.status == "empty"
               else f"unreadable: {g.error}")
        return head + f'<div class="lv-gvl-none lv-muted" data-status="{esc(g.status)}">{esc(msg)}</div>'
    names = _names(scan, names)
    tables = versions_text(sorted(g.tables.items()), "no tables")
    rows = "".join(
        f'<tr class="lv-gvl-row" data-version="{h["version"]}"><td>{h["version"]}</td>'
        f'<td>{txn_ref(h["txn"], names)}</td><td>{esc(_ago(h["ts"], scan.at))}</td>'
        f'<td>{esc(versions_text(sorted(h["tables"].items())))}</td></tr>'
        for h in g.history)
    hist = ('<table class="lv-gvl-table"><thead><tr><th>version</th><th>by</th><th>published</th><th>tables</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>" if rows else "")
    return (head + f'<div class="lv-gvl" data-status="in use" data-head="{g.head}">head: global version '
            f"<b>{g.head}</b> by {txn_ref(g.txn, names)}, {esc(_ago(g.ts, scan.at))}: "
            f"{esc(tables)}</div>{hist}")


def stuck_html(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    head = '<div class="lv-sec">Expired or stuck transactions</div>'
    if scan is None:
        return head
    names = _names(scan, names)
    if not scan.stuck:
        return head + '<div class="lv-no-stuck lv-muted" data-stuck="0">none</div>'
    rows = "".join(
        f'<tr class="lv-stuck-row" data-txn="{esc(s.txn)}" data-decided="{str(s.decided).lower()}">'
        f"<td>{txn_ref(s.txn, names)}</td>"
        f"<td>{esc(versions_text(s.markers, '–'))}</td>"
        f"<td>{esc('–' if s.expired_for_s is None else fmt_s(s.expired_for_s))}</td><td>{esc(s.why)}</td></tr>"
        for s in scan.stuck)
    return (head + f'<table class="lv-stuck-table" data-stuck="{len(scan.stuck)}"><thead><tr><th>transaction</th>'
            "<th>markers</th><th>expired for</th><th>what recover does</th></tr></thead><tbody>"
            + rows + "</tbody></table>")


def inspector_parts(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> dict[str, str]:
    """Every part's HTML (see :data:`INSPECTOR_PARTS`)."""
    return {"summary": summary_html(scan), "tables": tables_html(scan), "live-markers": markers_html(scan, names),
            "global-dag": global_dag_html(scan, names), "gvl": gvl_html(scan, names), "stuck": stuck_html(scan, names)}


def inspector_html(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    """The whole scan as static HTML."""
    parts = inspector_parts(scan, names)
    body = "".join(f'<div class="lv-{k}">{v}</div>' for k, v in parts.items())
    return f'{CSS}<div class="lv-inspector lv-static">{body}</div>'


def inspector_text(scan: LakehouseScan | None, names: dict[str, str] | None = None) -> str:
    """The whole scan as plain text."""
    if scan is None:
        return "Lakehouse inspector: not scanned yet (call .refresh())"
    names = _names(scan, names)
    out = [f"Lakehouse {scan.url}: {len(scan.tables)} table(s), {len(scan.markers)} pending marker(s)"]
    for t in scan.tables:
        out.append(f"  table {t.name:<20} version {t.version}  checkpoint {t.checkpoint}  markers {t.markers}"
                   + (f"  ERROR {t.error}" if t.error else ""))
    for m in sorted(scan.markers, key=lambda m: (m.table, m.version)):
        exp = m.expires_in(scan.at)
        lease = "no lease" if exp is None else f"lease {'expires in' if exp >= 0 else 'expired'} {fmt_s(abs(exp))}"
        out.append(f"  marker {m.table}@{m.version} owner {txn_label(m.txn, names)} [{m.state}] {lease}")
    for e in scan.edges:
        out.append(f"  edge {txn_label(e.src, names)} -> {txn_label(e.dst, names)} at {e.label}"
                   + (" (cycle)" if e.cycle else ""))
    g = scan.gvl
    out.append(f"  global version log: head {g.head} by {txn_label(g.txn, names) if g.txn else '–'}" if g.in_use
               else f"  global version log: not in use ({g.status})")
    for h in g.history:
        out.append(f"    global version {h['version']} by {txn_label(h['txn'], names) if h['txn'] else '–'}")
    for s in scan.stuck:
        out.append(f"  stuck {txn_label(s.txn, names)}: {s.why}")
    out.extend(f"  error: {e}" for e in scan.errors)
    return "\n".join(out)


__all__ = ["INSPECTOR_PARTS", "global_dag_html", "gvl_html", "inspector_html", "inspector_parts", "inspector_text",
           "markers_html", "stuck_html", "summary_html", "tables_html", "txn_label", "txn_ref"]
