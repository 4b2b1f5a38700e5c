"""The LV[I] commit (docs/PROTOCOL.md, "Modules #4.1/#4.2"): settle marker tables (LV[R]), then validate
R1-R3 and publish one global version. The route is the machine of :mod:`lv_core.txn.commitstep`;
:class:`_Run` performs its requests."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Mapping

from lv_core import concurrency
from lv_core import events as ev
from lv_core.concurrency import Pool
from lv_core.delta.actions import decode_commit
from lv_core.errors import LvError, TransactionAborted
from lv_core.protocol.aborts import aborted
from lv_core.protocol.commitplan import PlannedCommit, build_plan
from lv_core.protocol.conflicts import PredecessorCommit, first_conflict
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.hidden import collect, probe_early
from lv_core.protocol.ict import commit_info_first
from lv_core.protocol.lockrecord import COMMITTING
from lv_core.protocol.markers import encode_freed, lakevilla_commit_info, read_version, write_version
from lv_core.protocol.parts import PartMissing, close_parts
from lv_core.protocol.validation import LogTail, TableAccess, ValidationOutcome, validate
from lv_core.protocol.vlock import FREE, FreeAnswer, FreeSlot, HeldLock, KeyLook, LockRecord, ValidationTimeout, slot_of
from lv_core.protocol.vqueue import outcome_of, withdraw
from lv_core.testing import crashpoint
from lv_core.txn import cleaner
from lv_core.txn import group as gc
from lv_core.txn.behind import Behind, look_behind, serve_same
from lv_core.txn.commitstep import Answer, Commit, Phase, Request, start, step
from lv_core.txn.core import TxnCore
from lv_core.txn.publish import Published
from lv_core.txn.readonly import from_log_version, one_global_version
from lv_core.txn.settle import settle_markers
from lv_core.txn.state import Decision, DecisionKind

__all__ = ["commit_isolated", "table_accesses"]


def _retract(core: TxnCore, early: gc.Waiter, error: BaseException) -> tuple[GvlState, Mapping[str, Any]]:
    """Settling failed after the request was queued early: the holder's decision if one committed it (then the
    transaction ends committed: had its settling redone, the holder would have found the same conflict), else
    ``error`` is raised; when that cannot be learnt it ends undecided (files kept, the log decides)."""
    if isinstance(error, Exception):
        try:
            decided = early.retract(3 * core.services.vlock.lease_s)
        except Exception as why:  # noqa: BLE001 - reported with the error below
            decided, error = None, gc.undecided(core, f"{error}; whether a holder committed it is unknown: {why}")
        if isinstance(decided, tuple):
            return decided
    else:  # (interrupted: nothing more is sent)
        gc.undecided(core, str(error))
    raise error


def table_accesses(core: TxnCore, writes: dict[str, list]) -> list[TableAccess]:
    """What validation needs to know of each table the transaction touched."""
    ops = core.book.ops
    out = []
    for t, ts in core.book.tables.items():
        read = any(t in rec.result.reads or t in rec.result.scans for rec in ops)
        written = t in writes
        blind = written and not read and all(rec.op.blind for rec in ops if t in rec.op.tables)
        out.append(TableAccess(t, read=read, written=written, marker=ts.marker_version, blind=blind,
                               read_version=ts.read_version if ts.marker_version is None else None))
    return out


def _emit(core: TxnCore, outcome: ValidationOutcome, gvl_version: int | None) -> None:
    data = outcome.to_json()
    core.validation = data
    core.events.emit(ev.Validated(core.id, compatible=outcome.compatible, gvl_version=gvl_version,
                                 tables=data["tables"], failed_rule=outcome.rule))


def _refusal(core: TxnCore, outcome: ValidationOutcome) -> TransactionAborted | None:
    """The abort of a write moving past pending markers or foreign commits that touch what it read."""
    tables = core.book.tables
    for t, v in outcome.tables.items():
        if v.written and v.w is not None and any(p < v.w for p in v.pending) and (
                v.moved_from is not None or tables[t].marker_version is None):
            # (the global version published now would gain content when that marker commits)
            return aborted("pending_above", {"table": t, "pending": list(v.pending)}, table=t,
                           first=min(p for p in v.pending if p < v.w),
                           needs=v.moved_from if v.moved_from is not None else v.w)
        if not v.written or tables[t].marker_version is not None:
            continue
        if v.pending and not v.blind:
            return aborted("pending_taken", {"table": t, "pending": list(v.pending)}, table=t, first=v.pending[0])
        preds = []  # (past the version read: current.catch_up may have read past foreign commits)
        for fv in (f for f in v.foreign if v.r is None or f > v.r):
            st = read_version(core.store, t, fv)
            preds.append(PredecessorCommit(t, fv, st.txn, decode_commit(st.raw, version=fv, table=t)))
        c = first_conflict(core.book.footprints(), preds) if preds else None
        if c is not None:
            return aborted("foreign_lost_update", {"table": t, "version": c.version}, table=t, version=c.version,
                           why=c.why)
    return None


def _whole(core: TxnCore, state: GvlState, versions: dict[str, int]) -> dict[str, int]:
    """``versions`` plus what keeps multi-table commits outside the log whole, dropping what cannot be."""
    versions = dict(versions)
    while versions:
        try:
            return {**versions, **close_parts(core.store, state, versions, own_txn=core.id)}
        except PartMissing as e:
            versions.pop(e.table, None)
    return versions


def _catch_up_versions(outcome: ValidationOutcome) -> dict[str, int]:
    """After an R1 failure on commits outside the log, the versions to publish so a retry reads them (only
    below the first pending marker: a published version never gains content later)."""
    out: dict[str, int] = {}
    for t, v in outcome.tables.items():
        if v.rules["R1"].passed or not v.foreign or v.l is None:
            continue
        limit = min(v.pending) - 1 if v.pending else max(v.foreign)
        target = max((f for f in v.foreign if f <= limit), default=None)
        if target is not None and target > v.l:
            out[t] = target
    return out


def _fill_unused_markers(core: TxnCore, names: dict[str, int]) -> dict[str, int]:
    """An empty commit at each marker the plan does not commit at: the plan's versions above leave no gap."""
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
    """A compatible transaction's table commits, tables to add and written versions."""

    plan: list[PlannedCommit]
    additions: dict[str, int]
    names: dict[str, int]


def _planned(core: TxnCore, writes: Mapping[str, list], outcome: ValidationOutcome, state: GvlState) -> Planned:
    """The plan of a validated transaction (raises PartMissing)."""
    book = core.book
    ci = lakevilla_commit_info(core.id, "LAKEVILLA COMMIT", {
        "preset": core.preset, "tables": sorted(writes), "redo": book.redo_count, "gvl": state.version + 1})
    commits = {t: commit_info_first(actions, ci, core.ict(t)) for t, actions in writes.items()}
    markers = {t: (ts.marker_version, ts.marker_etag) for t, ts in book.tables.items()
               if ts.marker_version is not None and ts.marker_etag is not None}
    names = outcome.write_versions()
    additions = outcome.additions()
    additions.update(close_parts(core.store, state, {**names, **additions}, own_txn=core.id, fixed=frozenset(names)))
    return Planned(build_plan(outcome, commits, markers), additions, names)


def _read_past_head(core: TxnCore) -> bool:
    """Whether a marker table a redo left unwritten was read past the newest head known: the commits it saw
    there need a global version of their own (placed like a writer's, under the key)."""
    head = core.services.glog.known_state() or core.book.head
    return head is not None and any(
        ts.marker_version is not None and (known := head.table_version(t)) is not None and ts.marker_version - 1 > known
        for t, ts in core.book.tables.items())


def commit_isolated(core: TxnCore, deadline: float) -> Published:
    """Validate and commit under LV[I]: settle marker tables, then run the commit's state machine."""
    early: gc.Waiter | None = None
    runs: list[_Run] = []
    redos = core.book.redo_count
    if core.markers and core.book.has_markers():
        early = gc.queue_early(core, table_accesses, deadline, lambda w, found: runs[0].on_free(w, found))
        try:
            settle_markers(core, deadline)  # LV[R]: predecessors resolved and redone, nothing published yet
        except BaseException as e:
            if early is None:
                raise
            decided = _retract(core, early, e)  # (a holder that read the request may have committed it)
            return gc.joined(core, decided, core.book.writes(), early.key)
        if early is not None and early.queuing is not None and early.queuing.exception() is not None:
            early.queued = bool(early.key)  # (the PUT may have landed: its outcome is looked up as a queued one's)
        if early is not None and not early.queued:
            early = None
    writes = core.book.writes()
    run = _Run(core, writes, table_accesses(core, writes), deadline, early)
    runs.append(run)
    if early is not None and core.book.redo_count != redos:  # the request queued early is stale: the settled one
        early.requeue(lambda: gc.make_request(core, writes, run.accesses, early.known))
    past = not writes and _read_past_head(core)
    if past:  # (judged as validate_read_only judges a redo's reads)
        core.policy = dataclasses.replace(core.policy, r1_read_only=True)
    end = run.drive(*start(writes=bool(writes) or past, waiting=early is not None and early.queued and bool(writes)))
    if end.phase is Phase.JOINED:
        assert isinstance(run.decided, tuple) and run.waiter is not None
        return gc.joined(core, run.decided, writes, run.waiter.key)
    if end.phase is not Phase.COMMITTED:  # ABORTED, TIMED_OUT
        assert run.error is not None
        raise run.error
    assert run.published is not None
    return run.published


class _Run:
    """Performs the requests of one run of the commit's machine (a method per :class:`Request`) and keeps
    what they read. ``waiter``, ``found``: a queued transaction's try of the free key ``found``."""

    def __init__(self, core: TxnCore, writes: Mapping[str, list], accesses: list[TableAccess], deadline: float,
                 waiter: gc.Waiter | None = None, found: tuple[LockRecord, str] | None = None) -> None:
        self.core, self.writes, self.accesses, self.deadline = core, writes, accesses, deadline
        self.waiter, self.found = waiter, found
        self.seen: KeyLook | None = None  # the key as the fast route read it (saves the wait a GET)
        self.slot: FreeSlot | None = None  # the free record the fast route claims
        self.state: GvlState | None = None  # the head validated against
        self.early: dict[str, tuple[int, Future[LogTail]]] = {}  # the written tables' tails, probed or known
        self.chosen: Future[list] | None = None  # the queued requests to serve, read beside
        self.behind: Future[Behind] | None = None  # the requests queued on our tables (serve_same), read beside
        self.group = gc.Group()  # the queued requests committed with ours
        self.outcome: ValidationOutcome | None = None
        self.planned: Planned | None = None
        self.held: HeldLock | None = None
        self.freed: dict[str, int] = {}
        self.published: Published | None = None  # COMMITTED
        self.decided: gc.Decided | None = None  # JOINED: the global version naming the transaction
        self.error: LvError | None = None  # ABORTED, TIMED_OUT

    def drive(self, c: Commit, requests: list[Request]) -> Commit:
        """Run the machine from ``c`` to a final phase; a key held meanwhile is released by then."""
        try:
            while not c.phase.final:
                answer: Any = None
                for r in requests:
                    answer = getattr(self, r.name.lower())()
                c, requests = step(c, answer)
            return c
        finally:
            if self.held is not None:
                self.held.__exit__(None, None, None)  # released unless the plan's release runs in the background

    # ------------------------------------------------------------ read-only
    def validate_read_only(self) -> Answer:
        """Validate a transaction that writes nothing without the key; write nothing."""
        core, book = self.core, self.core.book
        policy, accesses = core.policy, self.accesses
        if book.has_markers():  # a redo left nothing to write: its reads may no longer be one snapshot
            policy = dataclasses.replace(policy, r1_read_only=True)
        self.state = state = core.services.glog.head()
        if not book.has_markers() and policy.snapshot_read_only and one_global_version(core):
            # only commits outside the log are checked (docs/PROTOCOL.md, "Why the relaxed rules stay serializable")
            accesses = [from_log_version(a, state) for a in accesses]
        self.outcome = validate(collect(core.store, state, accesses, policy, own_txn=core.id, parallel=1,
                                        footprints=book.footprints()), policy)
        _emit(core, self.outcome, None)
        self.published = Published({}, {}, state)
        return Answer.COMPATIBLE if self.outcome.compatible else Answer.INCOMPATIBLE

    # ------------------------------------------------------------ the fast route: the free key, with the plan
    def find_free_key(self) -> Answer:
        """The free record to take the key with and its head: warm (this process's last release), no request
        and, behind settled markers, no probe; cold, 1 GET with the tails read beside. Queued (``found``):
        first, whether a holder before decided it (docs/PROTOCOL.md, "Fast path"). A holder reads queued
        requests only after the free record its claim is conditioned on (``found``), never beside it: one read
        before a writer withdrew its request at its deadline could be claimed on a record written after the
        writer's key round. So the cold route serves none in its claim; the session's further rounds do
        (``keep_serving``, reading the queue while the plan is written)."""
        core, accesses, queued = self.core, self.accesses, self.found is not None
        glog, vlock = core.services.glog, core.services.vlock
        if queued:
            assert self.waiter is not None and self.found is not None
            if slot_of(self.found) is not None:
                self._look_behind()  # (beside the global versions read to look for the outcome)
            self.waiter.catch_up(self.found[0].head)
            if not self._free_head(self.found):
                return Answer.BUSY
            assert self.state is not None
            self.decided = outcome_of(glog, core.id, self.waiter.known, head=self.state)
            if self.decided is not None:
                return Answer.DECIDED
        if not accesses or any(a.marker is None and a.written for a in accesses):
            return Answer.BUSY  # a write without marker is placed by the usual route (next free version, moves)
        if not queued:
            if vlock.contended():
                return Answer.BUSY  # others validate all the time: queue at once (group commit)
            self.slot, self.state = slot, state = vlock.free_slot(), glog.known_state()
            if slot is not None and not slot.queued and state is not None and slot.head == state.version:
                self.early = self._settled(state)  # warm (with requests queued: cold, to serve them)
                return Answer.FREE
        elif self.waiter is not None and self.waiter.settled:  # (the queue waits for keep_serving)
            assert self.state is not None
            self.early = self._settled(self.state)
            if self.early:
                return Answer.FREE
        self.early = probe_early(core.store, accesses, own_txn=core.id)
        if queued:
            self.chosen = self._gather()  # (read after ``found``, the record the claim is conditioned on)
            return Answer.FREE
        self.seen = KeyLook(vlock.look())  # (the queue is not read beside it: see the docstring)
        if self._free_head(self.seen.found):
            return Answer.FREE
        if self.seen.found is not None and self.seen.found[0].state != FREE:
            vlock.note_contention()
        return Answer.BUSY

    def _settled(self, state: GvlState) -> dict[str, tuple[int, Future[LogTail]]]:
        """Each table's tail when every one is written behind a settled marker none of ``state`` names (no blind
        append among several): its own marker, unprobed (what a probe from below it finds). Else none."""
        accesses = self.accesses
        if all(a.written and a.marker is not None and not (a.blind and len(accesses) > 1)
               and ((known := state.table_version(a.table)) is None or known < a.marker) for a in accesses):
            return {a.table: (a.marker - 1, concurrency.done(LogTail(a.marker - 1, ("own",))))
                    for a in accesses if a.marker is not None}
        return {}

    def _free_head(self, found: tuple[LockRecord, str] | None) -> bool:
        """Whether ``found`` is a free record naming a head this process knows and the transaction did not read
        past (a newer one is vouched for under the key, :meth:`HeldLock.read_head`): then :attr:`slot`,
        :attr:`state`."""
        slot = slot_of(found)
        if slot is None or slot.head is None:
            return False
        if self.core.book.head is not None and self.core.book.head.version > slot.head:
            return False
        try:
            self.slot, self.state = slot, self.core.services.glog.at(slot.head)
        except LvError:  # a free record naming a version that is not there: the usual route reads the head
            return False
        return True

    def _gather(self) -> Future[list]:
        tables = frozenset(a.table for a in self.accesses)
        return concurrency.submit(Pool.TASKS, gc.gather, self.core.store, self.core.id, tables)

    def _look_behind(self) -> None:
        """Read the requests queued behind ours on our tables (we queued early), beside what comes next."""
        core = self.core
        tops = {t: ts.marker_version for t, ts in core.book.tables.items() if t in self.writes and ts.marker_version}
        if self.waiter is not None and self.waiter.early and self.behind is None and tops:
            self.behind = concurrency.submit(Pool.TASKS, look_behind, core.store, core.id, tops, dict(core.logged))

    def _serve_behind(self, verdict: Answer) -> Answer:
        """Compatible: add the requests behind ours that may follow our entries (serve_same)."""
        if verdict is Answer.COMPATIBLE and self.behind is not None:
            assert self.state is not None and self.planned is not None
            serve_same(self.core.store, self.state, self.core.id, self.planned.plan, self.behind.result(), self.group)
        return verdict

    def validate_at_free_head(self) -> Answer:
        """Validate at the free key's head (cold: serving the queue as a holder would)."""
        assert self.state is not None
        if self.chosen is not None:
            self.group = gc.serve(self.core.store, self.state, self.chosen.result())
        return self._serve_behind(self._verdict(fast=True))

    def claim_with_plan(self) -> Answer:
        """PUT-if-match "committing" with the plan on the free record (success: its head is still the head)."""
        p, g, state, slot = self.planned, self.group, self.state, self.slot
        assert p is not None and state is not None and slot is not None
        crashpoint("validation-key-held")  # (validated, nothing recorded)
        self.held = self.core.services.vlock.acquire_planned(
            self.core.id, p.plan + g.plan, state, slot, additions={**g.additions, **p.additions},
            group=g.members, serving=gc.SERVING)  # (then serves the queue: read while the plan is written)
        if self.held is None:
            return Answer.LOST
        assert self.outcome is not None
        _emit(self.core, self.outcome, state.version + 1)
        return Answer.TAKEN

    def withdraw_request(self) -> None:
        """(a committed request left behind would fail R3 for any later holder)"""
        core, waiter = self.core, self.waiter
        assert waiter is not None
        cleaner.background(f"validation request of {core.id}", lambda: withdraw(core.store, waiter.key))

    # ------------------------------------------------------------ the usual route: wait for the key
    def wait_for_key(self) -> Answer:
        core, vlock, writes, accesses = self.core, self.core.services.vlock, self.writes, self.accesses
        if self.waiter is None:  # (else queued early: commit_isolated)
            self.waiter = gc.Waiter(core, lambda: gc.make_request(core, writes, accesses, core.services.glog.known()),
                                    self.deadline, on_free=self.on_free)
        left = max(0.001, self.deadline - time.monotonic())
        try:
            self.held = vlock.acquire_or_join(core.id, self.waiter, timeout_s=left + 3 * vlock.lease_s,
                                              on_wait=self._on_wait, seen=self.seen, serving=gc.SERVING)
        except ValidationTimeout as e:
            self.error = e
            return Answer.TIMED_OUT
        if self.held is not None:
            return Answer.HELD
        self.decided = self.waiter.decided  # by another holder, or by taking the free key with its plan
        if isinstance(self.decided, Published):
            self.published = self.decided
            return Answer.PUBLISHED
        return Answer.DECIDED

    def _on_wait(self, rec: LockRecord) -> None:
        self.core.events.emit(ev.Waiting(self.core.id, table=ev.VALIDATION_KEY, version=-1, on_txn=rec.txn))

    def on_free(self, waiter: gc.Waiter, found: tuple[LockRecord, str]) -> tuple[FreeAnswer, gc.Decided | None]:
        """Queued, and the key is free: the fast route from the free record found (a run of its own)."""
        run = _Run(self.core, self.writes, self.accesses, self.deadline, waiter, found)
        try:
            end = run.drive(*start(writes=True, queued=True))
            if end.phase is Phase.ABORTED:
                assert run.error is not None
                raise run.error
        except BaseException:  # aborted: no holder may commit the request of a transaction that gives up
            with contextlib.suppress(LvError):
                withdraw(self.core.store, waiter.key)
            raise
        if end.phase in (Phase.COMMITTED, Phase.JOINED):
            return FreeAnswer.DECIDED, run.published if end.phase is Phase.COMMITTED else run.decided
        if end.last is Answer.LOST:
            return FreeAnswer.TAKEN, None
        waiter.settled = False  # (a void plan: probe next time)
        return FreeAnswer.USUAL, None

    # ------------------------------------------------------------ under the key ("validating")
    def read_under_key(self) -> Answer:
        """The head, the queue and the tails in one round trip; and whether a holder before decided us."""
        crashpoint("validation-key-held")
        core, held, waiter = self.core, self.held, self.waiter
        assert held is not None and waiter is not None
        chosen = self._gather() if held.waited else None
        gone = concurrency.submit(Pool.TASKS, withdraw, core.store, waiter.key) if waiter.queued else None
        self._look_behind()
        self.early = probe_early(core.store, self.accesses, own_txn=core.id)  # with the head read: one round trip
        self.state = state = held.read_head(core.services.glog)
        if gone is not None:
            gone.result()  # no later holder may pick our request up
        self.group = gc.serve(core.store, state, chosen.result()) if chosen is not None else gc.Group()
        self.decided = outcome_of(core.services.glog, core.id, waiter.known, head=state) if waiter.queued else None
        return Answer.DECIDED if self.decided is not None else Answer.UNDECIDED

    def validate_under_key(self) -> Answer:
        assert self.state is not None
        verdict = self._serve_behind(self._verdict(fast=False))
        if verdict is not Answer.REFUSED:
            assert self.outcome is not None
            _emit(self.core, self.outcome, None if verdict is Answer.INCOMPATIBLE else self.state.version + 1)
        return verdict

    def fill_markers(self) -> None:
        assert self.planned is not None
        self.freed = _fill_unused_markers(self.core, self.planned.names)

    def commit_plan(self) -> Answer:
        """Write and publish the plan (and the group's), first recorded in the key unless taken with it (fast)."""
        core, held, p, g, state = self.core, self.held, self.planned, self.group, self.state
        assert held is not None and p is not None and state is not None
        fast = held.record.state == COMMITTING
        # (crash clean-up reads the decision: a decided commit ends "unknown", rolled forward)
        before, core.book.decision = core.book.decision, Decision(DecisionKind.PLAN, p.names)
        try:
            with held:
                result = (held.execute(state, background=cleaner.background) if fast else
                          held.commit(p.plan + g.plan, state, additions={**g.additions, **p.additions},
                                      group=g.members, background=cleaner.background))
        except TransactionAborted as e:
            gc.forget(core.store, g.keys)  # our entries broke: the group's were published all the same
            if not fast or e.rule != "R2" or e.details.get("written") or g.members:
                raise
            core.book.decision = before  # void: a marker's version taken, nothing written; the usual route decides
            return Answer.VOID
        gc.forget(core.store, g.keys)
        for t, v in self.freed.items():
            core.events.emit(ev.MarkerFreed(core.id, table=t, version=v, reason="read-only"))
        for t, v in result.versions.items():
            core.book.mark_published(t, v, self.writes.get(t, []))
        self.published = Published(dict(result.versions), self.freed, result.gvl or state)
        return Answer.PUBLISHED

    execute_plan = commit_plan  # (the fast route's: the key was taken with the plan)

    def publish_others(self) -> Answer:
        """Publish the group served and, after an R1 failure, the foreign versions found (catch-up; read-only:
        under a key taken for it, best effort). Decided by a holder before: the group only."""
        updates = {}
        if self.decided is None:
            assert self.outcome is not None
            updates, self.error = _catch_up_versions(self.outcome), self.outcome.to_abort()
        if self.held is not None:
            assert self.state is not None
            self._publish_others(self.held, self.state, updates)
        elif updates:
            vlock = self.core.services.vlock
            with contextlib.suppress(Exception):  # the abort is what the caller needs; a retry catches up
                with vlock.acquire(self.core.id, timeout_s=max(0.001, self.deadline - time.monotonic())) as held:
                    state = held.read_head(self.core.services.glog)
                    self._publish_others(held, state, updates)
        return Answer.DONE

    def _publish_others(self, held: HeldLock, state: GvlState, updates: dict[str, int]) -> None:
        """Publish the group and the versions of ``updates`` the head does not name yet, if any."""
        fresh = _whole(self.core, state, {t: v for t, v in updates.items()
                                          if (known := state.table_version(t)) is None or known < v})
        g = self.group
        if fresh or g.members:
            held.commit(g.plan, state, additions={**g.additions, **fresh}, group=g.members,
                        background=cleaner.background)
            gc.forget(self.core.store, g.keys)

    def _verdict(self, *, fast: bool) -> Answer:
        """Validate at :attr:`state` and plan (``fast``: not with a marker to fill, that is under the key)."""
        core, state = self.core, self.state
        assert state is not None
        self.outcome = outcome = validate(collect(core.store, state, self.accesses, core.policy, own_txn=core.id,
                                                  footprints=core.book.footprints(), early=self.early), core.policy)
        if not outcome.compatible:
            return Answer.INCOMPATIBLE
        self.error = _refusal(core, outcome)
        if self.error is not None:
            return Answer.REFUSED
        names = outcome.write_versions()
        unused = any(a.marker is not None and names.get(a.table) != a.marker for a in self.accesses)
        if unused and fast:
            return Answer.UNUSED_MARKER
        try:
            self.planned = _planned(core, self.writes, outcome, state)
        except PartMissing as e:
            self.error = aborted("part_missing", {"table": e.table, "version": e.version,
                                                  "part": f"{e.sibling}@{e.sibling_version}"}, what=str(e))
            return Answer.PART_MISSING
        return Answer.UNUSED_MARKER if unused else Answer.COMPATIBLE
