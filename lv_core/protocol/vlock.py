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
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, Protocol, Sequence

from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed, TransactionAborted
from lv_core.protocol.commitplan import PlannedCommit
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.heldlock import CommitPending, HeldLock, ValidationLockLost, take_over
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
    slot_of,
)
from lv_core.storage.base import CREATE, IfMatch, ObjectStore

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

    def free(self, found: "tuple[LockRecord, str]") -> "bool | None":
        """The lock is free (``found``: its free record and etag): True when the wait is over (the
        transaction was decided here, e.g. committed by taking the lock with its plan); False when the
        lock was taken meanwhile (look again); None to take it as usual."""



_QUEUE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lv-vq-put")


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

    def remember_free(self, slot: "FreeSlot | None") -> None:
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
            self.remember_free(None)

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
        queuing: Future[None] | None = None
        if queue is not None and look and self.contended():
            # Found held (or a claim lost) moments ago: queue the request while reading the key.
            queuing, tried = _QUEUE.submit(queue.busy), True
        while True:
            if not look:
                now = time.time()
                mine = LockRecord(txn, VALIDATING, self.lease_s, now + self.lease_s, client_label(), now, gvl_base)
                etag = self._claim(mine, free_etag)
                if etag is not None:
                    return HeldLock(self, mine, etag, takeovers, waited=tried or self.contended())
            look = False
            while True:
                try:
                    found, seen = (self._read_any(), seen) if isinstance(seen, Unread) else (seen, UNREAD)
                finally:
                    if queuing is not None:  # (raises what queueing raised; no PUT lands after we return)
                        put, queuing = queuing, None
                        put.result()
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
                    held = take_over(self, txn, rec, etag, gvl_base, takeovers)
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
