"""What the lakehouse inspector shows, gathered in one pass: tables, live markers, the global DAG,
the global version log, and transactions that look stuck.

:func:`scan_lakehouse` does the I/O through ``lv_core`` (``Lakehouse.scan_markers``: one LIST of the
warehouse, per table a GET of ``_last_checkpoint`` plus one GET per version after it; one LIST of
the transaction folders; the global version log); everything else here is plain data and pure
functions.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from lv_core.errors import LvError
from lv_core.protocol.dag import cycle_edges
from lv_core.protocol.scan import MAX_VERSIONS, LiveMarker, MarkerScan, transaction_ids


@dataclass
class TableInfo:
    name: str
    version: int | None = None  # latest version (markers included)
    checkpoint: int | None = None
    markers: int = 0  # pending markers after the checkpoint
    truncated: bool = False  # more than MAX_VERSIONS versions after the checkpoint: not all scanned
    error: str = ""


@dataclass
class GlobalEdge:
    src: str
    dst: str
    table: str
    version: int
    cycle: bool = False

    @property
    def label(self) -> str:
        return f"{self.table}@{self.version}"


@dataclass
class StuckTxn:
    """A transaction whose lease expired while it still holds markers or leftover objects."""

    txn: str
    why: str
    markers: list[tuple[str, int]] = field(default_factory=list)
    decided: bool = False
    expired_for_s: float | None = None


@dataclass
class GvlInfo:
    """The global version log (LV[I]): "empty" (not in use), "in use", "error"."""

    status: str = "empty"
    head: int | None = None
    tables: dict[str, int] = field(default_factory=dict)
    txn: str | None = None
    ts: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # newest first, head excluded
    error: str = ""

    @property
    def in_use(self) -> bool:
        return self.status == "in use"


@dataclass
class LakehouseScan:
    url: str
    at: float
    tables: list[TableInfo] = field(default_factory=list)
    markers: list[LiveMarker] = field(default_factory=list)
    edges: list[GlobalEdge] = field(default_factory=list)
    stale_edges: int = 0  # predecessor entries pointing at markers that are resolved by now
    stuck: list[StuckTxn] = field(default_factory=list)
    gvl: GvlInfo = field(default_factory=GvlInfo)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: names other clients gave their transactions, as their markers or leases carry them (txn -> name)
    names: dict[str, str] = field(default_factory=dict)

    @property
    def owners(self) -> list[str]:
        """Transactions holding live markers, in order of first appearance."""
        return list(dict.fromkeys(m.txn for m in self.markers))

    @property
    def has_cycle(self) -> bool:
        return any(e.cycle for e in self.edges)

    def fingerprint(self) -> tuple[Any, ...]:
        """What the inspector shows apart from clocks (scan time, lease ages): equal fingerprints mean
        nothing changed in the lakehouse as far as the inspector can tell (the live poll backs off)."""
        return (tuple((t.name, t.version, t.checkpoint, t.markers, t.error) for t in self.tables),
                tuple((m.table, m.version, m.txn, m.state, m.predecessors) for m in self.markers),
                tuple((s.txn, s.decided, tuple(s.markers)) for s in self.stuck),
                (self.gvl.status, self.gvl.head, self.gvl.error), tuple(self.errors), tuple(sorted(self.names.items())))


# ------------------------------------------------------------------------------- pure helpers
def redact_url(url: str) -> str:
    """The URL without user info or query (``s3://key:secret@host/...`` -> ``s3://***@host/...``)."""
    url = re.sub(r"^([a-zA-Z][\w+.-]*://)[^/@]*@", r"\1***@", url)
    return url.split("?", 1)[0]


def global_edges(markers: list[LiveMarker]) -> tuple[list[GlobalEdge], int]:
    """The DAG from the markers' predecessor lists: edges to markers still pending, and how many are stale."""
    pending = {(m.table, m.version): m.txn for m in markers}
    seen: dict[tuple[str, str, str, int], GlobalEdge] = {}
    stale = 0
    for m in markers:
        for dst, table, version in m.predecessors:
            if pending.get((table, version)) != dst:
                stale += 1
                continue
            seen.setdefault((m.txn, dst, table, version), GlobalEdge(m.txn, dst, table, version))
    edges = list(seen.values())
    on_cycle = cycle_edges((e.src, e.dst) for e in edges)
    for e in edges:
        e.cycle = (e.src, e.dst) in on_cycle
    return edges, stale


# ------------------------------------------------------------------------------- I/O
def _gvl_info(lh: Any, history: int) -> GvlInfo:
    try:
        head = lh.global_state()
        if head.version < 0:
            return GvlInfo("empty")
        out = GvlInfo("in use", head.version, dict(head.tables), head.txn, head.ts)
        for v in range(head.version - 1, max(-1, head.version - 1 - history), -1):
            s = lh.global_state(v)
            out.history.append({"version": s.version, "txn": s.txn, "ts": s.ts, "tables": dict(s.tables)})
        return out
    except Exception as e:  # shown to the user, never raised from a widget
        return GvlInfo("error", error=f"{type(e).__name__}: {e}")


def scan_lakehouse(lh: Any, *, now: float | None = None, history: int = 5,
                   max_versions: int = MAX_VERSIONS) -> LakehouseScan:
    """Scan ``lh`` (a :class:`lv_core.Lakehouse`) for the inspector. Errors are collected, not raised."""
    t0 = time.monotonic()
    now = time.time() if now is None else now
    scan = LakehouseScan(redact_url(str(getattr(lh, "url", ""))), now)
    try:
        found = lh.scan_markers(now=now, decisions=True, max_versions=max_versions)
    except LvError as e:
        scan.errors.append(f"listing tables failed: {e}")
        found = []
    for tm in found:
        for m in tm.markers:
            name = getattr(m, "name", "")  # the owner's name, where markers carry it
            if name:
                scan.names.setdefault(m.txn, str(name))
        info = TableInfo(tm.table, tm.version, tm.checkpoint, len(tm.markers), tm.truncated, "; ".join(tm.errors))
        scan.tables.append(info)
        if info.error:
            scan.errors.append(f"{tm.table}: {info.error}")
        scan.markers.extend(tm.markers)
    scan.edges, scan.stale_edges = global_edges(scan.markers)

    # Stuck: expired owners of markers, and transaction folders whose lease ran out.
    by_txn: dict[str, StuckTxn] = {}
    for m in scan.markers:
        if m.state == "live":
            continue
        s = by_txn.setdefault(m.txn, StuckTxn(m.txn, "", decided=m.state == "decided",
                                              expired_for_s=None if m.lease_expires is None else now - m.lease_expires))
        s.markers.append((m.table, m.version))
    for s in by_txn.values():
        s.why = ("lease expired; its commit was decided: recover rolls it forward" if s.decided
                 else "lease expired while holding markers: recover frees them")
    leftovers = MarkerScan(lh.store, now=now, decisions=True)  # transactions holding no marker
    try:
        folders = transaction_ids(lh.store)
    except LvError as e:
        scan.errors.append(f"listing transactions failed: {e}")
        folders = set()
    holders = {m.txn for m in scan.markers}
    for txn in sorted(folders - holders):
        try:
            body = leftovers.lease(txn)
        except LvError:
            body = None
        expires = body["expires"] if body is not None else None
        if body is not None and body.get("name"):  # the owner's name, where leases carry it
            scan.names.setdefault(txn, str(body["name"]))
        if expires is None or expires < now:
            by_txn[txn] = StuckTxn(txn, "leftover objects (sublog, lease or decision) of a finished or crashed "
                                   "transaction: recover cleans them after the lease grace period",
                                   decided=leftovers.decided(txn),
                                   expired_for_s=None if expires is None else now - expires)
    scan.stuck = sorted(by_txn.values(), key=lambda s: s.txn)
    scan.gvl = _gvl_info(lh, history)
    scan.elapsed_s = time.monotonic() - t0
    return scan


__all__ = ["GlobalEdge", "GvlInfo", "LakehouseScan", "LiveMarker", "StuckTxn", "TableInfo", "cycle_edges",
           "global_edges", "scan_lakehouse"]
