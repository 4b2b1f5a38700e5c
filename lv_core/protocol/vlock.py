"""The validation lock (#4.2; docs/PROTOCOL.md, "Modules #4.1/#4.2"): one validating transaction at a time.

``_lakevilla/validation.lock`` (:mod:`~lv_core.protocol.lockrecord`): free (or absent) -> "validating" ->
"committing" with the plan -> free naming the head it published, each a PUT-if-match on the holder's etag.
The holder renews its lease (:mod:`~lv_core.protocol.heldlock`); a waiter polls
(:mod:`~lv_core.protocol.keywait`) and takes an expired holder over: a "validating" one wrote nothing (roll
back), a "committing" one is rolled forward. A malformed plan is never executed, only rolled back after its
lease. Fast path: a PUT-if-match on a free record succeeds only if nobody held the key since, so its head is
still the newest: :meth:`ValidationLock.acquire_planned` takes the key with a plan validated against it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from lv_core import concurrency
from lv_core.concurrency import Backoff
from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed, TransactionAborted
from lv_core.protocol import keywait as kw
from lv_core.protocol.commitplan import PlannedCommit
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.heldlock import CommitPending, HeldLock, Serving, ValidationLockLost, take_over
from lv_core.protocol.keywait import FreeAnswer, KeyLook
from lv_core.protocol.lockrecord import (
    COMMITTING,
    FREE,
    LOCK_KEY,
    VALIDATING,
    FreeSlot,
    LockRecord,
    Takeover,
    holding,
    slot_of,
)
from lv_core.storage.base import CREATE, IfMatch, ObjectStore
from lv_core.storage.readback import put_or_confirm

log = logging.getLogger(__name__)


class ValidationTimeout(TransactionAborted):
    """Waiting for the validation lock took longer than the transaction's timeout (rule "timeout")."""

    def __init__(self, reason: str, *, details: dict | None = None) -> None:
        super().__init__(reason, "timeout", details=details)


class Queued(Protocol):
    """A waiter that queues a commit request when the lock is busy (:mod:`lv_core.txn.group`)."""

    def busy(self) -> None:
        """The lock is held by someone else: queue the request."""

    def done(self, record: "LockRecord | None") -> bool:
        """Whether a holder decided the request (the wait is over); ``record``: the lock now (None: free)."""

    def free(self, found: "tuple[LockRecord, str]") -> FreeAnswer:
        """The lock is free (``found``: its free record and etag): what the waiter did with it."""


class ValidationLock:
    """Acquires the validation lock of a warehouse (thread-safe; one instance serves many transactions).
    ``skew_s``: clock skew tolerated before a record's ``lease_expires`` alone proves it expired (default
    ``lease_s``); the other tuning: :class:`lv_core.txn.core.Tuning`."""

    def __init__(self, store: ObjectStore, glog: GlobalLog | None = None, *, lease_s: float = 30.0,
                 poll_min_s: float = 0.005, poll_max_s: float = 0.2, skew_s: float | None = None,
                 queued_poll_s: float = 0.05, contended_s: float = 2.0, plan_attempts: int = 3) -> None:
        if lease_s <= 0 or poll_min_s <= 0 or poll_max_s < poll_min_s or queued_poll_s <= 0 or plan_attempts < 1:
            raise ValueError("need lease_s, queued_poll_s > 0, 0 < poll_min_s <= poll_max_s, plan_attempts >= 1")
        self.store, self.glog = store, glog if glog is not None else GlobalLog(store)
        self.lease_s, self.poll_min_s, self.poll_max_s = lease_s, poll_min_s, poll_max_s
        self.skew_s = lease_s if skew_s is None else skew_s
        self.queued_poll_s, self.contended_s, self.plan_attempts = queued_poll_s, contended_s, plan_attempts
        self._free_mu = threading.Lock()
        self._free: FreeSlot | None = None  # the free record this instance wrote last
        self._contended_until = 0.0  # monotonic: until then, commits of this instance queue at once

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

    def free_slot(self) -> FreeSlot | None:
        """The free record this instance wrote last, while it may still be current. No request."""
        with self._free_mu:
            return self._free

    def remember_free(self, slot: FreeSlot | None) -> None:
        with self._free_mu:
            self._free = slot

    def contended(self) -> bool:
        """Whether this instance found the lock held or lost a claim in the last ``contended_s``: then queueing
        at once is faster than taking it with a plan."""
        return time.monotonic() < self._contended_until

    def note_contention(self) -> None:
        self._contended_until = time.monotonic() + self.contended_s

    def _claim(self, rec: LockRecord, free_etag: str | None) -> str | None:
        """Write ``rec`` over the free record ``free_etag`` (None: PUT-create). The new etag, or None."""
        try:
            return put_or_confirm(self.store, LOCK_KEY, rec.encode(), mode=CREATE if free_etag is None
                                  else IfMatch(free_etag))
        except (AlreadyExists, PreconditionFailed, NotFound):
            return None
        finally:
            self.remember_free(None)

    def acquire_planned(self, txn: str, plan: Sequence[PlannedCommit], base: GvlState, slot: FreeSlot, *,
                        additions: Mapping[str, int] | None = None,
                        group: Mapping[str, Mapping[str, Any]] | None = None,
                        serving: Serving | None = None) -> HeldLock | None:
        """Take the lock straight into "committing" with ``plan`` (validated against ``base``, the head of
        ``slot``) by one PUT-if-match on ``slot``; the caller runs :meth:`HeldLock.execute`. None (nothing
        written): the record changed."""
        if slot.head != base.version:
            return None
        rec = holding(txn, self.lease_s, COMMITTING, gvl_base=base.version, plan=tuple(plan), plan_txn=txn,
                      additions=dict(additions or {}), group=dict(group or {}))
        etag = self._claim(rec, slot.etag)
        if etag is None:
            self.note_contention()
            return None
        return HeldLock(self, rec, etag, [], serving=serving, claimed=base.version)

    def acquire(self, txn: str, *, timeout_s: float,
                on_wait: Callable[[LockRecord], None] | None = None, serving: Serving | None = None) -> HeldLock:
        """Take the lock for ``txn``, waiting for the holder and taking over an expired one. ``on_wait(record)``:
        the waited-for holder or its state changed. Cost: 1 PUT-if-match on this instance's free record; else
        1 GET per poll, then 1 PUT-if-match (a roll forward adds the plan's writes).

        Raises:
            ValidationTimeout: not acquired within ``timeout_s``.
            GlobalLogConflict: a roll forward found its global version taken.
            StorageError: the store failed; during a roll forward, the plan stays recorded for the next.
        """
        held = self.acquire_or_join(txn, None, timeout_s=timeout_s, on_wait=on_wait, serving=serving)
        assert held is not None
        return held

    def acquire_or_join(self, txn: str, queue: Queued | None, *, timeout_s: float,
                        on_wait: Callable[[LockRecord], None] | None = None, seen: KeyLook | None = None,
                        serving: Serving | None = None) -> HeldLock | None:
        """:meth:`acquire` for a transaction that queues its commit request while the lock is busy: None when a
        holder decided it. ``seen``: what :meth:`look` returned just before. Drives :mod:`~lv_core.protocol.keywait`."""
        # (a queued waiter looks at least every queued_poll_s: any holder may decide it)
        cap = self.poll_max_s if queue is None else min(self.poll_max_s, self.queued_poll_s)
        run = _Run(self, txn, queue, serving, on_wait, Backoff(min(self.poll_min_s, cap), cap, jitter=0.5),
                   time.monotonic() + timeout_s)
        if self.poll_min_s > cap:  # (a waiter told to poll slowly waits poll_min_s once)
            run.sleeps.append(Backoff(self.poll_min_s, self.poll_min_s, jitter=0.5))
        slot = self.free_slot()
        wait, requests = kw.start(queued=queue is not None, deadline=run.deadline, skew_s=self.skew_s,
                                  free_etag=slot.etag if slot is not None else None, seen=seen,
                                  contended=self.contended())
        while not wait.phase.final:
            answer: kw.Answer = None
            for request in requests:
                answer = run.send(request, wait)
            wait, requests = kw.step(wait, answer)
        for request in requests:  # (TIMED_OUT: its last notice)
            run.send(request, wait)
        if wait.phase is kw.Phase.TIMED_OUT:
            assert wait.found is not None
            rec = wait.found[0]
            raise ValidationTimeout(
                f"timed out after {timeout_s:g}s waiting for the validation lock, held by transaction {rec.txn} "
                f"({rec.state}). Help: retry, or raise `timeout`; a crashed holder is taken over after its lease "
                f"({rec.lease_s:g}s).", details={"holder": rec.txn, "state": rec.state})
        return run.held


@dataclass
class _Run:
    """What one wait for the key sends: the side effects of :mod:`~lv_core.protocol.keywait`'s requests."""

    lock: ValidationLock
    txn: str
    queue: Queued | None
    serving: Serving | None
    on_wait: Callable[[LockRecord], None] | None
    backoff: Backoff
    deadline: float
    sleeps: list[Backoff] = field(default_factory=list)  # before the backoff's
    takeovers: list[Takeover] = field(default_factory=list)
    held: HeldLock | None = None
    queuing: Future[None] | None = None  # the request's PUT, sent beside a GET

    def send(self, r: kw.Request, wait: kw.Wait) -> kw.Answer:
        if isinstance(r, kw.Get):
            try:
                found = self.lock.look() if r.cached is None else r.cached.found
            finally:
                if self.queuing is not None:  # (raises what queueing raised; no PUT lands after we return)
                    put, self.queuing = self.queuing, None
                    put.result()
            return kw.Looked(found, _clock())
        if isinstance(r, kw.Claim):
            mine = holding(self.txn, self.lock.lease_s)
            claimed = self._claimed_head(r.free_etag, wait)
            etag = self.lock._claim(mine, r.free_etag)
            if etag is not None:
                self.held = HeldLock(self.lock, mine, etag, self.takeovers, waited=wait.tried or self.lock.contended(),
                                     serving=self.serving, claimed=claimed)
            return kw.Claimed(etag is not None)
        if isinstance(r, kw.TakeOver):
            self.held = take_over(self.lock, self.txn, r.record, r.etag, self.takeovers, self.serving)
            return kw.Claimed(self.held is not None)
        if r is kw.Act.SLEEP:
            (self.sleeps.pop() if self.sleeps else self.backoff).sleep(self.deadline)
        elif r is kw.Act.NOTE_CONTENTION:
            self.lock.note_contention()
        elif isinstance(r, kw.Notify):
            try:
                if self.on_wait is not None:
                    self.on_wait(r.record)
            except Exception:  # a broken callback must not break validation
                log.exception("on_wait callback failed")
        else:  # the queue's requests: only a queued wait sends them
            assert self.queue is not None, r
            if isinstance(r, kw.AskDone):
                return kw.Done(self.queue.done(r.record), _clock())
            if isinstance(r, kw.AskFree):
                return self.queue.free(r.found)
            if r is kw.Act.ENQUEUE_BESIDE:  # (a leaf PUT: the REQUESTS pool)
                self.queuing = concurrency.submit(concurrency.Pool.REQUESTS, self.queue.busy)
            else:
                self.queue.busy()
        return None


    def _claimed_head(self, free_etag: str | None, wait: kw.Wait) -> int | None:
        """The head the free record with ``free_etag`` names (None: none, or no such record known)."""
        slot = self.lock.free_slot()
        if free_etag is not None and slot is not None and slot.etag == free_etag:
            return slot.head
        if free_etag is not None and wait.found is not None and wait.found[1] == free_etag:
            return wait.found[0].head
        return None


def _clock() -> kw.Clock:
    return kw.Clock(time.time(), time.monotonic())


__all__ = ["COMMITTING", "FREE", "LOCK_KEY", "VALIDATING", "CommitPending", "FreeAnswer", "FreeSlot", "HeldLock",
           "KeyLook", "LockRecord", "Queued", "Serving", "Takeover", "ValidationLock", "ValidationLockLost",
           "ValidationTimeout", "slot_of"]
