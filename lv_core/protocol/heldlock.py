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
from lv_core.protocol.commitplan import PlannedCommit, PlanResult, execute_plan
from lv_core.protocol.gvl import GlobalLog, GlobalLogConflict, GlobalVersionNotFound, GvlState
from lv_core.protocol.layout import client_label
from lv_core.protocol.lockrecord import COMMITTING, LOCK_KEY, VALIDATING, FreeSlot, LockRecord, Takeover, free_record
from lv_core.protocol.vqueue import any_queued
from lv_core.storage.base import IfMatch, ObjectStore
from lv_core.storage.readback import put_or_confirm
from lv_core.testing import crashpoint

log = logging.getLogger(__name__)

#: How many times the holder retries a plan whose requests failed before leaving it to a roll forward.
PLAN_ATTEMPTS = 3


class LockHost(Protocol):
    """What a held lock needs of the :class:`~lv_core.protocol.vlock.ValidationLock` it came from."""

    store: ObjectStore
    glog: GlobalLog
    lease_s: float
    poll_min_s: float
    poll_max_s: float

    def remember_free(self, slot: FreeSlot | None) -> None:
        """The free record this process wrote last (None: forget it)."""


class ValidationLockLost(TransactionError):
    """The lock was taken over (this holder's lease ran out) before its commit plan was recorded.

    Nothing of the transaction was written or published: it may validate again.
    """


class CommitPending(TransactionError):
    """The commit was decided (plan recorded) but writing it kept failing.

    The lock stays in state "committing" and the next validator rolls it forward once the lease
    expires: the transaction *will* commit; its outcome is not known to this client yet.
    """


class Hold(Enum):
    """A held lock's life (:attr:`HeldLock.hold`): HOLDING -> RELEASING (the release after a published plan
    runs in the background) -> FREED (released, or its one try failed); HOLDING or RELEASING -> LOST (a
    renewal, transition or release found it taken over: its lease ran out) or ABANDONED (a plan that kept
    failing: left to a takeover after the lease)."""

    HOLDING = "holding"
    RELEASING = "releasing"
    FREED = "freed"
    LOST = "lost"
    ABANDONED = "abandoned"


_HELD = (Hold.HOLDING, Hold.RELEASING)  # ours: renewed, may transition and release


@dataclass(frozen=True)
class Serving:
    """What a holder does for the queue (group commit, :mod:`lv_core.txn.group`), given when the lock is taken.

    Attributes:
        then: run after each published plan of the holder's own, before the release, while the lock is
            still held: ``(held, published head)`` (group commit serves the queue there).
        look: what is queued, read in the background while a plan is written: ``(store, the transactions
            the holder's plans commit)`` -> the requests (truthy: something is queued). None: 1 LIST.
    """

    then: Callable[["HeldLock", GvlState], None]
    look: Callable[[ObjectStore, frozenset[str]], Sequence[object]] | None = None


def take_over(lock: "LockHost", txn: str, old: LockRecord, etag: str, gvl_base: int | None,
              takeovers: list[Takeover], serving: Serving | None = None) -> "HeldLock | None":
    """Take over the expired record ``old`` (read with ``etag``): roll back a validating holder, roll a
    committing one forward (see :mod:`lv_core.protocol.vlock`). None: someone changed it first."""
    now = time.time()
    mine = LockRecord(txn, VALIDATING, lock.lease_s, now + lock.lease_s, client_label(), now, gvl_base)
    roll_forward = old.state == COMMITTING and not old.invalid
    if roll_forward:
        rec = replace(old, txn=txn, lease_s=lock.lease_s, lease_expires=now + lock.lease_s, client=client_label(),
                      acquired=now, plan_txn=old.plan_txn or old.txn, recovering=old.plan_txn or old.txn)
    else:
        rec = mine
    try:
        new_etag = put_or_confirm(lock.store, LOCK_KEY, rec.encode(), mode=IfMatch(etag))
    except PreconditionFailed:
        return None
    held = HeldLock(lock, rec, new_etag, takeovers, waited=True, serving=serving)
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
        result = execute_plan(lock.store, lock.glog, old.plan, txn=plan_txn, gvl_base=base,
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
        serving: what it does for the queue (:class:`Serving`; None: nothing but a look whether any is queued).
    """

    def __init__(self, lock: "LockHost", record: LockRecord, etag: str, takeovers: list[Takeover],
                 waited: bool = False, serving: Serving | None = None) -> None:
        self.lock = lock
        self.waited = waited  # acquired after waiting for another holder (others may have queued)
        self.txn = record.txn
        self.takeovers = takeovers
        self._record = record
        self._etag = etag
        self._mu = threading.Lock()
        self._hold = Hold.HOLDING
        #: the newest global version this holder knows (read under the lock, or published): the free
        #: record names it at release (None: unknown)
        self.head: int | None = None
        self._stop = threading.Event()
        # what :attr:`look` found while the last plan was written (None: not looked): the free record says
        # whether requests are queued, so that this process does not take the key again without serving them
        self._queued: Future[Sequence[object]] | None = None
        self._serving = serving
        #: the transactions its plans committed (its own and the groups'): not looked for in the queue
        self.served: frozenset[str] = frozenset({self.txn})
        self._thread = threading.Thread(target=self._renew_loop, name=f"lv-vlock-{self.txn[-8:]}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"HeldLock({self.txn}, {self._record.state}, {self._hold.value})"

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._hold in (Hold.HOLDING, Hold.LOST):  # (RELEASING: the background releases)
            self.release()

    @property
    def record(self) -> LockRecord:
        return self._record

    def queued(self) -> bool:
        """Whether commit requests were queued as the last plan was written (or at :meth:`note_queued`;
        True when not looked or that look failed). Waits for that look."""
        found = self.looked()
        return found is None or bool(found)

    def looked(self) -> Sequence[object] | None:
        """What :attr:`look` found as the last plan was written (None: not looked, or it failed)."""
        if self._queued is None:
            return None
        try:
            return self._queued.result()
        except Exception:
            return None

    def note_queued(self, queued: bool) -> None:
        """What a newer look at the queue found: the free record says so at release."""
        done: Future[Sequence[object]] = Future()
        done.set_result([True] if queued else [])
        self._queued = done

    def _look(self) -> Sequence[object]:
        """What is queued beside the transactions already served (truthy: something is)."""
        if self._serving is not None and self._serving.look is not None:
            return self._serving.look(self.lock.store, self.served)
        return [True] if any_queued(self.lock.store) else []

    @property
    def hold(self) -> Hold:
        return self._hold

    @property
    def lost(self) -> bool:
        """True once a renewal or transition found the lock taken over."""
        return self._hold is Hold.LOST

    # ------------------------------------------------------------------ holder steps
    def commit(self, plan: Sequence[PlannedCommit], base: GvlState, *,
               additions: Mapping[str, int] | None = None,
               group: Mapping[str, Mapping[str, Any]] | None = None,
               background: Callable[[str, Callable[[], object]], None] | None = None,
               release: bool = True) -> PlanResult:
        """Record the plan (state "committing"), write it, publish ``base.version + 1``, release
        (``release=False``: keep the lock, e.g. to commit another plan).

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
            if release:
                self.release()
            return PlanResult(True, {}, base)
        rec = replace(self._record, state=COMMITTING, gvl_base=base.version, plan=tuple(plan), plan_txn=self.txn,
                      additions=dict(additions or {}), group=dict(group or {}))
        self._transition(rec)
        return self.execute(base, background=background, release=release)

    def execute(self, base: GvlState, *,
                background: Callable[[str, Callable[[], object]], None] | None = None,
                release: bool = True) -> PlanResult:
        """Write the plan recorded in the lock (state "committing", built on ``base``), publish
        ``base.version + 1``, run :attr:`Serving.then` and release: the second half of :meth:`commit`, which
        raises the same."""
        rec = self._record
        assert rec.state == COMMITTING and rec.gvl_base == base.version
        self.head = None  # unknown until the plan's outcome is (a conflict means another published)
        crashpoint("plan-recorded" if release else "serving-plan-recorded")
        self.served = self.served | {rec.plan_txn or self.txn, *rec.group}
        try:  # (a LIST, then GETs fanned out: the TASKS pool)
            self._queued = concurrency.submit(concurrency.Pool.TASKS, self._look)
        except RuntimeError:  # the interpreter is shutting down: not looked (the free record says queued)
            self._queued = None
        backoff = Backoff(self.lock.poll_min_s, self.lock.poll_max_s, factor=4)
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
                backoff.sleep()
        self.head = result.gvl.version if result.gvl is not None else base.version
        if release:
            if background is not None:
                with self._mu:
                    if self._hold is Hold.HOLDING:
                        self._hold = Hold.RELEASING
            published = result.gvl if result.gvl is not None and result.gvl.version > base.version else None
            (background or (lambda _what, fn: fn()))("validation lock release",
                                                      lambda: self._release_after_plan(published))
        if not result.committed:
            raise TransactionAborted(result.reason, result.rule or "R2",
                                     details={"written": result.versions, "undone": result.undone})
        return result

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
        """Stop renewing and leave a free record naming :attr:`head` if the lock is still ours
        (PUT-if-match on our etag; a holder that was taken over changes nothing). Idempotent.

        Cost: 1 PUT-if-match.
        """
        self._stop.set()
        with self._mu:
            if self._hold not in _HELD:
                return  # (lost: nothing of ours to release)
            self._hold = Hold.FREED  # (once: a release whose PUT failed is not sent again; the lease runs out)
            queued = self.queued()  # unknown (True): the next commit of this process serves the queue
            try:
                freed = free_record(self.txn, self.head, queued).encode()
                etag = put_or_confirm(self.lock.store, LOCK_KEY, freed, mode=IfMatch(self._etag))
            except (PreconditionFailed, NotFound):
                self._hold = Hold.LOST
                return
            self.lock.remember_free(FreeSlot(etag, self.head, queued))

    # ------------------------------------------------------------------ internals
    def _transition(self, rec: LockRecord) -> None:
        """Overwrite the record (if-match on our etag) with ``rec`` and a fresh lease."""
        with self._mu:
            if self._hold not in _HELD:
                raise ValidationLockLost(
                    f"transaction {self.txn} no longer holds the validation lock (its lease ran out and it was "
                    "taken over). Nothing was written: validate again.")
            now = time.time()
            rec = replace(rec, lease_expires=now + self.lock.lease_s)
            try:
                self._etag = put_or_confirm(self.lock.store, LOCK_KEY, rec.encode(), mode=IfMatch(self._etag))
            except PreconditionFailed:
                self._hold = Hold.LOST
                raise ValidationLockLost(
                    f"transaction {self.txn} lost the validation lock (its lease ran out and it was taken over). "
                    "Nothing was written: validate again.") from None
            self._record = rec

    def _abandon(self) -> None:
        """Stop renewing without deleting: a waiter takes over once the lease expires."""
        self._stop.set()
        with self._mu:
            if self._hold in _HELD:
                self._hold = Hold.ABANDONED

    def _renew_loop(self) -> None:
        period = self.lock.lease_s / 3
        while not self._stop.wait(period):
            with self._mu:
                if self._hold not in _HELD:
                    return
                rec = replace(self._record, lease_expires=time.time() + self.lock.lease_s)
                try:  # (a renewal whose response got lost is read back: else the next one fails its if-match)
                    self._etag = put_or_confirm(self.lock.store, LOCK_KEY, rec.encode(), mode=IfMatch(self._etag))
                    self._record = rec
                except PreconditionFailed:
                    self._hold = Hold.LOST
                    log.warning("validation lock of %s was taken over (lease ran out)", self.txn)
                    return
                except StorageError as e:  # transient: try again next period
                    log.warning("renewing the validation lock of %s failed: %s", self.txn, e)


__all__ = ["PLAN_ATTEMPTS", "CommitPending", "HeldLock", "Hold", "LockHost", "Serving", "ValidationLockLost",
           "take_over"]
