"""The other live transactions around one transaction, from a marker scan of the tables it holds.

A transaction's own events only tell whom *it* waits for. Who waits for *it* (and whom those wait
for) is written in the tables' Delta logs: every pending marker names its owner and, with LV[CT],
the markers it waits behind. :func:`neighbourhood` turns a scan (``Lakehouse.scan_markers``) into
the part of the global DAG connected to the transaction; :func:`scan_around` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from lv_core.errors import LvError
from lv_core.protocol.dag import DagEdge, cycle_edges
from lv_core.protocol.scan import LiveMarker, MarkerScan, TableMarkers
from lv_core.storage.base import ObjectStore


@dataclass
class LiveDag:
    """Other transactions' markers and edges around one transaction (``nodes``: txn -> marker state)."""

    nodes: dict[str, str] = field(default_factory=dict)
    edges: list[DagEdge] = field(default_factory=list)
    at: float | None = None
    error: str = ""


def _edges(markers: list[LiveMarker]) -> list[DagEdge]:
    """Edges between pending markers: the predecessors markers name (LV[CT]), else, per table, the
    nearest earlier marker of another transaction (LV[R] commits wait for every earlier marker)."""
    pending = {(m.table, m.version): m.txn for m in markers}
    out: dict[tuple[str, str, str], DagEdge] = {}
    named: set[tuple[str, str]] = set()  # (owner, table) with explicit predecessors
    for m in markers:
        for dst, table, version in m.predecessors:
            if pending.get((table, version)) == dst and dst != m.txn:
                out.setdefault((m.txn, dst, f"{table}@{version}"), DagEdge(m.txn, dst, table, version))
                named.add((m.txn, m.table))
    by_table: dict[str, list[LiveMarker]] = {}
    for m in markers:
        by_table.setdefault(m.table, []).append(m)
    for table, ms in by_table.items():
        ms.sort(key=lambda m: m.version)
        for i, m in enumerate(ms):
            if (m.txn, table) in named:
                continue
            before = next((p for p in reversed(ms[:i]) if p.txn != m.txn), None)
            if before is not None:
                out.setdefault((m.txn, before.txn, f"{table}@{before.version}"),
                               DagEdge(m.txn, before.txn, table, before.version))
    edges = list(out.values())
    on_cycle = cycle_edges((e.src, e.dst) for e in edges)
    for e in edges:
        e.in_cycle = (e.src, e.dst) in on_cycle
    return edges


def neighbourhood(txn: str, markers: Iterable[LiveMarker]) -> LiveDag:
    """The transactions connected to ``txn`` through pending markers (either direction), and their edges."""
    items = list(markers)
    edges = _edges(items)
    adj: dict[str, set[str]] = {}
    for e in edges:
        adj.setdefault(e.src, set()).add(e.dst)
        adj.setdefault(e.dst, set()).add(e.src)
    seen, todo = {txn}, [txn]
    while todo:
        for nxt in adj.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    states = {m.txn: m.state for m in items}
    out = LiveDag({t: states.get(t, "live") for t in seen if t != txn})
    out.edges = [e for e in edges if e.src in seen and e.dst in seen]
    return out


class StoreScanner:
    """``scan_markers`` straight on a warehouse's object store (what a transaction knows of its lakehouse)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def scan_markers(self, tables: Iterable[str], *, now: float | None = None) -> list[TableMarkers]:
        scan = MarkerScan(self.store, now=now)
        return [scan.table(name) for name in tables]


def default_scanner(txn: Any) -> StoreScanner | None:
    """A scanner for a :class:`lv_core.Transaction`: its store without the per-transaction request
    counting (a scan is the widget's work, not the transaction's); None for anything else."""
    inner = getattr(getattr(txn, "store", None), "inner", None)
    return StoreScanner(inner) if isinstance(inner, ObjectStore) else None


def scan_around(lakehouse: Any, txn: str, tables: Iterable[str], now: float) -> LiveDag:
    """Scan ``tables`` of ``lakehouse`` (``scan_markers``) and return the neighbourhood of ``txn``."""
    names = sorted(set(tables))
    if not names:
        return LiveDag(at=now)
    try:
        found = lakehouse.scan_markers(names, now=now)
    except (LvError, OSError) as e:  # shown in the widget, never raised from it
        return LiveDag(at=now, error=f"{type(e).__name__}: {e}")
    dag = neighbourhood(txn, [m for tm in found for m in tm.markers])
    dag.at = now
    return dag


__all__ = ["LiveDag", "StoreScanner", "default_scanner", "neighbourhood", "scan_around"]
