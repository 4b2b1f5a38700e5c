"""Per-Lakehouse cache of table logs: latest-version hints and resolved snapshots.

"Resolved" means every version up to the snapshot's is in the Delta log (final: log files are never
rewritten), so the cached snapshot can be advanced with just the new commits (a few GETs, no LIST).
Versions above the log's tail that are reserved by markers (kept beside the log) are read as empty
and reported: pending markers with their owner, given-up markers the log does not hold yet with ``""``.

Two hints per table: the latest version known to be in the Delta log, and the highest version known
to be reserved by a marker (where marker placement starts).
"""

from __future__ import annotations

import threading
import time

from lv_core import concurrency
from lv_core.delta.actions import Action, decode_commit
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.log import DeltaLog
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.delta.table import validate_table_name
from lv_core.errors import LvError, NotFound, TableNotFound
from lv_core.protocol.markers import VersionState, fill_version, read_version
from lv_core.storage.base import ObjectStore

#: the most versions :meth:`TableLogs.resolved_view` reads at once
_PARALLEL = 8


class LaterSnapshot:
    """The snapshot a commit of ours makes on top of the resolved snapshot below it, replayed when first
    needed (a commit does not wait for it: replaying copies the table's file list)."""

    def __init__(self, base: Snapshot, version: int, actions: list[Action]) -> None:
        self.base, self.version, self.actions = base, version, actions
        self._snap: Snapshot | None = None

    def get(self) -> Snapshot:
        """The snapshot (raises what :func:`replay` raises)."""
        if self._snap is None:
            self._snap = replay(self.base, [(self.version, self.actions)])
        return self._snap


class TableLogs:
    """Latest-version hints and resolved snapshots, shared by the transactions of one Lakehouse."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._latest: dict[str, int] = {}  # in the Delta log
        self._claimed: dict[str, int] = {}  # reserved by a marker (maybe above the log's tail)
        self._resolved: dict[str, Snapshot | LaterSnapshot] = {}
        self._moved: dict[str, bool] = {}  # LV[I] reads: the last look past a global version found a commit
        self._lost_claim: dict[str, float] = {}  # table -> when a marker claim of this process last lost a race

    def require(self, table: str) -> None:
        """Raise TableNotFound (with the tables that do exist) unless ``table`` exists."""
        validate_table_name(table)
        if table in self._latest:
            return
        self.latest_hint(table)

    def latest_hint(self, table: str, store: ObjectStore | None = None) -> int:
        """A version known to exist, advanced by probing (HEADs) from the cached hint.

        ``store``: the (counting) view to make the requests through (default: the shared store)."""
        with self._lock:
            hint = self._latest.get(table)
        try:
            v = DeltaLog(store or self.store, table).latest_version(hint)
        except TableNotFound:
            raise TableNotFound(f"table {table!r} does not exist. Help: create it first, or check the name "
                                "(`list_tables()` shows what exists).") from None
        self.note_latest(table, v)
        return v

    def cached_hint(self, table: str, store: ObjectStore | None = None) -> int:
        """The latest version this process knows of, in the log or reserved by a marker (no request),
        probing the log only when it knows none.

        Marker placement starts from here: put-if-absent finds the next free version by itself, so
        a stale hint costs one failed PUT-create per newer version instead of one HEAD each.
        """
        with self._lock:
            hint = self._latest.get(table)
            claimed = self._claimed.get(table, -1)
        return max(self.latest_hint(table, store) if hint is None else hint, claimed)

    def known_reserved(self, table: str) -> int | None:
        """The latest version this process knows of, in the log or reserved by a marker, without any
        request (None: none known)."""
        with self._lock:
            got = [v for v in (self._latest.get(table), self._claimed.get(table)) if v is not None]
        return max(got) if got else None

    def known_latest(self, table: str) -> int | None:
        """The latest version this process knows of, without any request (None: none known)."""
        with self._lock:
            return self._latest.get(table)

    def resolved_tables(self) -> dict[str, Snapshot]:
        """The cached resolved snapshots (table -> snapshot), a copy."""
        with self._lock:
            return {t: snap for t in list(self._resolved) if (snap := self._cached(t)) is not None}

    def resolved_version(self, table: str) -> int | None:
        """The version of the cached resolved snapshot of ``table`` (None: none cached), without replaying it."""
        with self._lock:
            entry = self._resolved.get(table)
        return None if entry is None else entry.version

    def _cached(self, table: str) -> Snapshot | None:
        """The cached resolved snapshot of ``table`` (replayed now if noted later); the lock is held."""
        entry = self._resolved.get(table)
        if isinstance(entry, LaterSnapshot):
            try:
                entry = self._resolved[table] = entry.get()
            except LvError:  # a cache: the next read goes to the log
                del self._resolved[table]
                return None
        return entry

    def note_latest(self, table: str, version: int) -> None:
        """``version`` is in the table's Delta log."""
        with self._lock:
            if version > self._latest.get(table, -1):
                self._latest[table] = version

    def note_moved(self, table: str, moved: bool) -> None:
        """Whether the last look past the version a global version names found the table moved
        (:mod:`lv_core.txn.current` then reads the global log's head at the same time as it looks)."""
        with self._lock:
            self._moved[table] = moved

    def moved(self, table: str) -> bool:
        """What :meth:`note_moved` last said of ``table`` (False when nothing was noted)."""
        with self._lock:
            return self._moved.get(table, False)

    def note_claim(self, table: str, attempts: int, *, jumped: bool = False) -> None:
        """A marker claim on ``table`` took ``attempts`` tries (more than one: it lost a race); ``jumped``: its
        first try went past claims this process did not know of (a race it would have lost)."""
        if attempts > 1 or jumped:
            with self._lock:
                self._lost_claim[table] = time.monotonic()

    def claims_contended(self, table: str, within_s: float) -> bool:
        """Whether a marker claim of this process on ``table`` lost a race in the last ``within_s``."""
        with self._lock:
            at = self._lost_claim.get(table)
        return at is not None and time.monotonic() - at <= within_s

    def note_claimed(self, table: str, version: int) -> None:
        """``version`` is reserved by a marker (it may not be in the log yet)."""
        with self._lock:
            if version > self._claimed.get(table, -1):
                self._claimed[table] = version

    def resolved_view(self, table: str, upto: int, store: ObjectStore | None = None,
                      seen: dict[int, VersionState] | None = None) -> tuple[Snapshot, dict[int, str]]:
        """The snapshot at ``upto`` with versions the log does not hold yet read as empty, and those
        versions (version -> owner of a pending marker, ``""`` for a given-up marker whose empty commit
        could not be written yet because a version below it is still pending). ``seen`` receives the
        pending markers' states as read (the caller's cycle search need not read them again)."""
        store = store or self.store
        with self._lock:
            cached = self._cached(table)
            hint = self._latest.get(table)
        if cached is not None and cached.version <= upto:
            snap = cached
        else:
            log = DeltaLog(store, table)
            try:
                snap = log.snapshot(upto, method="probe")
            except VersionNotFound:  # the log may end below ``upto``: the rest is reserved by markers
                tail = log.latest_version(hint if hint is not None and hint <= upto else None)
                # (the version may have reached the log since: read it again; still missing: cleaned up)
                snap = log.snapshot(upto if tail >= upto else tail, method="probe")
        pending: dict[int, str] = {}
        commits: list[tuple[int, list[Action]]] = []
        last_resolved: Snapshot = snap
        in_log = True  # every version so far is in the Delta log
        below: bytes | None = None  # the Delta file of v - 1, once read here

        def one(v: int) -> VersionState | None:
            try:
                return read_version(store, table, v)
            except NotFound:
                return None

        # (the versions read in parallel: one round trip, or two past the log's end, not one or two per version)
        versions = range(snap.version + 1, upto + 1)
        states = concurrency.gather_or_inline(concurrency.Pool.REQUESTS, one, versions, limit=_PARALLEL)
        for v, found in zip(versions, states, strict=True):
            if found is None:
                raise VersionNotFound(table, upto, latest=v - 1)
            st = found
            if not st.filled and st.kind == "freed" and in_log:
                st = fill_version(store, table, v, st, below=below) or st
            below = st.raw if st.filled else None
            if st.filled:
                commits.append((v, [] if st.kind == "freed" else decode_commit(st.raw, version=v, table=table)))
            else:
                pending[v] = (st.txn or "?") if st.pending else ""
                if seen is not None and st.pending:
                    seen[v] = st
                commits.append((v, []))
            if in_log and st.filled:
                last_resolved = replay(last_resolved, commits[-1:])
            in_log = in_log and st.filled
        snap = replay(snap, commits) if commits else snap
        with self._lock:
            old = self._resolved.get(table)
            if old is None or last_resolved.version > old.version:
                self._resolved[table] = last_resolved
            if last_resolved.version > self._latest.get(table, -1):
                self._latest[table] = last_resolved.version
            if upto > self._claimed.get(table, -1):
                self._claimed[table] = upto
        return snap, pending

    def latest_snapshot(self, table: str, store: ObjectStore | None = None) -> Snapshot:
        """The latest snapshot (pending markers read as empty): what a plain Delta reader sees."""
        latest = self.latest_hint(table, store)
        return self.resolved_view(table, latest, store)[0]

    def note_committed(self, table: str, snapshot: Snapshot | LaterSnapshot) -> None:
        """Remember a snapshot known to be resolved (e.g. right after our own commit)."""
        with self._lock:
            old = self._resolved.get(table)
            if old is None or snapshot.version > old.version:
                self._resolved[table] = snapshot
            if snapshot.version > self._latest.get(table, -1):
                self._latest[table] = snapshot.version

    def forget(self, table: str) -> None:
        with self._lock:
            self._latest.pop(table, None)
            self._claimed.pop(table, None)
            self._resolved.pop(table, None)


__all__ = ["LaterSnapshot", "NotFound", "TableLogs"]
