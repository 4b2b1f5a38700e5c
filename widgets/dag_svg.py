"""Dependency DAGs as Graphviz SVG (inline in HTML), with a text fallback when ``dot`` is missing.

Edges are labelled ``table@version`` and carry CSS classes (``lv-edge-waiting``,
``lv-edge-pending``, ``lv-edge-resolved``, ``lv-edge-cycle``, ``lv-edge-inverted``); nodes carry
``lv-node-<state>`` (and ``lv-node-self`` for the transaction the graph is about), so pages and
tests can find them.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from widgets.model import STATE_COLOURS, TxnView

NODE_FILL = {"active": "#dbe9f6", "waiting": "#fdebd0", "committing": "#e8e1f5", "validating": "#e8e1f5",
             "committed": "#dcefdc", "aborted": "#f8d7d7", "pending": "#f2f2f2", "live": "#dbe9f6",
             "expired": "#f8d7d7"}
EDGE_STYLE = {
    "waiting": {"color": "#c77700", "fontcolor": "#c77700", "penwidth": "2.2"},
    "pending": {"color": "#444444", "fontcolor": "#444444"},
    "resolved": {"color": "#9e9e9e", "fontcolor": "#8a8a8a", "style": "dashed"},
}
CYCLE = {"color": "#d32f2f", "fontcolor": "#d32f2f", "penwidth": "2.4"}


class GraphvizUnavailable(RuntimeError):
    """The ``dot`` executable (or the graphviz package) is missing or failed."""


@dataclass(frozen=True)
class GNode:
    id: str
    label: str
    state: str = "pending"
    focus: bool = False
    tooltip: str = ""


@dataclass(frozen=True)
class GEdge:
    src: str
    dst: str
    label: str
    status: str = "pending"  # "pending" | "waiting" | "resolved"
    cycle: bool = False
    inverted: bool = False


def _edge_attrs(e: GEdge) -> dict[str, str]:
    attrs = dict(EDGE_STYLE.get(e.status, EDGE_STYLE["pending"]))
    classes = ["lv-edge", f"lv-edge-{e.status}"]
    if e.cycle:
        attrs.update(CYCLE)
        classes.append("lv-edge-cycle")
    if e.inverted:
        attrs["style"] = "dotted"
        classes.append("lv-edge-inverted")
    attrs["class"] = " ".join(classes)
    return attrs


def dot_source(nodes: Sequence[GNode], edges: Sequence[GEdge], *, note: str = "") -> str:
    """The Graphviz source of a DAG (deterministic: equal graphs give equal sources)."""
    import graphviz

    ids = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    g = graphviz.Digraph(graph_attr={"rankdir": "LR", "bgcolor": "transparent", "fontname": "Helvetica",
                                     "fontsize": "10", "labelloc": "b", "nodesep": "0.35", "ranksep": "0.6",
                                     "pad": "0.1"},
                         node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                    "fontsize": "11", "height": "0.3"},
                         edge_attr={"fontname": "Helvetica", "fontsize": "10", "arrowsize": "0.7"})
    for n in nodes:
        g.node(ids[n.id], label=graphviz.escape(n.label), tooltip=graphviz.escape(n.tooltip or n.id),
               fillcolor=NODE_FILL.get(n.state, "#f2f2f2"), color=STATE_COLOURS.get(n.state, "#777777"),
               penwidth="2.2" if n.focus else "1",
               **{"class": f"lv-node lv-node-{n.state}" + (" lv-node-self" if n.focus else "")})
    for e in edges:
        if e.src not in ids or e.dst not in ids:
            continue
        label = e.label + (" (shifted)" if e.inverted else "")
        g.edge(ids[e.src], ids[e.dst], label=graphviz.escape(label), **_edge_attrs(e))
    if note:
        g.attr(label=graphviz.escape(note))
    return g.source


@functools.lru_cache(maxsize=64)
def _pipe(source: str) -> str:
    import graphviz

    try:
        svg = graphviz.Source(source).pipe(format="svg").decode("utf-8")
    except (graphviz.ExecutableNotFound, graphviz.CalledProcessError, OSError) as e:
        raise GraphvizUnavailable(str(e)) from None
    return clean_svg(svg)


def clean_svg(svg: str) -> str:
    """Inline-ready SVG: no XML prolog/doctype/comments, plain hyphens, scales to its container."""
    svg = svg[svg.find("<svg"):] if "<svg" in svg else svg
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = svg.replace("&#45;", "-")
    return re.sub(r"^<svg\b", '<svg class="lv-dag-svg" style="max-width:100%;height:auto"', svg, count=1)


def graph_svg(nodes: Sequence[GNode], edges: Sequence[GEdge], *, note: str = "") -> str:
    """The DAG as an inline ``<svg>`` element (cached by graph content).

    Raises:
        GraphvizUnavailable: ``dot`` is not installed or failed.
    """
    try:
        source = dot_source(nodes, edges, note=note)
    except ImportError as e:  # the graphviz package itself is missing
        raise GraphvizUnavailable(str(e)) from None
    return _pipe(source)


def graph_text_html(nodes: Iterable[GNode], edges: Sequence[GEdge], *, note: str = "") -> str:
    """Fallback without Graphviz: the edges as a list."""
    names = {n.id: n.label for n in nodes}
    items = "".join(
        f'<li class="lv-edge lv-edge-{html.escape(e.status)}{" lv-edge-cycle" if e.cycle else ""}">'
        f"{html.escape(names.get(e.src, e.src))} → {html.escape(names.get(e.dst, e.dst))} "
        f"<code>{html.escape(e.label)}</code> ({html.escape(e.status)}{', cycle' if e.cycle else ''})</li>"
        for e in edges)
    extra = f"<div>{html.escape(note)}</div>" if note else ""
    return f'<ul class="lv-dag-text">{items}</ul>{extra}'


def graph_html(nodes: Sequence[GNode], edges: Sequence[GEdge], *, note: str = "") -> str:
    """SVG when Graphviz works, else the text fallback."""
    try:
        return graph_svg(nodes, edges, note=note)
    except GraphvizUnavailable:
        return graph_text_html(nodes, edges, note=note)


def txn_graph(view: TxnView) -> tuple[list[GNode], list[GEdge], str]:
    """Nodes, edges and the shift note of one transaction's DAG view, with the other live
    transactions a marker scan found around it (waiting for it, or it for them)."""
    dag = view.dag
    states = {**view.live_nodes, **dag.nodes}
    order = [view.txn] + sorted(n for n in states if n != view.txn)
    nodes = [GNode(n, view.label(n), view.state if n == view.txn else states.get(n, "pending"),
                   focus=n == view.txn, tooltip=n) for n in order]
    edges = [GEdge(e.src, e.dst, e.label, e.status, e.in_cycle, e.inverted) for e in dag.edges]
    own = {(e.src, e.dst, e.label) for e in dag.edges}
    if not view.done:  # a scan is a snapshot of live markers: only while this transaction runs
        edges += [GEdge(e.src, e.dst, e.label, "waiting" if e.dst == view.txn else "pending", e.in_cycle)
                  for e in view.live_edges if (e.src, e.dst, e.label) not in own]
    note = "; ".join(f"marker shift ({s.reason}): " + ", ".join(f"{t} @{a} → @{b}" for t, a, b in s.moves)
                     for s in dag.shifts)
    return nodes, edges, note


def txn_dag_html(view: TxnView) -> str:
    """The DAG around one transaction as HTML (SVG, or text without Graphviz); alone when it has no edges."""
    nodes, edges, note = txn_graph(view)
    if not edges:
        note = note or "no dependencies: no other transaction's pending marker comes before or after its own"
        return f'<div class="lv-dag-empty">{graph_html(nodes[:1], [], note=note)}</div>'
    return graph_html(nodes, edges, note=note)


__all__ = ["GEdge", "GNode", "GraphvizUnavailable", "clean_svg", "dot_source", "graph_html", "graph_svg",
           "graph_text_html", "txn_dag_html", "txn_graph"]
