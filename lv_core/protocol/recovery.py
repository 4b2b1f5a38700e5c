"""Recovery of crashed clients: free expired markers, roll decided commits forward, clean leftovers.

- A marker whose transaction's lease expired is freed (empty commit, if-match on the etag read),
  unless the transaction wrote a commit decision (multi-table commit that crashed half way): then
  the decided actions for that table are written instead (roll forward), so no committed data is lost.
- Sublogs of a transaction are kept while its owner may still return (lease expired less than
  ``lease_grace_s`` ago); after that, staged data files that no version of the table references are
  deleted together with the sublog, lease and decision objects.
- Queued group-commit requests of dead transactions are withdrawn.
- Files a dead transaction staged that no sublog entry names (a kernel killed mid-INSERT: Spark's
  write folders ``<table>/part-<txn>-...-s<id>/``, change data output under
  ``<table>/_lv_staging/part-<txn>-...``, or data files ``part-<txn>-...`` already written under their
  final names; physical operations write no entry) are found by their names (one LIST per table) and
  deleted once that transaction is dead: its lease ran out more than ``lease_grace_s`` ago, or it has
  no lease and its id (which starts with its begin time) is older than ``lease_s`` plus the grace
  period (a transaction writes its heartbeat ``lease_s / 3`` after it began, so a live one that old
  has one). Never a file the table's latest snapshot lists or tombstones, never a file of a
  transaction with a pending marker or a live lease.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lv_core.delta.actions import AddFile, CommitInfo, decode_commit
from lv_core.delta.log import DeltaLog
from lv_core.errors import LvError, NotFound, PreconditionFailed
from lv_core.protocol import ict, layout
from lv_core.protocol.edges import read_edges
from lv_core.protocol.lease import read_lease
from lv_core.protocol.markers import (
    KEY,
    VersionState,
    append_at_tail,
    fill_version,
    free_marker,
    read_log_version,
    read_version,
    same_commit,
    write_version,
)
from lv_core.protocol.scan import MarkerScan, list_tables, transaction_ids
from lv_core.protocol.sublog import SublogEntry, read_sublog
from lv_core.protocol.vqueue import VQ_PREFIX, parse_key, withdraw
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
    validation_lock: str = ""  # what was done with an expired validation key ("" = none found expired)
    withdrawn_requests: list[str] = field(default_factory=list)  # queued commit requests of dead transactions

    def summary(self) -> str:
        lock = f"; expired validation key {self.validation_lock}" if self.validation_lock else ""
        if self.withdrawn_requests:
            lock += f"; withdrew {len(self.withdrawn_requests)} queued commit request(s) of dead transactions"
        return (f"freed {len(self.freed)} expired marker(s), rolled {len(self.rolled_forward)} forward, "
                f"{len(self.live_markers)} live marker(s) left alone, cleaned {len(self.cleaned_txns)} "
                f"transaction(s) ({len(self.deleted_files)} orphaned file(s) deleted), kept "
                f"{len(self.kept_txns)} sublog(s) whose owner may return{lock}")


def _decision(store: ObjectStore, txn: str) -> dict | None:
    try:
        d = json.loads(store.get(layout.decision_key(txn)).data)
        return d if isinstance(d, dict) else None
    except (NotFound, ValueError):
        return None


def _written_by(actions: Iterable[object], txn: str) -> bool:
    """The decoded commit is one ``txn`` wrote (its LakeVilla commitInfo names it)."""
    return any(isinstance(a, CommitInfo) and (a.payload.get(KEY) or {}).get("txn") == txn for a in actions)


def _gave_up_a_part(store: ObjectStore, txn: str, parts: Iterable[tuple[str, int]], table: str) -> bool | None:
    """Whether ``txn`` gave up (freed) one of the other ``parts`` of its multi-table commit; None when
    one of them is neither in the log nor a marker. A commit whose other half can no longer land
    must not be rolled forward half way."""
    for t, v in parts:
        if t == table:
            continue
        try:
            other = read_version(store, t, v)
        except NotFound:
            return None
        if other.kind == "freed" and other.txn == txn:
            return True
    return False


def _decided_commit(store: ObjectStore, txn: str, table: str, version: int) -> bytes | None:
    """The commit ``txn``'s decision names for ``table@version``, if the decision stands.

    It stands only when it is well formed (valid table names and versions, each commit valid Delta
    JSON written by ``txn``) and none of the versions it names was freed: an owner that aborts frees
    its markers (possibly after its decision landed without it knowing), and a decision whose other
    half can no longer commit must not be rolled forward half way."""
    from lv_core.delta.table import validate_table_name

    decision = _decision(store, txn)
    tables = (decision or {}).get("tables")
    if not isinstance(tables, dict) or table not in tables:
        return None
    try:
        plans: dict[str, tuple[int, bytes]] = {}
        for t, p in tables.items():
            validate_table_name(t)
            v, data = p["version"], str(p["commit"]).encode()
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                return None
            if not _written_by(decode_commit(data, version=v, table=t), txn):
                return None  # not a commit of this transaction
            plans[t] = (v, data)
    except (LvError, KeyError, TypeError, AttributeError):
        return None
    if plans[table][0] != version:
        return None
    if _gave_up_a_part(store, txn, ((t, v) for t, (v, _data) in plans.items()), table) is not False:
        return None  # a half was given up (free this one too), or cannot be found
    return plans[table][1]


def _sibling_commit(info: Mapping[str, Any], table: str) -> bytes | None:
    """The commit of ``table`` that a part with the commitInfo ``info`` carries: its actions
    (``siblingActions``) with the part's commitInfo less those fields (byte for byte what the owner
    encoded for it), or the whole commit (``siblings``, as parts were first written)."""
    lv = info[KEY]
    bodies = lv.get("siblingActions")
    if isinstance(bodies, dict):
        with_ict = lv.get("siblingsIct", [])
        own = {**ict.stripped(info), KEY: {k: x for k, x in lv.items() if k not in ("siblingActions", "siblingsIct")}}
        on = isinstance(with_ict, list) and table in with_ict
        return ict.with_info(str(bodies[table]).encode(), ict.info_lines([own], on)[0], on)
    siblings = lv.get("siblings")
    return str(siblings[table]).encode() if isinstance(siblings, dict) else None


def _part_commit(store: ObjectStore, txn: str, table: str, version: int) -> bytes | None:
    """The commit for ``table@version`` that a part of ``txn``'s multi-table commit already in the log
    carries (:func:`_sibling_commit`, :func:`lv_core.txn.publish.prepare`): such a part is the decision.

    The parts are found through the markers ``txn``'s edges object names (written before any part):
    1 GET, plus 1 GET per other table until a part is found. None when no part is in the log (the
    transaction is not decided: free the marker), or when what is found is not well formed, names
    another version of ``table``, or shows a part ``txn`` gave up (never rolled forward half way)."""
    exposed = read_edges(store, txn)
    if exposed is None or exposed.holds.get(table) != version:
        return None
    for t, v in sorted(exposed.holds.items()):
        if t == table:
            continue
        other = read_log_version(store, t, v)
        if other is None or other.kind != "commit" or other.txn != txn:
            continue
        try:
            info = next(a.payload for a in decode_commit(other.raw, version=v, table=t)
                        if isinstance(a, CommitInfo) and isinstance(a.payload.get(KEY), dict))
            lv: dict = info[KEY]
            at = lv.get("at")
            if not isinstance(at, dict) or at.get(table) != version:
                return None
            data = _sibling_commit(info, table)
            if data is None or not _written_by(decode_commit(data, version=version, table=table), txn):
                return None
            parts = [(str(pt), int(pv)) for pt, pv in at.items()]
        except (LvError, KeyError, TypeError, ValueError, StopIteration):
            return None
        return None if _gave_up_a_part(store, txn, parts, table) else data  # a part in the log: decided
    return None


def resolve_expired(store: ObjectStore, table: str, st: VersionState, by: str, *, below_known: bool = False) -> str:
    """Resolve the expired marker ``st``: roll its table's part of a decided commit forward (write it
    into the log), else free it (its marker object; the log takes the version as an empty commit later).

    A roll forward needs the version below in the log (``below_known``: the caller knows it is; else
    1 HEAD); when it is not there yet, nothing is done and "blocked" is returned (resolve the version
    below first). Returns "rolled-forward", "freed" or "blocked". Raises PreconditionFailed when the
    version changed meanwhile (the owner or another recoverer acted first: re-read and decide again).
    """
    assert st.txn is not None
    data = _decided_commit(store, st.txn, table, st.version)
    if data is None:
        data = _lock_plan(store, st.txn, table, st.version)  # LV[I]: a plan recorded in the validation lock
    if data is None:
        data = _part_commit(store, st.txn, table, st.version)  # LV[CT]: a part that carries the others
    if data is not None:
        if not below_known and st.version > 0 and not store.exists(layout.commit_key(table, st.version - 1)):
            return "blocked"
        try:
            write_version(store, table, st.version, data)
        except PreconditionFailed:
            got = read_version(store, table, st.version)
            if same_commit(got.raw, data):
                return "rolled-forward"
            if got.kind != "commit" or got.txn == st.txn:
                raise
            # A writer that ignores markers took the version of a decided part: the decided commit
            # must still land (never lose committed data), at the next free version of the log.
            append_at_tail(store, table, st.version + 1, data)
        return "rolled-forward"
    free_marker(store, table, st, "expired", by=by)
    return "freed"


def _fill_given_up(store: ObjectStore, table: str) -> None:
    """Write the empty commits of given-up markers just past the log's tail, in order, up to the first
    pending marker (so the log advances past transactions that are gone)."""
    v = DeltaLog(store, table).latest_version_by_probe() + 1
    below: bytes | None = None  # the Delta file of v - 1, once known here
    while True:
        try:
            st = read_version(store, table, v)
        except NotFound:
            return
        if st.pending:
            return
        if not st.filled:
            filled = fill_version(store, table, v, st, below=below)
            if filled is None:
                return
            st = filled
        below = st.raw
        v += 1


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


def _safe_data_path(path: object) -> bool:
    """A path a sublog may name as a staged data file: relative, inside the table, not its log."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0].startswith(("_", ".")):
        return False  # _delta_log, _lakevilla, hidden files: never data
    return not any(ord(c) < 32 for c in path)


class _References:
    """Which data files some version of a table still references (live adds and remove tombstones
    of its latest snapshot; a tombstone past its retention is what VACUUM may delete anyway)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._known: dict[str, frozenset[str] | None] = {}

    def forget(self, table: str) -> None:
        self._known.pop(table, None)

    def of(self, table: str) -> frozenset[str] | None:
        """Referenced paths, or None when the table cannot be read (then nothing of it is deleted)."""
        if table not in self._known:
            try:
                snap = DeltaLog(self.store, table).snapshot(method="probe", check=False)
                self._known[table] = frozenset(snap.files) | frozenset(snap.tombstones)
            except LvError:
                self._known[table] = None
        return self._known[table]


def _clear_expired_lock(store: ObjectStore, lease_grace_s: float, now: float) -> str:
    """An expired validation key (its holder crashed, or its release failed) is taken over
    the way the next validator would (a recorded plan rolled forward, else rolled back) and released.
    Returns what happened ("" when there is no key, or its holder may still be alive)."""
    from lv_core.protocol.vlock import ValidationLock

    lock = ValidationLock(store, skew_s=lease_grace_s)
    found = lock.read()
    if found is None or found[0].lease_expires + lease_grace_s > now:
        return ""
    try:
        with lock.acquire(layout.new_txn_id(), timeout_s=1.0) as held:
            actions = [t.action for t in held.takeovers]
    except LvError:
        return ""  # taken by a live validator meanwhile, or the store failed: the next validator does it
    return ", ".join(actions) or "already released"


def alive_until(store: ObjectStore, txn: str, entries: Iterable[SublogEntry] | None = None, *,
                lease_s: float = 30.0) -> float:
    """Until when (epoch seconds) ``txn`` may still be alive: its heartbeat's expiry; without one (a
    transaction writes it only once it needs a renewal, ``lease_s / 3`` after it began), the latest
    expiry its sublog ``entries`` (read if not given) promise; without those (a first write staged its
    files before its marker), ``lease_s`` after it began (its id holds that time)."""
    lease = read_lease(store, txn)
    if lease is not None:
        return float(lease["expires"])
    promised = [e.lease_expires for e in (read_sublog(store, txn) if entries is None else entries)]
    return max(promised) if promised else _begun_at(txn) + lease_s


def _begun_at(txn: str) -> float:
    """When ``txn`` began (its id starts with the UTC time), 0.0 if unreadable."""
    try:
        return float(calendar.timegm(time.strptime(txn[:15], "%Y%m%dT%H%M%S")))
    except ValueError:
        return 0.0


class _Dead:
    """Whether a transaction is dead for good (cached per recovery pass)."""

    def __init__(self, store: ObjectStore, live: set[str], lease_grace_s: float, now: float,
                 dead: Iterable[str] = (), lease_s: float = 30.0) -> None:
        self.store, self.live, self.grace, self.now, self.lease_s = store, live, lease_grace_s, now, lease_s
        self._known: dict[str, bool] = dict.fromkeys(dead, True)  # found dead (and cleaned) in this pass

    def __call__(self, txn: str) -> bool:
        if txn in self.live:
            return False
        if txn not in self._known:
            lease = read_lease(self.store, txn)
            if lease is not None:
                self._known[txn] = lease["expires"] + self.grace <= self.now
            else:  # (read again: a heartbeat written meanwhile means alive)
                self._known[txn] = (alive_until(self.store, txn, lease_s=self.lease_s) + self.grace <= self.now
                                    and read_lease(self.store, txn) is None)
        return self._known[txn]


def _clean_staged(store: ObjectStore, refs: _References, dead: _Dead, rep: RecoveryReport) -> None:
    """Delete files that dead transactions staged and no version references (see the module text).

    The table's snapshot is read *after* the owners were found dead: a transaction deletes its lease
    only after its commit is published, so a commit of a transaction seen without lease is in it."""
    for table in list_tables(store):
        prefix = f"{table}/"
        found: list[str] = []
        for meta in list(store.list(prefix)):
            rel = meta.key[len(prefix):]
            writer = None if rel.startswith("_delta_log/") else layout.writer_of(rel)
            if writer is not None and dead(writer):
                found.append(rel)
        if not found:
            continue
        refs.forget(table)
        referenced = refs.of(table)
        if referenced is None:
            continue
        for rel in found:
            if not rel.startswith("_lv_staging/") and (rel in referenced or not _safe_data_path(rel)):
                continue
            try:
                store.delete(prefix + rel)
            except NotFound:
                continue
            rep.deleted_files.append(prefix + rel)


def recover(store: ObjectStore, *, lease_grace_s: float = 30.0, now: float | None = None,
            lease_s: float = 30.0) -> RecoveryReport:
    """Run one recovery pass over the whole warehouse (``lease_s``: the clients' lease period).

    Never deletes a file that a version of its table references: a staged file named by a dead
    transaction's sublog is deleted only when it is a plain data path of an existing table that
    the table's latest snapshot neither lists nor tombstones (sublogs may be foreign or stale)."""
    from lv_core.delta.table import validate_table_name

    now = time.time() if now is None else now
    rep = RecoveryReport()
    # First: a plan it rolls forward writes table versions that the reads below must see.
    rep.validation_lock = _clear_expired_lock(store, lease_grace_s, now)
    refs = _References(store)
    pending_of: set[str] = set()
    scan = MarkerScan(store, now=now)
    for table in list_tables(store):
        for _round in range(3):  # a roll forward blocked by a version below is retried once that one is filled
            blocked = False
            for m in scan.table(table, max_versions=None).markers:
                if m.state == "live":
                    if _round == 0:
                        rep.live_markers.append((table, m.version, m.txn))
                    pending_of.add(m.txn)
                    continue
                assert m.version_state is not None
                try:
                    outcome = resolve_expired(store, table, m.version_state, "recover")
                except (PreconditionFailed, LvError):
                    continue  # changed under us (the owner or another recoverer acted), or not writable
                if outcome == "rolled-forward":
                    rep.rolled_forward.append((table, m.version, m.txn))
                    refs.forget(table)
                elif outcome == "freed":
                    rep.freed.append((table, m.version, m.txn))
                else:
                    blocked = True
                    pending_of.add(m.txn)  # its decided commit still has to land: keep its decision
            with contextlib.suppress(LvError):
                _fill_given_up(store, table)
            if not blocked:
                break
    # Leftovers of finished or dead transactions.
    for txn in sorted(transaction_ids(store)):
        if txn in pending_of:
            rep.kept_txns.append(txn)
            continue
        entries = read_sublog(store, txn)
        if alive_until(store, txn, entries, lease_s=lease_s) + lease_grace_s > now:
            rep.kept_txns.append(txn)  # alive, or recently dead: the owner may come back
            continue
        for entry in entries:
            for table, paths in entry.adds.items():
                try:
                    validate_table_name(table)
                except LvError:
                    continue
                referenced = refs.of(table)
                if referenced is None:
                    continue
                for p in paths:
                    if _safe_data_path(p) and p not in referenced:
                        store.delete(f"{table}/{p}")
                        rep.deleted_files.append(f"{table}/{p}")
        for meta in list(store.list(layout.txn_prefix(txn))):
            store.delete(meta.key)
        rep.cleaned_txns.append(txn)
    live = set(rep.kept_txns) | pending_of
    dead = _Dead(store, live, lease_grace_s, now, dead=rep.cleaned_txns, lease_s=lease_s)
    _withdraw_dead_requests(store, dead, rep)
    _clean_staged(store, refs, dead, rep)
    return rep


def _withdraw_dead_requests(store: ObjectStore, dead: _Dead, rep: RecoveryReport) -> None:
    """Delete the group-commit requests (:mod:`~lv_core.protocol.vqueue`) of dead transactions: no
    holder commits them (their markers' lease ran out), but each would read them again. 1 LIST."""
    for meta in list(store.list(VQ_PREFIX)):
        parsed = parse_key(meta.key)
        if parsed is not None and dead(parsed[0]):
            withdraw(store, meta.key)
            rep.withdrawn_requests.append(parsed[0])


__all__ = ["AddFile", "RecoveryReport", "alive_until", "decode_commit", "recover"]
