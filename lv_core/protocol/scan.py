"""Reading a warehouse: the tables it holds, the markers pending in them, and their logs.

The one live-marker scan: recovery (:mod:`lv_core.protocol.recovery`), ``Lakehouse.scan_markers``
(``%lv markers``) and the lakehouse inspector all use :class:`MarkerScan`. Cost per table: a GET of
``_last_checkpoint`` and one GET per version after it (each version is classified from those bytes),
plus one GET of the lease per transaction holding markers (and, with ``decisions=True``, one HEAD of
its commit decision once its lease ran out).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from lv_core.delta.actions import AddFile, RemoveFile, decode_commit
from lv_core.delta.log import DeltaLog
from lv_core.errors import DeltaLogError, LvError, NotFound
from lv_core.protocol import layout
from lv_core.protocol.dag import edges_from_json
from lv_core.protocol.edges import TxnEdges, read_edges
from lv_core.protocol.lease import read_lease
from lv_core.protocol.markers import VersionState, read_version
from lv_core.storage.base import ObjectStore

MAX_VERSIONS = 2000  # default bound on the versions read per table after its last checkpoint


def list_tables(store: ObjectStore) -> list[str]:
    """Names of the Delta tables directly under the warehouse root (one LIST)."""
    names: set[str] = set()
    for meta in store.list(""):
        parts = meta.key.split("/")
        if len(parts) >= 3 and parts[1] == "_delta_log" and not parts[0].startswith(("_", ".")):
            names.add(parts[0])
    return sorted(names)


def transaction_ids(store: ObjectStore) -> set[str]:
    """Transactions that have objects (lease, sublog, decision) under ``_lakevilla/txns/`` (one LIST)."""
    return {rest.split("/", 1)[0] for rest in (meta.key[len(layout.TXNS):] for meta in store.list(layout.TXNS))
            if "/" in rest}


@dataclass
class LiveMarker:
    """A pending marker found in a table's log, with its owner's lease."""

    table: str
    version: int
    txn: str
    client: str = ""
    created: float = 0.0
    lease_expires: float | None = None  # the heartbeat's expiry, else the marker's own; None: neither
    renewed: float | None = None
    state: str = "live"  # "live" | "expired" | "decided" (expired, commit decided: recover rolls it forward)
    predecessors: tuple[tuple[str, str, int], ...] = ()  # (txn, table, version) it waits behind
    #: the version as read (etag included): what recovery frees or overwrites, if unchanged since
    version_state: VersionState | None = field(default=None, repr=False, compare=False)
    name: str = ""  # the name its owner gave the transaction ("" when unnamed or not recorded)

    def lease_age(self, now: float) -> float | None:
        """Seconds since the owner last renewed its lease (or, before its first renewal, since it
        began; None when neither is known)."""
        return None if self.renewed is None else max(0.0, now - self.renewed)

    def expires_in(self, now: float) -> float | None:
        """Seconds until the lease expires (negative: expired that long ago)."""
        return None if self.lease_expires is None else self.lease_expires - now


@dataclass
class TableMarkers:
    """What a scan found in one table."""

    table: str
    version: int | None = None  # latest version (markers included)
    checkpoint: int | None = None
    markers: list[LiveMarker] = field(default_factory=list)  # pending markers after the checkpoint
    truncated: bool = False  # more versions after the checkpoint than the scan's bound: not all read
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LogEntry:
    """One version of a table's Delta log, as LakeVilla sees it."""

    version: int
    kind: str  # "marker" (pending), "freed", "commit"
    txn: str | None
    adds: int
    removes: int


class MarkerScan:
    """Scan tables for pending markers, one table at a time; each owner's lease is read once.

    A marker counts as expired when its owner's heartbeat (or, without one, the marker's own lease)
    ran out before ``now``. A heartbeat that cannot be read leaves the marker live (nobody acts on
    it) and is noted in the table's errors.
    """

    def __init__(self, store: ObjectStore, *, now: float | None = None, decisions: bool = False) -> None:
        self.store = store
        self.now = time.time() if now is None else now
        self.decisions = decisions  # tell "decided" apart from "expired" (one HEAD per expired owner)
        self._leases: dict[str, dict[str, Any] | None | LvError] = {}
        self._decided: dict[str, bool] = {}
        self._edges: dict[str, TxnEdges | None] = {}

    def lease(self, txn: str) -> dict[str, Any] | None:
        """``txn``'s heartbeat (None if it has none), read once per scan.

        Raises:
            LvError: it could not be read.
        """
        if txn not in self._leases:
            try:
                self._leases[txn] = read_lease(self.store, txn)
            except LvError as e:
                self._leases[txn] = e
        found = self._leases[txn]
        if isinstance(found, LvError):
            raise found
        return found

    def edges(self, txn: str) -> TxnEdges | None:
        """``txn``'s exposed dependency edges (None if it has none), read once per scan."""
        if txn not in self._edges:
            self._edges[txn] = read_edges(self.store, txn)
        return self._edges[txn]

    def decided(self, txn: str) -> bool:
        """True when ``txn`` wrote a commit decision (read once per scan)."""
        if txn not in self._decided:
            try:
                self.store.head(layout.decision_key(txn))
                self._decided[txn] = True
            except NotFound:
                self._decided[txn] = False
        return self._decided[txn]

    def table(self, name: str, *, max_versions: int | None = MAX_VERSIONS) -> TableMarkers:
        """The pending markers of table ``name`` (``max_versions``: bound on versions read; None: all).

        Errors are collected in the result, not raised: an unreadable version is noted and skipped.
        """
        tm = TableMarkers(name)
        log = DeltaLog(self.store, name)
        try:
            lc = log.read_last_checkpoint()
            tm.checkpoint = int(lc["version"]) if lc else None
            v = start = tm.checkpoint + 1 if tm.checkpoint is not None else 0
            latest = tm.checkpoint
            while True:
                if max_versions is not None and v - start >= max_versions:
                    tm.truncated = True
                    latest = log.latest_version_by_probe(latest)
                    break
                try:
                    st = read_version(self.store, name, v)
                except NotFound:
                    break
                except DeltaLogError as e:
                    tm.errors.append(f"{type(e).__name__}: {e}")
                else:
                    if st.pending and st.txn:
                        tm.markers.append(self._marker(tm, st))
                latest = v
                v += 1
            tm.version = latest
        except (LvError, ValueError, KeyError, TypeError) as e:
            tm.errors.append(f"{type(e).__name__}: {e}")
        return tm

    def _marker(self, tm: TableMarkers, st: VersionState) -> LiveMarker:
        assert st.txn is not None
        mi = st.marker
        # Without a heartbeat object (a transaction writes one only once it needs a renewal), the
        # marker's own expiry counts, promised when the transaction began.
        expires: float | None = mi.lease_expires if mi is not None else None
        renewed: float | None = mi.created if mi is not None and mi.created else None
        unreadable = False
        try:
            body = self.lease(st.txn)
        except LvError as e:
            tm.errors.append(f"lease of {st.txn} unreadable: {e}")
            body, unreadable = None, True
        if body is not None:
            expires = body["expires"]
            r = body.get("renewed")
            renewed = float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else None
        state = "live" if unreadable or (expires is not None and expires >= self.now) else "expired"
        if state == "expired" and self.decisions and self.decided(st.txn):
            state = "decided"
        edges = edges_from_json(st.txn, mi.predecessors if mi else ())  # written before edges objects
        exposed = self.edges(st.txn)
        if exposed is not None:
            edges += [e for e in exposed.edges if e not in edges]
        preds = tuple((e.dst, e.table, e.version) for e in edges)
        return LiveMarker(tm.table, st.version, st.txn, mi.client if mi else "", mi.created if mi else 0.0,
                          expires, renewed, state, preds, st, mi.name if mi else "")


def reserved_tail(store: ObjectStore, table: str, latest: int) -> int:
    """The highest version reserved by markers just past the log's tail ``latest`` (``latest`` if none):
    one GET per reserved version + 1."""
    v = latest
    while True:
        try:
            store.head(layout.marker_key(table, v + 1))
        except NotFound:
            return v
        v += 1


def log_entries(store: ObjectStore, table: str, first: int, last: int) -> list[LogEntry]:
    """Versions ``first`` .. ``last`` of ``table``'s log (one GET each), oldest first."""
    out = []
    for v in range(first, last + 1):
        st = read_version(store, table, v)
        acts = decode_commit(st.raw) if st.kind == "commit" else []
        out.append(LogEntry(v, st.kind, st.txn, sum(isinstance(a, AddFile) for a in acts),
                            sum(isinstance(a, RemoveFile) for a in acts)))
    return out


__all__ = ["MAX_VERSIONS", "LiveMarker", "LogEntry", "MarkerScan", "TableMarkers", "list_tables", "log_entries",
           "reserved_tail", "transaction_ids"]
