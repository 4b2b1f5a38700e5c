"""The validation lock (#4.2): one validating transaction at a time, with a lease and takeover.

``_lakevilla/validation.lock`` (record: :mod:`lv_core.protocol.lockrecord`). State machine::

    free/(absent) --PUT-if-match/PUT-create {validating}--> validating --PUT-if-match {committing, plan}--> committing
    validating --PUT-if-match {free, head}--> free        (incompatible, or read-only: nothing written)
    committing --table commits, publish gvl n+1, PUT-if-match {free, head n+1}--> free
    free --PUT-if-match {committing, plan}--> committing  (the fast path: see below)

The holder renews its lease (PUT-if-match with a new ``lease_expires``) every ``lease_s / 3`` from
a daemon thread. A waiter polls (GET, backoff ``poll_min_s`` doubling to ``poll_max_s``) until the
key is free (then PUT-if-match on the free record's etag, or PUT-create when there is no key) or the
holder's lease expired, which it decides in one of two ways: the record's ``lease_expires`` is more
than ``skew_s`` in the past by the waiter's clock, or the record's etag has not changed for
``lease_s`` as measured by the waiter (needs no synchronised clocks: a live holder changes it every
``lease_s / 3``). It then takes the lock over with PUT-if-match on the etag it read:

- state "validating": roll back = nothing to undo (the holder wrote nothing); the taker simply
  holds the lock now (state "validating", its own txn);
- state "committing": roll forward = the taker keeps the plan in the record (state "committing",
  ``recovering`` = the crashed txn) and runs :func:`~lv_core.protocol.commitplan.execute_plan`
  (table commits not yet present, then the global version), then switches the record to its own
  "validating" state and holds the lock.

So no LV[I] reader ever sees part of a multi-table commit, and a crashed validator blocks others
at most ``lease_s`` plus one poll interval.

A record is checked when read (:meth:`LockRecord.decode`): an unreadable one reads as an expired
"validating" lock (taken over at once); a "committing" one whose plan is malformed (written by a
buggy or foreign client: an invalid table name, a bad version or mode, commit bytes that are not
a Delta commit, see :func:`~lv_core.protocol.commitplan.parse_plan`) reads with ``invalid=True``
and an empty plan: after its lease it is taken over and rolled back (its plan is never executed,
by a taker nor by :func:`~lv_core.protocol.recovery.recover`), so it cannot block the warehouse.

Release overwrites the record with a "free" one (PUT-if-match on the holder's etag: a holder that
was taken over changes nothing) naming the newest global version the holder knows. Only a holder
publishes global versions, so when the next PUT-if-match on the etag of that free record succeeds,
nobody held the lock in between and the head is still the one it names: a process that released the
lock last (:meth:`ValidationLock.free_slot`) validates against its cached head without reading the
log, and takes the lock with its plan in one request (:meth:`ValidationLock.acquire_planned`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Mapping, Protocol, Sequence

from lv_core.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StorageError,
    TransactionAborted,
    TransactionError,
)
from lv_core.protocol.commitplan import PlannedCommit, PlanResult, execute_plan
from lv_core.protocol.gvl import GlobalLog, GlobalLogConflict, GlobalVersionNotFound, GvlState
from lv_core.protocol.layout import client_label
from lv_core.protocol.lockrecord import (
    COMMITTING,
    FREE,
    LOCK_KEY,
    UNREAD,
    VALIDATING,
    FreeSlot,
    LockRecord,
    Takeover,
    Unread,
    free_record,
    slot_of,
)
from lv_core.protocol.vqueue import any_queued
from lv_core.storage.base import CREATE, IfMatch, ObjectStore
from lv_core.testing import crashpoint

log = logging.getLogger(__name__)

#: A waiter that queued a commit request polls at least this often (its outcome may be published any time).
QUEUED_POLL_S = 0.05
#: How long after finding the lock held (or losing a claim) a client queues at once instead of trying
#: to take the lock with its plan (:meth:`ValidationLock.contended`).
CONTENDED_S = 2.0
#: How many times the holder retries a plan whose requests failed before leaving it to a roll forward.
PLAN_ATTEMPTS = 3


class ValidationTimeout(TransactionAborted):
    """Waiting for the validation lock took longer than the transaction's timeout (rule "timeout")."""

    def __init__(self, reason: str, *, details: dict | None = None) -> None:
        super().__init__(reason, "timeout", details=details)


class ValidationLockLost(TransactionError):
    """The lock was taken over (this holder's lease ran out) before its commit plan was recorded.

    Nothing of the transaction was written or published: it may validate again.
    """


class CommitPending(TransactionError):
    """The commit was decided (plan recorded) but writing it kept failing.

    The lock stays in state "committing" and the next validator rolls it forward once the lease
    expires: the transaction *will* commit; its outcome is not known to this client yet.
    """


class Queued(Protocol):
    """A waiter that queued a commit request (see :meth:`ValidationLock.acquire_or_join`)."""

    def busy(self) -> None:
        """The lock is held by someone else: queue the request."""

    def done(self, record: "LockRecord | None") -> bool:
        """Whether the wait is over (the request was decided by a holder); ``record``: the lock now."""

    def free(self, found: "tuple[LockRecord, str]") -> "bool | None":
        """The lock is free (``found``: its free record and etag): True when the wait is over (the
        transaction was decided here, e.g. committed by taking the lock with its plan); False when the
        lock was taken meanwhile (look again); None to take it as usual."""


_LOOK = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lv-vq-look")


class ValidationLock:
    """Acquires the validation lock of a warehouse (thread-safe; one instance may serve many transactions).

    Args:
        store: the object store.
        glog: the global version log (for roll forwards); share the lakehouse's instance.
        lease_s: the holder's lease (renewed every ``lease_s / 3`` while held).
        poll_min_s, poll_max_s: waiting backoff bounds (doubling, with jitter).
        skew_s: clock skew tolerated before a record's ``lease_expires`` alone proves it expired
            (default ``lease_s``); expiry by observation (etag unchanged for ``lease_s``) is always used.
    """

    def __init__(self, store: ObjectStore, glog: GlobalLog | None = None, *, lease_s: float = 30.0,
                 poll_min_s: float = 0.005, poll_max_s: float = 0.2, skew_s: float | None = None) -> None:
        if lease_s <= 0 or poll_min_s <= 0 or poll_max_s < poll_min_s:
            raise ValueError("need lease_s > 0 and 0 < poll_min_s <= poll_max_s")
        self.store = store
        self.glog = glog if glog is not None else GlobalLog(store)
        self.lease_s = lease_s
        self.poll_min_s = poll_min_s
        self.poll_max_s = poll_max_s
        self.skew_s = lease_s if skew_s is None else skew_s
        self._free_mu = threading.Lock()
        self._free: FreeSlot | None = None  # the free record this instance wrote last
        self._contended_until = 0.0  # monotonic: until then, commits of this instance go the usual way

    def read(self) -> tuple[LockRecord, str] | None:
        """The current record and its etag, or None when nobody holds the lock. Cost: 1 GET."""
        found = self._read_any()
        return None if found is None or found[0].state == FREE else found

    def look(self) -> tuple[LockRecord, str] | None:
        """The record (a free one too) and its etag; None: no key. Cost: 1 GET."""
        return self._read_any()

    def _read_any(self) -> tuple[LockRecord, str] | None:
        """The record (a free one too) and its etag; None: no key. Cost: 1 GET."""
        try:
            res = self.store.get(LOCK_KEY)
        except NotFound:
            return None
        return LockRecord.decode(res.data), res.etag

    def free_slot(self) -> "FreeSlot | None":
        """The free record this instance wrote last, while it may still be current (None: another holder
        was seen since, or none was written). No request."""
        with self._free_mu:
            return self._free

    def contended(self) -> bool:
        """Whether this instance recently found the lock held or lost a claim with a plan: then taking
        it with a plan would mostly fail (others validate all the time) and queueing at once (group
        commit) is faster. No request."""
        return time.monotonic() < self._contended_until

    def note_contention(self) -> None:
        """The lock was found held, or a claim with a plan lost: see :meth:`contended`."""
        self._contended_until = time.monotonic() + CONTENDED_S

    def _remember_free(self, slot: "FreeSlot | None") -> None:
        with self._free_mu:
            self._free = slot

    def _claim(self, rec: LockRecord, free_etag: str | None) -> str | None:
        """Write ``rec`` over the free record ``free_etag`` (PUT-if-match) or, without one, where there
        is no key (PUT-create). Returns the new etag, None when the lock is not free that way."""
        try:
            if free_etag is not None:
                return self.store.put(LOCK_KEY, rec.encode(), mode=IfMatch(free_etag))
            return self.store.put(LOCK_KEY, rec.encode(), mode=CREATE)
        except (AlreadyExists, PreconditionFailed, NotFound):
            return None
        finally:
            self._remember_free(None)

    def acquire_planned(self, txn: str, plan: Sequence[PlannedCommit], base: GvlState, slot: "FreeSlot", *,
                        additions: Mapping[str, int] | None = None,
                        group: Mapping[str, Mapping[str, Any]] | None = None) -> "HeldLock | None":
        """Take the lock straight into state "committing" with ``plan`` (validated against ``base``), by
        one PUT-if-match on the free record ``slot`` (:meth:`free_slot`, or :func:`slot_of` :meth:`look`), whose head
        is ``base``.

        Success proves that nobody held the lock since that record was written, so ``base`` is still
        the newest global version: the caller then runs :meth:`HeldLock.execute`. Returns None
        (nothing written) when the record is not that one any more: validate the usual way.
        ``group``: queued transactions whose commits ``plan`` also holds (as for :meth:`HeldLock.commit`).
        """
        if slot.head != base.version:
            return None
        now = time.time()
        rec = LockRecord(txn, COMMITTING, self.lease_s, now + self.lease_s, client_label(), now, base.version,
                         plan=tuple(plan), plan_txn=txn, additions=dict(additions or {}), group=dict(group or {}))
        etag = self._claim(rec, slot.etag)
        if etag is None:
            self.note_contention()
            return None
        return HeldLock(self, rec, etag, [])

    def acquire(self, txn: str, *, timeout_s: float, gvl_base: int | None = None,
                on_wait: Callable[[LockRecord], None] | None = None) -> "HeldLock":
        """Take the lock for ``txn``, waiting (polling) for the holder and taking over an expired one.

        ``on_wait`` is called with the holder's record whenever the waited-for holder or its state
        changes (for ``Waiting`` events). Cost: 1 PUT-if-match when this instance released the lock last
        (1 PUT-create when there is no key); otherwise 1 GET per poll round, then 1 PUT-if-match on the
        free record (or PUT-create), or on an expired holder's record (takeover; a roll forward adds the
        plan's writes, see :func:`~lv_core.protocol.commitplan.execute_plan`, and 1 PUT-if-match).

        Raises:
            ValidationTimeout: not acquired within ``timeout_s`` (``.rule == "timeout"``).
            GlobalLogConflict: a roll forward found its global version taken (mutual exclusion broken).
            StorageError: the store failed; if it failed during a roll forward, the crashed holder's plan
                stays recorded and the next waiter completes it after this one's lease.
        """
        held = self._acquire(txn, timeout_s, gvl_base, on_wait, None)
        assert held is not None
        return held

    def acquire_or_join(self, txn: str, queue: "Queued", *, timeout_s: float, gvl_base: int | None = None,
                        on_wait: Callable[[LockRecord], None] | None = None,
                        seen: "tuple[LockRecord, str] | None | Unread" = UNREAD) -> "HeldLock | None":
        """:meth:`acquire`, for a transaction that queues a commit request when the lock is busy
        (group commit): ``queue.busy()`` is called once, when the lock is first found held, and
        ``queue.done(record)`` with every record polled (None: the lock is free) before anything is
        done with it; once it returns True the wait ends without the lock (None is returned: another
        holder decided the transaction). ``seen``: what :meth:`look` returned just before (saves a GET).
        Raises what :meth:`acquire` raises, and what ``queue`` raises."""
        return self._acquire(txn, timeout_s, gvl_base, on_wait, queue, seen)

    def _acquire(self, txn: str, timeout_s: float, gvl_base: int | None,
                 on_wait: Callable[[LockRecord], None] | None, queue: "Queued | None",
                 seen: "tuple[LockRecord, str] | None | Unread" = UNREAD) -> "HeldLock | None":
        deadline = time.monotonic() + timeout_s
        first_seen: dict[str, float] = {}  # etag -> when this waiter first saw it (monotonic)
        delay = self.poll_min_s
        last_seen: tuple[str, str] | None = None
        takeovers: list[Takeover] = []
        tried = False
        # a queued waiter's outcome can be published by any holder: it looks at most QUEUED_POLL_S later
        cap = self.poll_max_s if queue is None else min(self.poll_max_s, QUEUED_POLL_S)
        slot = self.free_slot()
        free_etag = slot.etag if slot is not None else None
        # Without a free record of its own to claim, look first: the key exists (free or held) unless
        # the warehouse never validated, so a blind PUT-create would only fail.
        look = free_etag is None or not isinstance(seen, Unread)
        while True:
            if not look:
                now = time.time()
                mine = LockRecord(txn, VALIDATING, self.lease_s, now + self.lease_s, client_label(), now, gvl_base)
                etag = self._claim(mine, free_etag)
                if etag is not None:
                    return HeldLock(self, mine, etag, takeovers, waited=tried or self.contended())
            look = False
            while True:
                found, seen = (self._read_any(), seen) if isinstance(seen, Unread) else (seen, UNREAD)
                if found is None or found[0].state == FREE:
                    if queue is not None and queue.done(None):
                        return None
                    if queue is not None and found is not None:
                        decided = queue.free(found)
                        if decided:
                            return None
                        if decided is False:
                            continue  # taken meanwhile: look again
                    free_etag = found[1] if found is not None else None
                    break  # released: claim it at once
                rec, etag = found
                if not tried:
                    self.note_contention()
                    if queue is not None:
                        queue.busy()
                tried = True
                if queue is not None and queue.done(rec):
                    return None
                seen_at = first_seen.setdefault(etag, time.monotonic())
                if self._expired(rec, seen_at):
                    held = self._take_over(txn, rec, etag, gvl_base, takeovers)
                    if held is not None:
                        held.waited = True
                        return held
                    continue  # someone else changed it first: look again
                if on_wait is not None and last_seen != (rec.txn, rec.state):
                    last_seen = (rec.txn, rec.state)
                    try:
                        on_wait(rec)
                    except Exception:  # a broken callback must not break validation
                        log.exception("on_wait callback failed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ValidationTimeout(
                        f"timed out after {timeout_s:g}s waiting for the validation lock, held by transaction "
                        f"{rec.txn} ({rec.state}). Help: retry, or raise `timeout`; a crashed holder is taken "
                        f"over after its lease ({rec.lease_s:g}s).",
                        details={"holder": rec.txn, "state": rec.state})
                time.sleep(min(left, delay * random.uniform(0.5, 1.0)))
                delay = min(cap, delay * 2)

    def _expired(self, rec: LockRecord, seen_at: float) -> bool:
        if time.time() > rec.lease_expires + self.skew_s:
            return True
        return time.monotonic() - seen_at > rec.lease_s

    def _take_over(self, txn: str, old: LockRecord, etag: str, gvl_base: int | None,
                   takeovers: list[Takeover]) -> "HeldLock | None":
        now = time.time()
        mine = LockRecord(txn, VALIDATING, self.lease_s, now + self.lease_s, client_label(), now, gvl_base)
        roll_forward = old.state == COMMITTING and not old.invalid
        if roll_forward:
            rec = replace(old, txn=txn, lease_s=self.lease_s, lease_expires=now + self.lease_s, client=client_label(),
                          acquired=now, plan_txn=old.plan_txn or old.txn, recovering=old.plan_txn or old.txn)
        else:
            rec = mine
        try:
            new_etag = self.store.put(LOCK_KEY, rec.encode(), mode=IfMatch(etag))
        except PreconditionFailed:
            return None
        held = HeldLock(self, rec, new_etag, takeovers)
        if old.invalid:
            log.warning("validation lock of %s (committing) expired and holds an invalid plan (%s): taken over "
                        "by %s, the plan is not executed", old.plan_txn or old.txn, old.invalid_reason, txn)
            takeovers.append(Takeover(old.txn, old.state, "invalid-plan-rolled-back"))
            return held
        if not roll_forward:
            log.info("validation lock of %s (validating) expired: taken over by %s", old.txn, txn)
            takeovers.append(Takeover(old.txn, old.state, "rolled-back"))
            return held
        plan_txn = old.plan_txn or old.txn
        log.info("validation lock of %s (committing) expired: %s rolls it forward", plan_txn, txn)
        try:
            base = old.gvl_base if old.gvl_base is not None else -1
            result = execute_plan(self.store, self.glog, old.plan, txn=plan_txn, gvl_base=base,
                                  additions=old.additions, group=old.group)
        except (GlobalVersionNotFound, GlobalLogConflict) as e:
            # A plan that can never complete (its base global version does not exist, or the next one
            # was published by another transaction): a legitimate holder cannot have recorded it.
            # Roll it back instead of making every later validator fail on it.
            log.warning("validation lock of %s (committing) holds a plan that cannot complete (%s): taken over "
                        "by %s and rolled back", plan_txn, e, txn)
            takeovers.append(Takeover(old.txn, old.state, "impossible-plan-rolled-back"))
            held._transition(mine)
            return held
        except BaseException:
            held._abandon()  # keep the plan recorded; the next waiter rolls it forward after our lease
            raise
        takeovers.append(Takeover(old.txn, old.state, "rolled-forward" if result.committed else "plan-rolled-back",
                                  result))
        held._transition(mine)
        return held


class HeldLock:
    """The validation lock while held by one transaction. Use as a context manager.

    Leaving the ``with`` block releases the lock unless :meth:`commit` already did (an exception
    before :meth:`commit` therefore releases it: nothing was written).

    Attributes:
        txn: the holder.
        takeovers: locks taken over from crashed holders while acquiring this one.
        waited: it was acquired after waiting (so other transactions may have queued requests).
    """

    def __init__(self, lock: ValidationLock, record: LockRecord, etag: str, takeovers: list[Takeover],
                 waited: bool = False) -> None:
        self.lock = lock
        self.waited = waited  # acquired after waiting for another holder (others may have queued)
        self.txn = record.txn
        self.takeovers = takeovers
        self._record = record
        self._etag = etag
        self._mu = threading.Lock()
        self._lost = False
        self._active = True
        self._handed_off = False  # the release after a published plan runs in the background
        #: the newest global version this holder knows (read under the lock, or published): the free
        #: record names it at release (None: unknown)
        self.head: int | None = None
        self._stop = threading.Event()
        # whether commit requests are queued while it is held (1 LIST, in the background): the free
        # record says so, so that this process does not take it again without serving them
        self._queued = _LOOK.submit(any_queued, lock.store)
        self._thread = threading.Thread(target=self._renew_loop, name=f"lv-vlock-{self.txn[-8:]}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"HeldLock({self.txn}, {self._record.state}{', lost' if self._lost else ''})"

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active and not self._handed_off:
            self.release()

    @property
    def record(self) -> LockRecord:
        return self._record

    @property
    def lost(self) -> bool:
        """True once a renewal or transition found the lock taken over."""
        return self._lost

    # ------------------------------------------------------------------ holder steps
    def commit(self, plan: Sequence[PlannedCommit], base: GvlState, *,
               additions: Mapping[str, int] | None = None,
               group: Mapping[str, Mapping[str, Any]] | None = None,
               background: Callable[[str, Callable[[], object]], None] | None = None) -> PlanResult:
        """Record the plan (state "committing"), write it, publish ``base.version + 1``, release.

        ``background(what, fn)`` runs the release off the caller's path (after the publish only the
        next validator waits for the release, as it would anyway); without it, it runs here.
        ``group``: other transactions whose commits ``plan`` also holds -> ``{"tables", "validation"}``
        (group commit, see :mod:`lv_core.txn.group`); their outcomes are in ``result.group``, and they are
        published even when the holder's own entries break (the TransactionAborted is raised after).

        ``base`` is the global log head read while holding the lock (the one validation used).
        With an empty plan and no additions it only releases (1 PUT-if-match; ``result.gvl`` is ``base``).
        Cost: 1 PUT-if-match + :func:`~lv_core.protocol.commitplan.execute_plan` (1 write per
        table + 1 PUT-create + 1 PUT hint) + 1 PUT-if-match (release).

        Raises:
            ValidationLockLost: the lease ran out and the lock was taken over before the plan was
                recorded; nothing was written (validate again).
            TransactionAborted: the plan broke while writing (``.rule`` "R2": a table version was
                taken by another writer after validation; "timeout": a marker was freed after the
                lease ran out); what was written is rolled back (``details["undone"]``), nothing
                published, the lock released. Markers not yet overwritten are still the caller's.
            CommitPending: writing kept failing; the commit will be completed by a roll forward.
            GlobalLogConflict: global version ``base.version + 1`` was published by someone else.
        """
        self.head = base.version
        if not plan and not additions:  # read-only: nothing to record, write or publish
            self.release()
            return PlanResult(True, {}, base)
        rec = replace(self._record, state=COMMITTING, gvl_base=base.version, plan=tuple(plan), plan_txn=self.txn,
                      additions=dict(additions or {}), group=dict(group or {}))
        self._transition(rec)
        return self.execute(base, background=background)

    def execute(self, base: GvlState, *,
                background: Callable[[str, Callable[[], object]], None] | None = None) -> PlanResult:
        """Write the plan recorded in the lock (state "committing", built on ``base``), publish
        ``base.version + 1`` and release: the second half of :meth:`commit`, which raises the same."""
        rec = self._record
        assert rec.state == COMMITTING and rec.gvl_base == base.version
        self.head = None  # unknown until the plan's outcome is (a conflict means another published)
        crashpoint("plan-recorded")
        delay = self.lock.poll_min_s
        for attempt in range(PLAN_ATTEMPTS):
            try:
                result = execute_plan(self.lock.store, self.lock.glog, rec.plan, txn=self.txn, gvl_base=base.version,
                                      additions=rec.additions, base=base, group=rec.group)
                break
            except StorageError as e:
                if attempt + 1 == PLAN_ATTEMPTS:
                    self._abandon()
                    raise CommitPending(
                        f"transaction {self.txn} is committed but writing it failed ({e}); the next validator "
                        f"completes it after the lock lease ({self.lock.lease_s:g}s).") from e
                time.sleep(delay)
                delay = min(self.lock.poll_max_s, delay * 4)
        self.head = result.gvl.version if result.gvl is not None else base.version
        self._handed_off = background is not None
        (background or (lambda _what, fn: fn()))("validation lock release", self._release_after_plan)
        if not result.committed:
            raise TransactionAborted(result.reason, result.rule or "R2",
                                     details={"written": result.versions, "undone": result.undone})
        return result

    def _release_after_plan(self) -> None:
        try:
            self.release()
        except StorageError as e:  # done and published: the key only outlives it (renewal stopped)
            log.warning("validation lock of %s: releasing failed (%s); the next validator or `lv recover` "
                        "finds its plan done and removes it", self.txn, e)

    def release(self) -> None:
        """Stop renewing and leave a free record naming :attr:`head` if the lock is still ours
        (PUT-if-match on our etag; a holder that was taken over changes nothing). Idempotent.

        Cost: 1 PUT-if-match.
        """
        self._stop.set()
        with self._mu:
            if not self._active:
                return
            self._active = False
            if self._lost:
                return
            queued = True  # unknown: the next commit of this process serves the queue
            with contextlib.suppress(Exception):
                queued = self._queued.result()
            try:
                freed = free_record(self.txn, self.head, queued).encode()
                etag = self.lock.store.put(LOCK_KEY, freed, mode=IfMatch(self._etag))
            except (PreconditionFailed, NotFound):
                self._lost = True
                return
            self.lock._remember_free(FreeSlot(etag, self.head, queued))

    # ------------------------------------------------------------------ internals
    def _transition(self, rec: LockRecord) -> None:
        """Overwrite the record (if-match on our etag) with ``rec`` and a fresh lease."""
        with self._mu:
            if self._lost or not self._active:
                raise ValidationLockLost(
                    f"transaction {self.txn} no longer holds the validation lock (its lease ran out and it was "
                    "taken over). Nothing was written: validate again.")
            now = time.time()
            rec = replace(rec, lease_expires=now + self.lock.lease_s)
            try:
                self._etag = self.lock.store.put(LOCK_KEY, rec.encode(), mode=IfMatch(self._etag))
            except PreconditionFailed:
                self._lost = True
                raise ValidationLockLost(
                    f"transaction {self.txn} lost the validation lock (its lease ran out and it was taken over). "
                    "Nothing was written: validate again.") from None
            self._record = rec

    def _abandon(self) -> None:
        """Stop renewing without deleting: a waiter takes over once the lease expires."""
        self._stop.set()
        with self._mu:
            self._active = False

    def _renew_loop(self) -> None:
        period = self.lock.lease_s / 3
        while not self._stop.wait(period):
            with self._mu:
                if not self._active or self._lost:
                    return
                rec = replace(self._record, lease_expires=time.time() + self.lock.lease_s)
                try:
                    self._etag = self.lock.store.put(LOCK_KEY, rec.encode(), mode=IfMatch(self._etag))
                    self._record = rec
                except PreconditionFailed:
                    self._lost = True
                    log.warning("validation lock of %s was taken over (lease ran out)", self.txn)
                    return
                except StorageError as e:  # transient: try again next period
                    log.warning("renewing the validation lock of %s failed: %s", self.txn, e)


__all__ = [
    "COMMITTING",
    "FREE",
    "LOCK_KEY",
    "VALIDATING",
    "CommitPending",
    "FreeSlot",
    "HeldLock",
    "LockRecord",
    "Queued",
    "Takeover",
    "ValidationLock",
    "ValidationLockLost",
    "ValidationTimeout",
    "slot_of",
]
