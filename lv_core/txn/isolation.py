"""LV[I] inside a transaction: reads at global-log versions, validation R1-R3, atomic publication.

- Reads: the first table access reads the global version log's head once; every table is read at
  the version the log names (tables the log does not know yet: deduced from their own log). No
  marker is placed for reading; with LV[R]/LV[CT] a marker is claimed when a table is first written.
- Commit: marker tables first wait for their predecessors and redo what they invalidated (LV[R]);
  then, under the validation lock, rules R1-R3 are checked with the head read under the lock, and a
  compatible transaction records its plan in the lock, writes every table commit and publishes the
  next global version (roll forward by whoever takes the lock over if it crashes). Read-only
  transactions validate without the lock and write nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, NamedTuple

from lv_core import events as ev
from lv_core.delta.actions import decode_commit
from lv_core.errors import LvError, TransactionAborted
from lv_core.protocol.aborts import aborted
from lv_core.protocol.commitplan import PlannedCommit, PlanResult, build_plan
from lv_core.protocol.conflicts import PredecessorCommit, first_conflict
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.hidden import collect, probe_early
from lv_core.protocol.ict import commit_info_first
from lv_core.protocol.markers import encode_freed, lakevilla_commit_info, read_version, write_version
from lv_core.protocol.parts import PartMissing, close_parts
from lv_core.protocol.validation import LogTail, TableAccess, ValidationOutcome, validate
from lv_core.protocol.vlock import FREE, FreeAnswer, FreeSlot, HeldLock, KeyLook, LockRecord, slot_of
from lv_core.protocol.vqueue import outcome_of, withdraw
from lv_core.testing import crashpoint
from lv_core.txn import cleaner
from lv_core.txn.core import TxnCore
from lv_core.txn.group import (
    SERVING,
    Decided,
    Group,
    Waiter,
    forget,
    gather,
    in_background,
    joined,
    make_request,
    serve,
)
from lv_core.txn.publish import Published
from lv_core.txn.settle import settle_markers
from lv_core.txn.state import Decision

__all__ = ["commit_isolated", "one_global_version", "table_accesses"]


def table_accesses(core: TxnCore, writes: dict[str, list]) -> list[TableAccess]:
    """What validation needs to know of each table the transaction touched."""
    ops = core.book.ops
    out = []
    for t, ts in core.book.tables.items():
        read = any(t in rec.result.reads or t in rec.result.scans for rec in ops)
        written = t in writes
        blind = written and not read and all(rec.op.blind for rec in ops if t in rec.op.tables)
        if ts.marker_version is not None:
            out.append(TableAccess(t, read=read, written=written, marker=ts.marker_version, blind=blind))
        else:
            out.append(TableAccess(t, read=read, written=written, read_version=ts.read_version, blind=blind))
    return out


def one_global_version(core: TxnCore) -> bool:
    """Whether every table the transaction holds was read at the version its one global-log head
    names (no marker anywhere; tables the log did not know are outside LV[I]'s isolation and are
    always compatible, so they do not count)."""
    head = core.book.head
    if head is None:
        return not core.book.tables
    for t, ts in core.book.tables.items():
        if ts.marker_version is not None:
            return False
        known = head.table_version(t)
        if known is not None and ts.read_version != known:
            return False
    return True


def _from_log_version(a: TableAccess, state: GvlState) -> TableAccess:
    """``a`` as if read at the log's current version of its table (a one-snapshot reader's R1 looks
    only past it); unchanged for a table the log does not know."""
    known = state.table_version(a.table)
    if known is None or a.read_version is None or known <= a.read_version:
        return a
    return dataclasses.replace(a, read_version=known)


def _emit(core: TxnCore, outcome: ValidationOutcome, gvl_version: int | None) -> None:
    data = outcome.to_json()
    core.validation = data
    core.events.emit(ev.Validated(core.id, compatible=outcome.compatible, gvl_version=gvl_version,
                                 tables=data["tables"], failed_rule=outcome.rule))


def _check_foreign(core: TxnCore, outcome: ValidationOutcome) -> None:
    """Written tables without a marker move past commits the global log does not know (plain Delta
    writers) or pending markers: refuse when those touch what the transaction read or rewrote."""
    tables = core.book.tables
    for t, v in outcome.tables.items():
        if v.written and v.w is not None and any(p < v.w for p in v.pending) and (
                v.moved_from is not None or tables[t].marker_version is None):
            # A write placed above a pending marker: when that marker commits, the global version
            # published now would gain content later. Refuse; the retry finds it resolved.
            raise aborted("pending_above", {"table": t, "pending": list(v.pending)}, table=t,
                          first=min(p for p in v.pending if p < v.w),
                          needs=v.moved_from if v.moved_from is not None else v.w)
        if not v.written or tables[t].marker_version is not None:
            continue
        if v.pending and not v.blind:
            raise aborted("pending_taken", {"table": t, "pending": list(v.pending)}, table=t, first=v.pending[0])
        preds = []
        for fv in v.foreign:
            st = read_version(core.store, t, fv)
            preds.append(PredecessorCommit(t, fv, st.txn, decode_commit(st.raw, version=fv, table=t)))
        c = first_conflict(core.book.footprints(), preds) if preds else None
        if c is not None:
            raise aborted("foreign_lost_update", {"table": t, "version": c.version}, table=t, version=c.version,
                          why=c.why)


def _whole(core: TxnCore, state: GvlState, versions: dict[str, int]) -> dict[str, int]:
    """``versions`` plus what keeps every multi-table commit outside the log whole (see parts.py);
    tables whose parts cannot be included yet are dropped (a catch-up is best effort)."""
    versions = dict(versions)
    while versions:
        try:
            return {**versions, **close_parts(core.store, state, versions, own_txn=core.id)}
        except PartMissing as e:
            versions.pop(e.table, None)
    return versions


def _catch_up_versions(outcome: ValidationOutcome) -> dict[str, int]:
    """After an R1 failure caused by commits the global log does not know (writers without LV[I]:
    plain Delta, or LakeVilla presets without I), the versions to publish so a retry reads them.

    Only up to the last real commit below the first pending marker: a published version must never
    gain content later."""
    out: dict[str, int] = {}
    for t, v in outcome.tables.items():
        if v.rules["R1"].passed or not v.foreign or v.l is None:
            continue
        limit = min(v.pending) - 1 if v.pending else max(v.foreign)
        target = max((f for f in v.foreign if f <= limit), default=None)
        if target is not None and target > v.l:
            out[t] = target
    return out


def _catch_up(core: TxnCore, outcome: ValidationOutcome, deadline: float) -> None:
    """Publish the foreign versions an R1 failure found (under the validation lock), best effort."""
    updates = _catch_up_versions(outcome)
    if not updates:
        return
    try:
        left = max(0.001, deadline - time.monotonic())
        with core.services.vlock.acquire(core.id, timeout_s=left) as held:
            state = core.services.glog.head()
            held.head = state.version
            fresh = _whole(core, state, {t: v for t, v in updates.items()
                                        if (known := state.table_version(t)) is None or known < v})
            held.commit([], state, additions=fresh, background=cleaner.background) if fresh else held.release()
    except Exception:  # the abort below is what the caller needs; a retry catches up
        pass


def _fill_unused_markers(core: TxnCore, names: dict[str, int]) -> dict[str, int]:
    """Write an empty commit at each marker the plan does not commit at (read-only tables, a blind
    append that moved): every version below it is resolved (settled), and the plan's versions above
    must not leave a gap in the log. A version taken meanwhile by another writer is resolved too."""
    freed: dict[str, int] = {}
    for t, ts in core.book.tables.items():
        if ts.marker_version is None or names.get(t) == ts.marker_version:
            continue
        with contextlib.suppress(LvError):
            write_version(core.store, t, ts.marker_version, encode_freed(core.id, "read-only", ict=core.ict(t)))
            freed[t] = ts.marker_version
    return freed


@dataclass(frozen=True)
class Planned:
    """A compatible transaction's commit, to be published as ``state.version + 1``: the plan's table
    commits, the tables to add (read-only ones the log did not know, parts of multi-table commits outside
    the log) and each written table's version."""

    plan: list[PlannedCommit]
    additions: dict[str, int]
    names: dict[str, int]


def _planned(core: TxnCore, writes: Mapping[str, list], outcome: ValidationOutcome, state: GvlState) -> Planned:
    """The plan of a validated transaction. Raises PartMissing: a part of a multi-table commit outside the
    log cannot be included."""
    book = core.book
    commits = {}
    for t, actions in writes.items():
        ci = lakevilla_commit_info(core.id, "LAKEVILLA COMMIT", {
            "preset": core.preset, "tables": sorted(writes), "redo": book.redo_count, "gvl": state.version + 1})
        commits[t] = commit_info_first(actions, ci, core.ict(t))
    markers = {t: (ts.marker_version, ts.marker_etag) for t, ts in book.tables.items()
               if ts.marker_version is not None and ts.marker_etag is not None}
    names = outcome.write_versions()
    additions = outcome.additions()
    additions.update(close_parts(core.store, state, {**names, **additions}, own_txn=core.id, fixed=frozenset(names)))
    return Planned(build_plan(outcome, commits, markers), additions, names)


def _settled_tail(marker: int) -> Future[LogTail]:
    """What probing a written table from just below its settled marker finds when nobody took a
    version there: the own marker, then nothing."""
    done: Future[LogTail] = Future()
    done.set_result(LogTail(marker - 1, ("own",)))
    return done


def _published(core: TxnCore, writes: Mapping[str, list], result: PlanResult, freed: dict[str, int],
               state: GvlState) -> Published:
    for t, v in freed.items():
        core.events.emit(ev.MarkerFreed(core.id, table=t, version=v, reason="read-only"))
    for t, v in result.versions.items():
        core.book.mark_published(t, v, writes.get(t, []))
    return Published(dict(result.versions), freed, result.gvl or state)


class Route(Enum):
    """How an attempt to commit by taking the free validation key with the plan ended (:func:`_commit_fast`)."""

    PUBLISHED = "published"  # committed and published
    USUAL = "usual"  # nothing written: validate under the key the usual way
    LOST = "lost"  # nothing written: the key was taken by another between the look and the claim


class _Fast(NamedTuple):
    route: Route
    published: Published | None = None  # (PUBLISHED)
    seen: KeyLook | None = None  # the key as read here (None: not read)


_USUAL = _Fast(Route.USUAL)


@dataclass(frozen=True)
class _Basis:
    """What the fast path validates against: the free record it claims, the head that record names, the
    tails of the written tables (probed, or known when warm) and the queued requests (cold: read beside)."""

    slot: FreeSlot
    state: GvlState
    early: dict[str, tuple[int, Future[LogTail]]]
    queued: Future[list] | None


def _fast_basis(core: TxnCore, accesses: list[TableAccess],
                given: tuple[FreeSlot, GvlState] | None, settled: bool = True) -> _Basis | _Fast:
    """The fast path's basis (see :func:`_commit_fast`), or why there is none (:data:`Route.USUAL`)."""
    glog, vlock = core.services.glog, core.services.vlock
    if not accesses or any(a.marker is None and a.written for a in accesses):
        return _USUAL  # a write without marker is placed by the usual path (next free version, moves)
    if given is None and vlock.contended():
        return _USUAL  # others validate all the time: queue at once (group commit)
    slot, state = given if given is not None else (vlock.free_slot(), glog.known_state())
    warm = (given is None and slot is not None and not slot.queued and state is not None
            and slot.head == state.version)  # (requests queued: serve them, cold)
    early = {}
    if state is not None and all(a.written and a.marker is not None and not (a.blind and len(accesses) > 1)
                                 and ((known := state.table_version(a.table)) is None or known < a.marker)
                                 for a in accesses):
        early = {a.table: (a.marker - 1, _settled_tail(a.marker)) for a in accesses if a.marker is not None}
    if warm or (given is not None and settled and early):  # (given: the queue waits for keep_serving)
        assert slot is not None and state is not None
        return _Basis(slot, state, early, None)
    # the tails and the queue are read in the round trip of the key's GET (or right after it)
    early = probe_early(core.store, accesses, own_txn=core.id)
    queued = in_background(gather, core.store, core.id, frozenset(a.table for a in accesses))
    if given is None:
        seen = KeyLook(vlock.look())
        slot = slot_of(seen.found)
        if slot is None or slot.head is None:
            if seen.found is not None and seen.found[0].state != FREE:
                vlock.note_contention()
            return _Fast(Route.USUAL, seen=seen)
        try:
            state = glog.at(slot.head)  # the head this process knows: no request
        except LvError:  # a free record naming a version that is not there: the usual path reads the head
            return _Fast(Route.USUAL, seen=seen)
    assert slot is not None and state is not None
    return _Basis(slot, state, early, queued)


def _commit_fast(core: TxnCore, writes: Mapping[str, list], accesses: list[TableAccess], *,
                 given: tuple[FreeSlot, GvlState] | None = None, own_request: str | None = None,
                 settled: bool = True) -> _Fast:
    """Validate against the head a free validation key names, then take the key with the plan in one
    PUT-if-match on that free record (see :class:`_Fast` for what it returns).

    The free record is the one this process wrote at its last release when its head is still the newest
    global version this process knows (warm: no request), else the one read now (1 GET; a key held by a
    transaction: the usual way). Success of the PUT-if-match proves nobody held the key since the
    record was written, so the head validated against is still the head (only a holder publishes).
    Warm, with every table written behind a settled marker (every version below it in the log and
    read, none named by the head at or past it; no blind append among several tables), validation makes
    no request: each table's tail is its own marker (what a probe from just below it finds when nobody
    took a version there; a version a writer that ignores markers took meanwhile breaks the plan's
    PUT-create instead, as a version taken after a probe does). Otherwise the tails are probed as usual,
    before the key is taken. Cold, the requests queued for group commit are served as a holder would.

    ``given``: a queued transaction that found the key free (its free record, and the head it names);
    ``own_request``: its request, withdrawn once the key is taken (a committed request left behind
    fails R3 for any later holder: the head names its tables at its markers)."""
    basis = _fast_basis(core, accesses, given, settled)
    if isinstance(basis, _Fast):
        return basis
    state = basis.state
    # cold: serve the queue as a holder would
    group = serve(core.store, state, basis.queued.result()) if basis.queued is not None else Group()
    outcome = validate(collect(core.store, state, accesses, core.policy, own_txn=core.id,
                               footprints=core.book.footprints(), early=basis.early), core.policy)
    if not outcome.compatible:
        return _USUAL  # decided under the key with the head read there (catch-ups, the abort's numbers)
    _check_foreign(core, outcome)
    names = outcome.write_versions()
    if any(a.marker is not None and names.get(a.table) != a.marker for a in accesses):
        return _USUAL  # a marker the plan would not commit at: filled under the key as usual
    try:
        planned = _planned(core, writes, outcome, state)
    except PartMissing:
        return _USUAL
    # Validated, nothing recorded: what the usual path's crash point sees with the key "validating".
    crashpoint("validation-key-held")
    held = core.services.vlock.acquire_planned(
        core.id, planned.plan + group.plan, state, basis.slot, additions={**group.additions, **planned.additions},
        group=group.members, serving=SERVING)  # (then serves the queue: read while the plan is written)
    if held is None:
        return _Fast(Route.LOST)
    if own_request:
        cleaner.background(f"validation request of {core.id}", lambda: withdraw(core.store, own_request))
    _emit(core, outcome, state.version + 1)
    return _execute_fast(core, held, writes, planned, state, group)


def _execute_fast(core: TxnCore, held: HeldLock, writes: Mapping[str, list], planned: Planned, state: GvlState,
                  group: Group) -> _Fast:
    """Write and publish the plan the key was taken with."""
    book = core.book
    before, book.decision = book.decision, Decision("plan", planned.names)
    try:
        with held:
            result = held.execute(state, background=cleaner.background)
    except TransactionAborted as e:
        forget(core, group)  # the group's entries were published all the same
        if e.rule != "R2" or e.details.get("written") or group.members:
            raise
        # A writer that ignores markers took a marker's version before anything was written: the plan is
        # void (nothing written or published, the key released); the usual path probes and decides.
        book.decision = before
        return _USUAL
    forget(core, group)
    return _Fast(Route.PUBLISHED, _published(core, writes, result, {}, state))


def _commit_read_only(core: TxnCore, accesses: list[TableAccess], deadline: float) -> Published:
    """Validate a transaction that writes nothing without the lock; write nothing."""
    book = core.book
    policy = core.policy
    if book.has_markers():
        # It wrote, but a redo left nothing to write: its reads may no longer be one snapshot,
        # so it is not a read-only transaction that write_serializable may let pass without R1.
        policy = dataclasses.replace(policy, r1_read_only=True)
    state = core.services.glog.head()
    if not book.has_markers() and policy.snapshot_read_only and one_global_version(core):
        # Every table read at the one global version it started at: a prefix of the serial order
        # of validated writers (docs/PROTOCOL.md, "Why the relaxed rules stay serializable"), so
        # versions the log published since then are ordered after it. Only commits the log does
        # not know yet (writers outside it) are checked: one that changed what it read aborts it
        # once and is caught up, so the retry reads it (freshness, not serializability).
        accesses = [_from_log_version(a, state) for a in accesses]
    outcome = validate(collect(core.store, state, accesses, policy, own_txn=core.id, parallel=1,
                               footprints=book.footprints()), policy)
    _emit(core, outcome, None)
    if not outcome.compatible:
        _catch_up(core, outcome, deadline)
        raise outcome.to_abort()
    return Published({}, {}, state)


def commit_isolated(core: TxnCore, deadline: float) -> Published:
    """Validate and commit under LV[I]: settle marker tables (LV[R]), then validate R1-R3 under the
    validation lock and execute the recorded plan; read-only transactions validate without the lock.

    Routes: read-only; the fast path (:func:`_commit_fast`); else wait for the key queued for group
    commit (:class:`~lv_core.txn.group.Waiter`), which ends decided by another holder, decided by taking the
    free key with the plan (:func:`_on_free`), or with the key held (:func:`_commit_held`)."""
    book = core.book
    if core.markers and book.has_markers():
        settle_markers(core, deadline)  # LV[R]: predecessors resolved and redone, nothing published yet
    writes = book.writes()
    accesses = table_accesses(core, writes)
    if not writes:
        return _commit_read_only(core, accesses, deadline)
    fast = _commit_fast(core, writes, accesses)
    if fast.route is Route.PUBLISHED:
        assert fast.published is not None
        return fast.published
    vlock = core.services.vlock
    waiter = Waiter(core, lambda: make_request(core, writes, accesses, core.services.glog.known()), deadline,
                    on_free=functools.partial(_on_free, core, writes, accesses))
    left = max(0.001, deadline - time.monotonic())
    held = vlock.acquire_or_join(core.id, waiter, timeout_s=left + 3 * vlock.lease_s,
                                 on_wait=functools.partial(_on_wait, core), seen=fast.seen, serving=SERVING)
    if held is None:  # committed (or broken) in another holder's group, or by taking the key with its plan
        if isinstance(waiter.decided, Published):
            return waiter.decided
        assert waiter.decided is not None
        return joined(core, waiter.decided, writes, waiter.key)
    with held:
        return _commit_held(core, held, waiter, writes, accesses)


def _on_wait(core: TxnCore, rec: LockRecord) -> None:
    core.events.emit(ev.Waiting(core.id, table="validation lock", version=-1, on_txn=rec.txn))


def _on_free(core: TxnCore, writes: Mapping[str, list], accesses: list[TableAccess], waiter: Waiter,
             found: tuple[LockRecord, str]) -> tuple[FreeAnswer, Decided | None]:
    """Queued, and the key is free: committed by a holder before (its outcome is published up to the
    head the free record names), else take the key with the plan, serving the queue."""
    glog = core.services.glog
    slot = slot_of(found)
    if slot is None or slot.head is None:
        return FreeAnswer.USUAL, None
    try:
        state = glog.at(slot.head)
    except LvError:  # a free record naming a version that is not there: take the key as usual
        return FreeAnswer.USUAL, None
    result = outcome_of(glog, core.id, waiter.known, head=state)
    if result is not None:
        return FreeAnswer.DECIDED, result
    try:
        fast = _commit_fast(core, writes, accesses, given=(slot, state), own_request=waiter.key,
                            settled=waiter.settled)
    except BaseException:  # aborted: no holder may commit the request of a transaction that gives up
        with contextlib.suppress(LvError):
            withdraw(core.store, waiter.key)
        raise
    if fast.route is Route.PUBLISHED:
        return FreeAnswer.DECIDED, fast.published
    waiter.settled = waiter.settled and fast.route is not Route.USUAL  # (a void plan: probe next time)
    return (FreeAnswer.TAKEN if fast.route is Route.LOST else FreeAnswer.USUAL), None


@dataclass(frozen=True)
class _UnderKey:
    """What the holder read first: the head, the queued requests it commits with its own, the tails of
    its written tables (probing), and its outcome when a holder before decided it (its request was queued)."""

    state: GvlState
    group: Group
    early: dict[str, tuple[int, Future[LogTail]]]
    found: tuple[GvlState, Mapping[str, Any]] | None


def _read_under_key(core: TxnCore, held: HeldLock, waiter: Waiter, accesses: list[TableAccess]) -> _UnderKey:
    taken = frozenset(a.table for a in accesses)
    chosen = in_background(gather, core.store, core.id, taken) if held.waited else None
    gone = in_background(withdraw, core.store, waiter.key) if waiter.queued else None
    early = probe_early(core.store, accesses, own_txn=core.id)  # with the head read: one round trip
    state = core.services.glog.head()
    held.head = state.version
    if gone is not None:
        gone.result()  # no later holder may pick our request up
    group = serve(core.store, state, chosen.result()) if chosen is not None else Group()
    found = outcome_of(core.services.glog, core.id, waiter.known, head=state) if waiter.queued else None
    return _UnderKey(state, group, early, found)


def _commit_held(core: TxnCore, held: HeldLock, waiter: Waiter, writes: Mapping[str, list],
                 accesses: list[TableAccess]) -> Published:
    """Validate under the key (state "validating") with the head read there, and commit the plan."""
    crashpoint("validation-key-held")
    read = _read_under_key(core, held, waiter, accesses)
    state, group = read.state, read.group
    if read.found is not None:  # decided by the holder before us (its global versions were just read)
        if group.members:
            held.commit(group.plan, state, additions=group.additions, group=group.members,
                        background=cleaner.background)
            forget(core, group)
        return joined(core, read.found, writes, waiter.key)
    outcome = validate(collect(core.store, state, accesses, core.policy, own_txn=core.id,
                               footprints=core.book.footprints(), early=read.early), core.policy)
    if outcome.compatible:
        _check_foreign(core, outcome)
    _emit(core, outcome, None if not outcome.compatible else state.version + 1)
    if not outcome.compatible:
        updates = _whole(core, state, _catch_up_versions(outcome))
        if updates or group.members:
            held.commit(group.plan, state, additions={**group.additions, **updates}, group=group.members,
                        background=cleaner.background)
            forget(core, group)
        raise outcome.to_abort()
    try:
        planned = _planned(core, writes, outcome, state)
    except PartMissing as e:
        raise aborted("part_missing", {"table": e.table, "version": e.version,
                                       "part": f"{e.sibling}@{e.sibling_version}"}, what=str(e)) from None
    freed = _fill_unused_markers(core, planned.names)
    core.book.decision = Decision("plan", planned.names)
    try:
        result = held.commit(planned.plan + group.plan, state, additions={**group.additions, **planned.additions},
                             group=group.members, background=cleaner.background)
    except TransactionAborted:  # our entries broke: the group's are published all the same
        forget(core, group)
        raise
    forget(core, group)
    return _published(core, writes, result, freed, state)
