"""What the lakehouse inspector shows, gathered in one pass: tables, live markers, the global DAG,
the global version log, and transactions that look stuck.

:func:`scan_lakehouse` does the I/O (through ``lv_core``; one LIST of the warehouse, one of the
transaction folders, and per table a GET of ``_last_checkpoint`` plus one GET per version after
it); everything else here is plain data and pure functions.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from lv_core.delta.log import DeltaLog
from lv_core.errors import LvError, NotFound
from lv_core.protocol import layout
from lv_core.protocol.dag import cycle_edges
from lv_core.protocol.lease import read_lease
from lv_core.protocol.markers import read_version

MAX_VERSIONS = 2000  # versions read per table after its last checkpoint (a safety bound)


@dataclass
class TableInfo:
    name: str
    version: int | None = None  # latest version (markers included)
    checkpoint: int | None = None
    markers: int = 0  # pending markers after the checkpoint
    truncated: bool = False  # more than MAX_VERSIONS versions after the checkpoint: not all scanned
    error: str = ""


@dataclass
class LiveMarker:
    """A pending marker found in a table's log."""

    table: str
    version: int
    txn: str
    client: str = ""
    created: float = 0.0
    lease_expires: float | None = None
    renewed: float | None = None
    state: str = "live"  # "live" | "expired" | "decided" (expired, commit decided: recover rolls it forward)
    predecessors: tuple[tuple[str, str, int], ...] = ()  # (txn, table, version) it waits behind

    def lease_age(self, now: float) -> float | None:
        """Seconds since the owner last renewed its lease (None without a lease object)."""
        return None if self.renewed is None else max(0.0, now - self.renewed)

    def expires_in(self, now: float) -> float | None:
        """Seconds until the lease expires (negative: expired that long ago)."""
        return None if self.lease_expires is None else self.lease_expires - now


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
    """The global version log (LV[I]): "absent" (module missing), "empty" (not in use), "in use", "error"."""

    status: str = "absent"
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

    @property
    def owners(self) -> list[str]:
        """Transactions holding live markers, in order of first appearance."""
        return list(dict.fromkeys(m.txn for m in self.markers))

    @property
    def has_cycle(self) -> bool:
        return any(e.cycle for e in self.edges)


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
def _scan_table(store: Any, name: str, max_versions: int) -> tuple[TableInfo, list[tuple[int, Any]]]:
    info = TableInfo(name)
    found: list[tuple[int, Any]] = []
    try:
        lc = DeltaLog(store, name).read_last_checkpoint()
        info.checkpoint = int(lc["version"]) if lc else None
        v = start = (info.checkpoint + 1) if info.checkpoint is not None else 0
        latest = info.checkpoint
        while True:
            if v - start >= max_versions:
                info.truncated = True
                latest = DeltaLog(store, name).latest_version_by_probe(latest)
                break
            try:
                st = read_version(store, name, v)
            except NotFound:
                break
            latest = v
            if st.pending and st.txn:
                found.append((v, st))
            v += 1
        info.version = latest
    except (LvError, ValueError, KeyError, TypeError) as e:
        info.error = f"{type(e).__name__}: {e}"
    info.markers = len(found)
    return info, found


def _gvl_info(store: Any, history: int) -> GvlInfo:
    try:
        from lv_core.protocol import gvl as gvl_mod  # LV[I]: may not exist in this version
    except ImportError:
        return GvlInfo("absent")
    try:
        log = gvl_mod.GlobalLog(store)
        head = log.head()
        if head.version < 0:
            return GvlInfo("empty")
        out = GvlInfo("in use", head.version, dict(head.tables), head.txn, head.ts)
        for v in range(head.version - 1, max(-1, head.version - 1 - history), -1):
            s = log.at(v)
            out.history.append({"version": s.version, "txn": s.txn, "ts": s.ts, "tables": dict(s.tables)})
        return out
    except Exception as e:  # noqa: BLE001 - shown to the user, never raised from a widget
        return GvlInfo("error", error=f"{type(e).__name__}: {e}")


def _exists(store: Any, key: str) -> bool:
    try:
        store.head(key)
        return True
    except NotFound:
        return False


def scan_lakehouse(lh: Any, *, now: float | None = None, history: int = 5,
                   max_versions: int = MAX_VERSIONS) -> LakehouseScan:
    """Scan ``lh`` (a :class:`lv_core.Lakehouse`) for the inspector. Errors are collected, not raised."""
    t0 = time.monotonic()
    now = time.time() if now is None else now
    store = lh.store
    scan = LakehouseScan(redact_url(str(getattr(lh, "url", ""))), now)
    try:
        names = lh.list_tables()
    except LvError as e:
        scan.errors.append(f"listing tables failed: {e}")
        names = []
    leases: dict[str, dict | None] = {}

    def lease(txn: str) -> dict | None:
        if txn not in leases:
            try:
                leases[txn] = read_lease(store, txn)
            except LvError:
                leases[txn] = None
        return leases[txn]

    decided: dict[str, bool] = {}
    for name in names:
        info, found = _scan_table(store, name, max_versions)
        scan.tables.append(info)
        if info.error:
            scan.errors.append(f"{name}: {info.error}")
        for v, st in found:
            mi = st.marker
            body = lease(st.txn)
            expires = renewed = None
            if body is not None:
                try:
                    expires = float(body.get("expires", 0.0))
                    renewed = float(body["renewed"]) if "renewed" in body else None
                except (TypeError, ValueError):
                    expires = 0.0
            elif mi is not None:
                expires = mi.lease_expires
            state = "live" if expires is not None and expires >= now else "expired"
            if state == "expired":
                if st.txn not in decided:
                    decided[st.txn] = _exists(store, layout.decision_key(st.txn))
                if decided[st.txn]:
                    state = "decided"
            preds = tuple((str(p.get("txn")), str(p.get("table")), int(p.get("version", -1)))
                          for p in (mi.predecessors if mi else ()) if isinstance(p, dict) and "txn" in p)
            scan.markers.append(LiveMarker(name, v, st.txn, mi.client if mi else "", mi.created if mi else 0.0,
                                           expires, renewed, state, preds))
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
    try:
        folders = {meta.key[len(layout.TXNS):].split("/", 1)[0] for meta in store.list(layout.TXNS)
                   if "/" in meta.key[len(layout.TXNS):]}
    except LvError as e:
        scan.errors.append(f"listing transactions failed: {e}")
        folders = set()
    holders = {m.txn for m in scan.markers}
    for txn in sorted(folders - holders):
        body = lease(txn)
        try:
            expires = float(body.get("expires", 0.0)) if body is not None else None
        except (TypeError, ValueError):
            expires = 0.0
        if expires is None or expires < now:
            by_txn[txn] = StuckTxn(txn, "leftover objects (sublog, lease or decision) of a finished or crashed "
                                   "transaction: recover cleans them after the lease grace period",
                                   decided=_exists(store, layout.decision_key(txn)),
                                   expired_for_s=None if expires is None else now - expires)
    scan.stuck = sorted(by_txn.values(), key=lambda s: s.txn)
    scan.gvl = _gvl_info(store, history)
    scan.elapsed_s = time.monotonic() - t0
    return scan


__all__ = ["GlobalEdge", "GvlInfo", "LakehouseScan", "LiveMarker", "StuckTxn", "TableInfo", "cycle_edges",
           "global_edges", "scan_lakehouse"]
