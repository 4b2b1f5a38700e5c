"""Per-Lakehouse cache of table logs: latest-version hints and resolved snapshots.

"Resolved" means every version up to the snapshot's is final (no pending marker below it), so the
cached snapshot can be advanced with just the new commits (a few GETs, no LIST). Pending markers of
other transactions are read as empty commits (what they are until overwritten) and reported.
"""

from __future__ import annotations

import threading

from lv_core.delta.actions import Action, decode_commit
from lv_core.delta.log import DeltaLog
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.delta.table import validate_table_name
from lv_core.errors import NotFound, TableNotFound
from lv_core.protocol.markers import KEY, read_version
from lv_core.storage.base import ObjectStore


class TableLogs:
    """Latest-version hints and resolved snapshots, shared by the transactions of one Lakehouse."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._latest: dict[str, int] = {}
        self._resolved: dict[str, Snapshot] = {}

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
        """The latest version this process knows of (no request), probing only when it knows none.

        Marker placement starts from here: put-if-absent finds the next free version by itself, so
        a stale hint costs one failed PUT-create per newer version instead of one HEAD each.
        """
        with self._lock:
            hint = self._latest.get(table)
        return self.latest_hint(table, store) if hint is None else hint

    def known_latest(self, table: str) -> int | None:
        """The latest version this process knows of, without any request (None: none known)."""
        with self._lock:
            return self._latest.get(table)

    def resolved_tables(self) -> dict[str, Snapshot]:
        """The cached resolved snapshots (table -> snapshot), a copy."""
        with self._lock:
            return dict(self._resolved)

    def note_latest(self, table: str, version: int) -> None:
        with self._lock:
            if version > self._latest.get(table, -1):
                self._latest[table] = version

    def resolved_view(self, table: str, upto: int,
                      store: ObjectStore | None = None) -> tuple[Snapshot, dict[int, str]]:
        """The snapshot at ``upto`` with pending markers read as empty, and those markers (version -> txn)."""
        store = store or self.store
        with self._lock:
            cached = self._resolved.get(table)
        pending: dict[int, str] = {}
        if cached is not None and cached.version <= upto:
            snap = cached
            last_resolved: Snapshot | None = cached
            commits: list[tuple[int, list[Action]]] = []
            for v in range(cached.version + 1, upto + 1):
                st = read_version(store, table, v)
                if st.pending:
                    pending[v] = st.txn or "?"
                    commits.append((v, []))
                else:
                    commits.append((v, [] if st.kind == "freed" else decode_commit(st.raw, version=v, table=table)))
                if not pending and commits:
                    last_resolved = replay(last_resolved, commits[-1:])
            snap = replay(cached, commits) if commits else cached
        else:
            snap = DeltaLog(store, table).snapshot(upto, method="probe")
            first = snap.checkpoint_version + 1 if snap.checkpoint_version is not None else 0
            for v in range(first, upto + 1):
                ci = snap.commit_infos.get(v)
                lv = ci.get(KEY) if ci is not None else None
                if isinstance(lv, dict) and lv.get("kind") == "marker":
                    pending[v] = str(lv.get("txn") or "?")
            last_resolved = snap if not pending else None
        with self._lock:
            if last_resolved is not None:
                old = self._resolved.get(table)
                if old is None or last_resolved.version > old.version:
                    self._resolved[table] = last_resolved
            if upto > self._latest.get(table, -1):
                self._latest[table] = upto
        return snap, pending

    def latest_snapshot(self, table: str, store: ObjectStore | None = None) -> Snapshot:
        """The latest snapshot (pending markers read as empty): what a plain Delta reader sees."""
        latest = self.latest_hint(table, store)
        return self.resolved_view(table, latest, store)[0]

    def note_committed(self, table: str, snapshot: Snapshot) -> None:
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
            self._resolved.pop(table, None)


__all__ = ["NotFound", "TableLogs"]
