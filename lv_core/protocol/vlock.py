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

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Protocol, Sequence

from lv_core import concurrency
from lv_core.concurrency import Backoff
from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed, TransactionAborted
from lv_core.protocol import keywait as kw
from lv_core.protocol.commitplan import PlannedCommit
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.heldlock import CommitPending, HeldLock, Serving, ValidationLockLost, take_over
from lv_core.protocol.keywait import FreeAnswer, KeyLook
from lv_core.protocol.layout import client_label
from lv_core.protocol.lockrecord import (
    COMMITTING,
    FREE,
    LOCK_KEY,
    VALIDATING,
    FreeSlot,
    LockRecord,
    Takeover,
    slot_of,
)
from lv_core.storage.base import CREATE, IfMatch, ObjectStore
from lv_core.storage.readback import put_or_confirm

log = logging.getLogger(__name__)

#: A waiter that queued a commit request polls at least this often (its outcome may be published any time).
QUEUED_POLL_S = 0.05
#: How long after finding the lock held (or losing a claim) a client queues at once instead of trying
#: to take the lock with its plan (:meth:`ValidationLock.contended`).
CONTENDED_S = 2.0


class ValidationTimeout(TransactionAborted):
    """Waiting for the validation lock took longer than the transaction's timeout (rule "timeout")."""

    def __init__(self, reason: str, *, details: dict | None = None) -> None:
        super().__init__(reason, "timeout", details=details)


class Queued(Protocol):
    """A waiter that queued a commit request (see :meth:`ValidationLock.acquire_or_join`)."""

    def busy(self) -> None:
        """The lock is held by someone else: queue the request."""

    def done(self, record: "LockRecord | None") -> bool:
        """Whether the wait is over (the request was decided by a holder); ``record``: the lock now."""

    def free(self, found: "tuple[LockRecord, str]") -> FreeAnswer:
        """The lock is free (``found``: its free record and etag): what the waiter did with it."""


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
        found = self.look()
        return None if found is None or found[0].state == FREE else found

    def look(self) -> tuple[LockRecord, str] | None:
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

    def remember_free(self, slot: "FreeSlot | None") -> None:
        with self._free_mu:
            self._free = slot

    def _claim(self, rec: LockRecord, free_etag: str | None) -> str | None:
        """Write ``rec`` over the free record ``free_etag`` (PUT-if-match) or, without one, where there
        is no key (PUT-create). Returns the new etag, None when the lock is not free that way."""
        try:
            if free_etag is not None:
                return put_or_confirm(self.store, LOCK_KEY, rec.encode(), mode=IfMatch(free_etag))
            return put_or_confirm(self.store, LOCK_KEY, rec.encode(), mode=CREATE)
        except (AlreadyExists, PreconditionFailed, NotFound):
            return None
        finally:
            self.remember_free(None)

    def acquire_planned(self, txn: str, plan: Sequence[PlannedCommit], base: GvlState, slot: "FreeSlot", *,
                        additions: Mapping[str, int] | None = None,
                        group: Mapping[str, Mapping[str, Any]] | None = None,
                        serving: Serving | None = None) -> "HeldLock | None":
        """Take the lock straight into state "committing" with ``plan`` (validated against ``base``), by
        one PUT-if-match on the free record ``slot`` (:meth:`free_slot`, or :func:`slot_of` :meth:`look`), whose head
        is ``base``.

        Success proves that nobody held the lock since that record was written, so ``base`` is still
        the newest global version: the caller then runs :meth:`HeldLock.execute`. Returns None
        (nothing written) when the record is not that one any more: validate the usual way.
        ``group``: queued transactions whose commits ``plan`` also holds (as for :meth:`HeldLock.commit`);
        ``serving``: what the holder does for the queue (:class:`~lv_core.protocol.heldlock.Serving`).
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
        return HeldLock(self, rec, etag, [], serving=serving)

    def acquire(self, txn: str, *, timeout_s: float, gvl_base: int | None = None,
                on_wait: Callable[[LockRecord], None] | None = None, serving: Serving | None = None) -> "HeldLock":
        """Take the lock for ``txn``, waiting (polling) for the holder and taking over an expired one
        (the wait is the machine of :mod:`lv_core.protocol.keywait`; this method sends its requests).

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
        held = self._acquire(txn, timeout_s, gvl_base, on_wait, None, None, serving)
        assert held is not None
        return held

    def acquire_or_join(self, txn: str, queue: "Queued", *, timeout_s: float, gvl_base: int | None = None,
                        on_wait: Callable[[LockRecord], None] | None = None, seen: KeyLook | None = None,
                        serving: Serving | None = None) -> "HeldLock | None":
        """:meth:`acquire`, for a transaction that queues a commit request when the lock is busy
        (group commit): ``queue.busy()`` is called once, when the lock is first found held, and
        ``queue.done(record)`` with every record polled (None: the lock is free) before anything is
        done with it; once it returns True the wait ends without the lock (None is returned: another
        holder decided the transaction). ``seen``: what :meth:`look` returned just before (saves a GET).
        Raises what :meth:`acquire` raises, and what ``queue`` raises."""
        return self._acquire(txn, timeout_s, gvl_base, on_wait, queue, seen, serving)

    def _acquire(self, txn: str, timeout_s: float, gvl_base: int | None, on_wait: Callable[[LockRecord], None] | None,
                 queue: "Queued | None", seen: KeyLook | None, serving: Serving | None) -> "HeldLock | None":
        """The driver of :mod:`lv_core.protocol.keywait`: sends each request of a step, feeds back the answer
        of the last one."""
        deadline = time.monotonic() + timeout_s
        # a queued waiter's outcome can be published by any holder: it looks at most QUEUED_POLL_S later
        # (after its first step: a waiter told to poll slowly, poll_min_s above that, waits poll_min_s once)
        cap = self.poll_max_s if queue is None else min(self.poll_max_s, QUEUED_POLL_S)
        backoff = Backoff(min(self.poll_min_s, cap), cap, jitter=0.5)
        slot = self.free_slot()
        wait, requests = kw.start(queued=queue is not None, deadline=deadline, skew_s=self.skew_s,
                                  free_etag=slot.etag if slot is not None else None, seen=seen,
                                  contended=self.contended())
        run = _Run(self, txn, gvl_base, queue, serving, on_wait, backoff, deadline,
                   self.poll_min_s if self.poll_min_s > cap else None)
        while True:
            answer: kw.Answer = None
            for request in requests:
                answer = run.send(request, wait)
            wait, requests = kw.step(wait, answer)
            if wait.phase is kw.Phase.HELD:
                assert run.held is not None
                return run.held
            if wait.phase is kw.Phase.DECIDED:
                return None
            if wait.phase is kw.Phase.TIMED_OUT:
                for request in requests:  # (the last notice)
                    run.send(request, wait)
                assert wait.found is not None
                rec = wait.found[0]
                raise ValidationTimeout(
                    f"timed out after {timeout_s:g}s waiting for the validation lock, held by transaction "
                    f"{rec.txn} ({rec.state}). Help: retry, or raise `timeout`; a crashed holder is taken "
                    f"over after its lease ({rec.lease_s:g}s).", details={"holder": rec.txn, "state": rec.state})


class _Run:
    """What one wait for the key sends (the side effects of :mod:`lv_core.protocol.keywait`'s requests)."""

    def __init__(self, lock: ValidationLock, txn: str, gvl_base: int | None, queue: "Queued | None",
                 serving: Serving | None, on_wait: Callable[[LockRecord], None] | None, backoff: Backoff,
                 deadline: float, first_sleep: float | None) -> None:
        self.lock, self.txn, self.gvl_base, self.queue, self.serving = lock, txn, gvl_base, queue, serving
        self.on_wait, self.backoff, self.deadline, self.first_sleep = on_wait, backoff, deadline, first_sleep
        self.takeovers: list[Takeover] = []
        self.held: HeldLock | None = None
        self.queuing: Future[None] | None = None  # the request's PUT, sent beside a GET

    def send(self, r: kw.Request, wait: kw.Wait) -> kw.Answer:
        lock = self.lock
        if isinstance(r, kw.Get):
            try:
                found = lock.look() if r.cached is None else r.cached.found
            finally:
                if self.queuing is not None:  # (raises what queueing raised; no PUT lands after we return)
                    put, self.queuing = self.queuing, None
                    put.result()
            return kw.Looked(found, _clock())
        if isinstance(r, kw.Claim):
            now = time.time()
            mine = LockRecord(self.txn, VALIDATING, lock.lease_s, now + lock.lease_s, client_label(), now,
                              self.gvl_base)
            etag = lock._claim(mine, r.free_etag)
            if etag is not None:
                self.held = HeldLock(lock, mine, etag, self.takeovers, waited=wait.tried or lock.contended(),
                                     serving=self.serving)
            return kw.Claimed(etag)
        if isinstance(r, kw.TakeOver):
            self.held = take_over(lock, self.txn, r.record, r.etag, self.gvl_base, self.takeovers,
                                  serving=self.serving)
            return kw.TookOver(self.held is not None)
        if isinstance(r, kw.Sleep):
            if self.first_sleep is not None:
                Backoff(self.first_sleep, self.first_sleep, jitter=0.5).sleep(self.deadline)
                self.first_sleep = None
            else:
                self.backoff.sleep(self.deadline)
            return kw.Slept()
        assert self.queue is not None or not isinstance(r, (kw.Enqueue, kw.AskDone, kw.AskFree))
        if isinstance(r, kw.Enqueue) and self.queue is not None:
            if r.background:  # (a leaf PUT: the REQUESTS pool)
                self.queuing = concurrency.submit(concurrency.Pool.REQUESTS, self.queue.busy)
            else:
                self.queue.busy()
        elif isinstance(r, kw.AskDone) and self.queue is not None:
            return kw.Done(self.queue.done(r.record), _clock())
        elif isinstance(r, kw.AskFree) and self.queue is not None:
            return self.queue.free(r.found)
        elif isinstance(r, kw.NoteContention):
            lock.note_contention()
        elif isinstance(r, kw.Notify) and self.on_wait is not None:
            try:
                self.on_wait(r.record)
            except Exception:  # a broken callback must not break validation
                log.exception("on_wait callback failed")
        return None


def _clock() -> kw.Clock:
    return kw.Clock(time.time(), time.monotonic())


__all__ = [
    "COMMITTING",
    "FREE",
    "LOCK_KEY",
    "VALIDATING",
    "CommitPending",
    "FreeSlot",
    "HeldLock",
    "LockRecord",
    "FreeAnswer",
    "KeyLook",
    "Queued",
    "Serving",
    "Takeover",
    "ValidationLock",
    "ValidationLockLost",
    "ValidationTimeout",
    "slot_of",
]
