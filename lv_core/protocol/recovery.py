"""Recovery of crashed clients: free expired markers, roll decided commits forward, clean leftovers.

- A marker whose transaction's lease expired is freed (empty commit, if-match on the etag read),
  unless the transaction wrote a commit decision (multi-table commit that crashed half way): then
  the decided actions for that table are written instead (roll forward), so no committed data is lost.
- Sublogs of a transaction are kept while its owner may still return (lease expired less than
  ``lease_grace_s`` ago); after that, staged data files that no version of the table references are
  deleted together with the sublog, lease and decision objects.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from lv_core.delta.actions import AddFile, decode_commit
from lv_core.delta.log import DeltaLog
from lv_core.errors import LvError, NotFound, PreconditionFailed
from lv_core.protocol import layout
from lv_core.protocol.lease import lease_expired, read_lease
from lv_core.protocol.markers import KEY, VersionState, free_marker, overwrite, read_version
from lv_core.protocol.sublog import read_sublog
from lv_core.storage.base import ObjectStore


@dataclass
class RecoveryReport:
    """What a recovery run did."""

    freed: list[tuple[str, int, str]] = field(default_factory=list)  # (table, version, txn)
    rolled_forward: list[tuple[str, int, str]] = field(default_factory=list)
    live_markers: list[tuple[str, int, str]] = field(default_factory=list)
    cleaned_txns: list[str] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)
    kept_txns: list[str] = field(default_factory=list)  # sublogs kept: owner may return

    def summary(self) -> str:
        return (f"freed {len(self.freed)} expired marker(s), rolled {len(self.rolled_forward)} forward, "
                f"{len(self.live_markers)} live marker(s) left alone, cleaned {len(self.cleaned_txns)} "
                f"transaction(s) ({len(self.deleted_files)} orphaned file(s) deleted), kept "
                f"{len(self.kept_txns)} sublog(s) whose owner may return")


def _tables(store: ObjectStore) -> list[str]:
    names: set[str] = set()
    for meta in store.list(""):
        parts = meta.key.split("/")
        if len(parts) >= 3 and parts[1] == "_delta_log" and not parts[0].startswith(("_", ".")):
            names.add(parts[0])
    return sorted(names)


def _decision(store: ObjectStore, txn: str) -> dict | None:
    try:
        d = json.loads(store.get(layout.decision_key(txn)).data)
        return d if isinstance(d, dict) else None
    except (NotFound, ValueError):
        return None


def resolve_expired(store: ObjectStore, table: str, st: VersionState, by: str) -> str:
    """Resolve the expired marker ``st``: roll its table's part of a decided commit forward, else free it.

    Returns "rolled-forward" or "freed". Raises PreconditionFailed when the marker changed meanwhile
    (the owner or another recoverer acted first: re-read and decide again).
    """
    assert st.txn is not None
    decision = _decision(store, st.txn)
    planned = (decision or {}).get("tables", {}).get(table)
    if planned is not None and int(planned.get("version", -1)) == st.version:
        overwrite(store, table, st.version, st.etag, str(planned["commit"]).encode())
        return "rolled-forward"
    data = _lock_plan(store, st.txn, table, st.version)
    if data is not None:  # LV[I]: its plan is recorded in the validation lock: it is committed
        overwrite(store, table, st.version, st.etag, data)
        return "rolled-forward"
    free_marker(store, table, st, "expired", by=by)
    return "freed"


def _lock_plan(store: ObjectStore, txn: str, table: str, version: int) -> bytes | None:
    """The commit bytes ``txn`` planned for ``table@version`` if the validation lock records them."""
    from lv_core.protocol.vlock import COMMITTING, ValidationLock

    found = ValidationLock(store).read()
    if found is None:
        return None
    rec, _etag = found
    if rec.state != COMMITTING or (rec.plan_txn or rec.txn) != txn:
        return None
    for e in rec.plan:
        if e.table == table and e.version == version:
            return e.data
    return None


def recover(store: ObjectStore, *, lease_grace_s: float = 30.0, now: float | None = None) -> RecoveryReport:
    """Run one recovery pass over the whole warehouse."""
    now = time.time() if now is None else now
    rep = RecoveryReport()
    committed_by: dict[str, set[str]] = {}  # txn -> tables it committed to (versions since checkpoint)
    pending_of: set[str] = set()
    for table in _tables(store):
        try:
            snap = DeltaLog(store, table).snapshot(method="probe", check=False)
        except LvError:
            continue
        first = snap.checkpoint_version + 1 if snap.checkpoint_version is not None else 0
        for v in range(first, snap.version + 1):
            ci = snap.commit_infos.get(v)
            lv = ci.get(KEY) if ci is not None else None
            if not isinstance(lv, dict):
                continue
            txn = lv.get("txn")
            if lv.get("kind") == "commit" and isinstance(txn, str):
                committed_by.setdefault(txn, set()).add(table)
            if lv.get("kind") != "marker":
                continue
            try:
                st = read_version(store, table, v)
            except (NotFound, LvError):
                continue
            if not st.pending or st.txn is None:
                continue
            if not lease_expired(store, st.txn, st.marker, now):
                rep.live_markers.append((table, v, st.txn))
                pending_of.add(st.txn)
                continue
            try:
                if resolve_expired(store, table, st, "recover") == "rolled-forward":
                    rep.rolled_forward.append((table, v, st.txn))
                    committed_by.setdefault(st.txn, set()).add(table)
                else:
                    rep.freed.append((table, v, st.txn))
            except PreconditionFailed:
                continue  # changed under us: the owner or another recoverer acted
    # Leftovers of finished or dead transactions.
    txns: set[str] = set()
    for meta in store.list(layout.TXNS):
        rest = meta.key[len(layout.TXNS):]
        if "/" in rest:
            txns.add(rest.split("/", 1)[0])
    for txn in sorted(txns):
        if txn in pending_of:
            rep.kept_txns.append(txn)
            continue
        lease = read_lease(store, txn)
        expires = float(lease.get("expires", 0.0)) if lease else 0.0
        if lease is not None and expires + lease_grace_s > now:
            rep.kept_txns.append(txn)  # alive, or recently dead: the owner may come back
            continue
        committed = committed_by.get(txn, set()) | set((_decision(store, txn) or {}).get("tables", {}))
        for entry in read_sublog(store, txn):
            for table, paths in entry.adds.items():
                if table in committed:
                    continue
                for p in paths:
                    store.delete(f"{table}/{p}")
                    rep.deleted_files.append(f"{table}/{p}")
        for meta in list(store.list(layout.txn_prefix(txn))):
            store.delete(meta.key)
        rep.cleaned_txns.append(txn)
    return rep


__all__ = ["AddFile", "RecoveryReport", "decode_commit", "recover"]
