"""The validation lock while held (:class:`HeldLock`: renewal, plan, publish, release) and the takeover
of an expired holder (:func:`take_over`); the protocol is described in :mod:`lv_core.protocol.vlock`."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Callable, Mapping, Protocol, Sequence

from lv_core import concurrency
from lv_core.concurrency import Backoff
from lv_core.errors import NotFound, PreconditionFailed, StorageError, TransactionAborted, TransactionError
from lv_core.protocol.commitplan import GLOBAL_LOG, VOIDED, PlannedCommit, PlanResult, execute_plan
from lv_core.protocol.gvl import GlobalLog, GlobalLogConflict, GlobalVersionNotFound, GvlState
from lv_core.protocol.lockrecord import COMMITTING, LOCK_KEY, FreeSlot, LockRecord, Takeover, free_record, holding
from lv_core.protocol.vqueue import any_queued
from lv_core.storage.base import IfMatch, ObjectStore
from lv_core.storage.readback import put_or_confirm
from lv_core.testing import crashpoint

log = logging.getLogger(__name__)


class LockHost(Protocol):
    """What a held lock needs of the :class:`~lv_core.protocol.vlock.ValidationLock` it came from."""

    store: ObjectStore
    glog: GlobalLog
    lease_s: float
    poll_min_s: float
    poll_max_s: float
    plan_attempts: int  # tries of a plan whose requests failed before leaving it to a roll forward

    def remember_free(self, slot: FreeSlot | None) -> None:
        """The free record this process wrote last (None: forget it)."""


class ValidationLockLost(TransactionError):
    """The lock was taken over before the plan was recorded: nothing written; validate again."""


class CommitPending(TransactionError):
    """The plan was recorded but writing it kept failing: the next validator rolls it forward after the lease."""


class Hold(Enum):
    """A held lock's life (:attr:`HeldLock.hold`, diagram in docs/ARCHITECTURE.md)."""

    HOLDING = "holding"
    RELEASING = "releasing"  # the release after a published plan runs in the background
    FREED = "freed"  # released, or its one try failed
    LOST = "lost"  # a renewal, transition or release found it taken over (its lease ran out)
    ABANDONED = "abandoned"  # a plan that kept failing: left to a takeover after the lease


_HELD = (Hold.HOLDING, Hold.RELEASING)  # ours: renewed, may transition and release


@dataclass(frozen=True)
class Serving:
    """What a holder does for the queue (:mod:`lv_core.txn.group`): ``then(held, published head)`` after each
    plan of its own, before the release; ``look(store, transactions its plans commit, the record being written)``
    reads what is queued while a plan is written (None: 1 LIST, whether any is)."""

    then: Callable[["HeldLock", GvlState], None]
    look: Callable[[ObjectStore, frozenset[str], LockRecord], Sequence[object]] | None = None


def take_over(lock: LockHost, txn: str, old: LockRecord, etag: str, takeovers: list[Takeover],
              serving: Serving | None = None) -> "HeldLock | None":
    """Take over the expired record ``old`` (read with ``etag``): roll back a validating holder or an invalid
    plan, roll a committing one forward. None: someone changed it first."""
    mine = holding(txn, lock.lease_s)
    plan_txn = old.plan_txn or old.txn
    forward = old.state == COMMITTING and not old.invalid
    rec = replace(old, txn=txn, lease_s=mine.lease_s, lease_expires=mine.lease_expires, client=mine.client,
                  acquired=mine.acquired, plan_txn=plan_txn, recovering=plan_txn) if forward else mine
    try:
        new_etag = put_or_confirm(lock.store, LOCK_KEY, rec.encode(), mode=IfMatch(etag))
    except PreconditionFailed:
        return None
    held = HeldLock(lock, rec, new_etag, takeovers, waited=True, serving=serving)
    if not forward:
        action = "invalid-plan-rolled-back" if old.invalid else "rolled-back"
        log.log(logging.WARNING if old.invalid else logging.INFO, "validation lock of %s (%s) expired: taken over "
                "by %s, %s %s", plan_txn, old.state, txn, action, old.invalid_reason)
        takeovers.append(Takeover(old.txn, old.state, action))
        return held
    log.info("validation lock of %s (committing) expired: %s rolls it forward", plan_txn, txn)
    try:
        result = execute_plan(lock.store, lock.glog, old.plan, txn=plan_txn,
                              gvl_base=old.gvl_base if old.gvl_base is not None else -1,
                              additions=old.additions, group=old.group)
        takeovers.append(Takeover(old.txn, old.state, "rolled-forward" if result.committed else "plan-rolled-back",
                                  result))
    except (GlobalVersionNotFound, GlobalLogConflict) as e:  # (no legitimate holder recorded it)
        log.warning("validation lock of %s (committing) holds a plan that cannot complete (%s): taken over "
                    "by %s and rolled back", plan_txn, e, txn)
        takeovers.append(Takeover(old.txn, old.state, "impossible-plan-rolled-back"))
    except BaseException:
        held._abandon()  # keep the plan recorded; the next waiter rolls it forward after our lease
        raise
    held._transition(mine)
    return held


class HeldLock:
    """The validation lock while held; a context manager whose exit releases it unless :meth:`commit` did.

    ``takeovers``: locks taken over while acquiring it; ``waited``: acquired after waiting (requests may be
    queued); ``head``: the newest global version it knows (None: unknown), named by the free record at
    release; ``claimed``: the head of the free record it claimed; ``served``: the transactions its plans
    committed."""

    def __init__(self, lock: LockHost, record: LockRecord, etag: str, takeovers: list[Takeover],
                 waited: bool = False, serving: Serving | None = None, claimed: int | None = None) -> None:
        self.lock, self.waited, self.txn, self.takeovers = lock, waited, record.txn, takeovers
        self._etag, self._serving = etag, serving
        self._mu = threading.Lock()
        # the record and the hold: changed only by this lock, under _mu (read-only for others)
        self.record, self.hold = record, Hold.HOLDING
        self.head: int | None = None
        self.claimed = claimed
        self._stop = threading.Event()
        # what the queue held while the last plan was written (None: not looked): the free record says whether
        # requests are queued, so that this process does not take the key again without serving them
        self._queued: Future[Sequence[object]] | None = None
        self.served: frozenset[str] = frozenset({self.txn})
        self._thread = threading.Thread(target=self._renew_loop, name=f"lv-vlock-{self.txn[-8:]}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"HeldLock({self.txn}, {self.record.state}, {self.hold.value})"

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold in (Hold.HOLDING, Hold.LOST):  # (RELEASING: the background releases)
            self.release()

    @property
    def lost(self) -> bool:
        return self.hold is Hold.LOST

    def looked(self) -> Sequence[object] | None:
        """What the queue held as the last plan was written, or at :meth:`note_queued` (None: unknown)."""
        try:
            return None if self._queued is None else self._queued.result()
        except Exception:
            return None

    def note_queued(self, queued: bool) -> None:
        """What a newer look at the queue found: the free record says so at release."""
        self._queued = concurrency.done([True] if queued else [])

    def _look(self, record: LockRecord) -> Sequence[object]:
        if self._serving is not None and self._serving.look is not None:
            return self._serving.look(self.lock.store, self.served, record)
        return [True] if any_queued(self.lock.store) else []

    # ------------------------------------------------------------------ holder steps
    def read_head(self, glog: GlobalLog) -> GvlState:
        """The global log's head, read under the lock (it becomes :attr:`head`). One past what this holder knew
        was not named by a release (a voided plan, a crash, another client): it is vouched for first
        (:meth:`GlobalLog.vouch`), so that no plan is built on a made-up version."""
        state = glog.head()
        known = self.head if self.head is not None else self.claimed
        if known is None or state.version > known:
            self.head = None
            glog.vouch(state)
        self.head = state.version
        return state

    def commit(self, plan: Sequence[PlannedCommit], base: GvlState, *,
               additions: Mapping[str, int] | None = None,
               group: Mapping[str, Mapping[str, Any]] | None = None,
               background: Callable[[str, Callable[[], object]], None] | None = None,
               release: bool = True) -> PlanResult:
        """Record the plan (state "committing") built on ``base``, write it, publish ``base.version + 1`` and
        release (``release=False``: keep the lock; ``background(what, fn)``: release off the caller's path).
        ``group``: other transactions the plan commits, published even when the holder's own entries break.
        Cost: 2 PUT-if-match + :func:`~lv_core.protocol.commitplan.execute_plan`.

        Raises:
            ValidationLockLost: taken over before the plan was recorded (nothing written).
            TransactionAborted: the plan broke (rule "R2", "timeout"...): written parts reverted, nothing
                published, the lock released.
            CommitPending: writing kept failing; a roll forward completes the commit.
            GlobalLogConflict: global version ``base.version + 1`` was published by someone else.
        """
        self.head = base.version
        if not plan and not additions:  # read-only: nothing to record, write or publish
            if release:
                self.release()
            return PlanResult(True, {}, base)
        self._transition(replace(self.record, state=COMMITTING, gvl_base=base.version, plan=tuple(plan),
                                 plan_txn=self.txn, additions=dict(additions or {}), group=dict(group or {})))
        return self.execute(base, background=background, release=release)

    def execute(self, base: GvlState, *, background: Callable[[str, Callable[[], object]], None] | None = None,
                release: bool = True) -> PlanResult:
        """The second half of :meth:`commit` (raises the same): write the recorded plan, publish, serve, release."""
        rec = self.record
        assert rec.state == COMMITTING and rec.gvl_base == base.version
        self.head = None  # unknown until the plan's outcome is (a conflict means another published)
        crashpoint("plan-recorded" if release else "serving-plan-recorded")
        self.served = self.served | {rec.plan_txn or self.txn, *rec.group}
        try:  # (a LIST, then GETs fanned out: the TASKS pool)
            self._queued = concurrency.submit(concurrency.Pool.TASKS, self._look, rec)
        except RuntimeError:  # the interpreter is shutting down: not looked (the free record says queued)
            self._queued = None
        result = self._write(rec, base)
        # (a foreign object at base + 1: the free record names no head, so the next holder reads it, fails early)
        voided = result.rule in (GLOBAL_LOG, VOIDED)
        self.head = result.gvl.version if result.gvl is not None else None if voided else base.version
        if release:
            with self._mu:
                if background is not None and self.hold is Hold.HOLDING:
                    self.hold = Hold.RELEASING
            published = result.gvl if result.gvl is not None and result.gvl.version > base.version else None
            (background or (lambda _what, fn: fn()))("validation lock release",
                                                      lambda: self._release_after_plan(published))
        if not result.committed:
            raise TransactionAborted(result.reason, result.rule or "R2",
                                     details={"written": result.versions, "undone": result.undone})
        return result

    def _write(self, rec: LockRecord, base: GvlState) -> PlanResult:
        """:func:`execute_plan`, tried ``plan_attempts`` times, then left to a roll forward."""
        backoff = Backoff(self.lock.poll_min_s, self.lock.poll_max_s, factor=4)
        for attempt in range(1, self.lock.plan_attempts + 1):
            try:
                return execute_plan(self.lock.store, self.lock.glog, rec.plan, txn=self.txn, gvl_base=base.version,
                                    additions=rec.additions, base=base, group=rec.group)
            except StorageError as e:
                if attempt == self.lock.plan_attempts:
                    self._abandon()
                    raise CommitPending(
                        f"transaction {self.txn} is committed but writing it failed ({e}); the next validator "
                        f"completes it after the lock lease ({self.lock.lease_s:g}s).") from e
                backoff.sleep()
        raise AssertionError("unreachable")

    def _release_after_plan(self, published: GvlState | None) -> None:
        if self._serving is not None and published is not None:
            try:
                self._serving.then(self, published)
            except Exception:  # whatever it committed is published; what it did not, its owners do
                log.exception("validation lock of %s: serving the queue failed", self.txn)
        try:
            self.release()
        except StorageError as e:  # done and published: the key only outlives it (renewal stopped)
            log.warning("validation lock of %s: releasing failed (%s); the next validator or `lv recover` "
                        "finds its plan done and removes it", self.txn, e)

    def release(self) -> None:
        """Stop renewing and, if the lock is still ours, leave a free record naming :attr:`head` and whether
        requests are queued (unknown: queued). Idempotent; one try (else the lease runs out). 1 PUT-if-match."""
        self._stop.set()
        with self._mu:
            if self.hold not in _HELD:
                return  # (lost: nothing of ours to release)
            self.hold = Hold.FREED
            found = self.looked()
            queued = found is None or bool(found)
            if self._swap(free_record(self.txn, self.head, queued)):
                self.lock.remember_free(FreeSlot(self._etag, self.head, queued))

    # ------------------------------------------------------------------ internals
    def _swap(self, rec: LockRecord) -> bool:
        """Under ``_mu``: overwrite our record with ``rec`` (if-match). False: it was taken over (now LOST)."""
        try:
            self._etag = put_or_confirm(self.lock.store, LOCK_KEY, rec.encode(), mode=IfMatch(self._etag))
        except (PreconditionFailed, NotFound):
            self.hold = Hold.LOST
            return False
        self.record = rec
        return True

    def _transition(self, rec: LockRecord) -> None:
        """Overwrite the record with ``rec`` and a fresh lease."""
        with self._mu:
            if self.hold not in _HELD or not self._swap(replace(rec, lease_expires=time.time() + self.lock.lease_s)):
                raise ValidationLockLost(
                    f"transaction {self.txn} lost the validation lock (its lease ran out and it was taken over). "
                    "Nothing was written: validate again.")

    def _abandon(self) -> None:
        """Stop renewing without deleting: a waiter takes over once the lease expires."""
        self._stop.set()
        with self._mu:
            if self.hold in _HELD:
                self.hold = Hold.ABANDONED

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lock.lease_s / 3):
            with self._mu:
                if self.hold not in _HELD:
                    return
                try:
                    if not self._swap(replace(self.record, lease_expires=time.time() + self.lock.lease_s)):
                        log.warning("validation lock of %s was taken over (lease ran out)", self.txn)
                        return
                except StorageError as e:  # transient: try again next period
                    log.warning("renewing the validation lock of %s failed: %s", self.txn, e)

__all__ = ["CommitPending", "HeldLock", "Hold", "LockHost", "Serving", "ValidationLockLost", "take_over"]
