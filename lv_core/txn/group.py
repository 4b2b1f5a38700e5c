"""Group commit (LV[I]; docs/PROTOCOL.md, "Group commit", with why R1-R3 stay exact): a committer that finds
the lock held queues a request (:mod:`lv_core.protocol.vqueue`) and waits (:class:`Waiter`); a holder commits
the queued requests it validates (:func:`serve`; same-table ones: :mod:`lv_core.txn.behind`) with its own plan
in one global version."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Mapping, Sequence, Union

from lv_core import concurrency
from lv_core import events as ev
from lv_core.concurrency import Backoff, Pool
from lv_core.delta.actions import encode_commit
from lv_core.errors import LvError, TransactionAborted
from lv_core.protocol import samegroup as sg
from lv_core.protocol.commitplan import PlannedCommit, build_plan
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.hidden import collect
from lv_core.protocol.markers import VersionState, lakevilla_commit_info
from lv_core.protocol.parts import close_parts
from lv_core.protocol.validation import TableAccess, validate
from lv_core.protocol.vlock import COMMITTING, FreeAnswer, HeldLock, LockRecord, Serving, ValidationTimeout
from lv_core.protocol.vqueue import Request, RequestCommit, outcome_of, pending, put_request, read_ahead, withdraw
from lv_core.storage.base import ObjectStore
from lv_core.testing import crashpoint
from lv_core.txn import cleaner
from lv_core.txn.behind import Behind, Group, markers_live, prepare, serve_same
from lv_core.txn.core import TxnCore
from lv_core.txn.publish import Published
from lv_core.txn.state import Decision, DecisionKind

__all__ = ["SERVE_ROUNDS", "SERVING", "Decided", "Group", "Waiter", "forget", "gather", "joined", "keep_serving",
           "make_request", "queue_early", "serve", "undecided"]

log = logging.getLogger(__name__)
#: how a queued transaction was decided without taking the key the usual way: by another holder (the
#: global version naming it, and its entry there) or by taking the free key with its plan (published)
Decided = Union[tuple[GvlState, Mapping[str, Any]], Published]
Session = tuple[str, float, "str | None"] | None  # which holder session a lock record belongs to (None: free)
#: the most further global versions a holder publishes for queued requests before it releases
SERVE_ROUNDS = 8
#: a member whose commit is being written looks for the global version naming it this often, this many times
MEMBER_POLL_S = 0.015
MEMBER_POLLS = 8


def make_request(core: TxnCore, writes: Mapping[str, list], accesses: list[TableAccess], known: int, *,
                 early: bool = False) -> Request | None:
    """The commit request of ``core``, or None unless its written tables are exactly its marker tables.
    ``early``: made before its one table's predecessors resolved (:func:`sg.unsettled`)."""
    book = core.book
    markers = {t: (ts.marker_version, ts.marker_etag) for t, ts in book.tables.items()
               if ts.marker_version is not None and ts.marker_etag is not None}
    if set(markers) != set(writes) or not writes:
        return None
    info = {"preset": core.preset, "tables": sorted(writes), "redo": book.redo_count}
    commits = {t: RequestCommit(encode_commit(actions), lakevilla_commit_info(core.id, "LAKEVILLA COMMIT", info),
                                core.ict(t)) for t, actions in writes.items()}
    un = None
    if early:
        (ts,) = book.tables.values()
        un = sg.unsettled(ts.base.version, [v for v in ts.pending if v <= ts.base.version],
                          sg.encode_footprints(book.footprints()))
    return Request(core.id, known, tuple(accesses), core.policy, commits,
                   {t: (int(v), str(e)) for t, (v, e) in markers.items()}, un)


def queue_early(core: TxnCore, accesses_of: Callable[[TxnCore, dict[str, list]], list[TableAccess]], deadline: float,
                on_free: Callable[["Waiter", tuple[LockRecord, str]], tuple[FreeAnswer, Decided | None]]
                ) -> "Waiter | None":
    """Queue the request of a transaction writing one table behind pending predecessors before it settles
    (same-table group commit): the waiter, its PUT under way beside the settling, or None."""
    book = core.book
    if len(book.tables) != 1:
        return None
    (ts,) = book.tables.values()
    if ts.marker_version is None or (not ts.pending and ts.marker_version == ts.base.version + 1):
        return None  # (uncontended: nothing to wait for, nothing queued)
    writes = book.writes()
    # built before settling starts: settling rebases what it says was read, a redo changes the bytes
    req = make_request(core, writes, accesses_of(core, writes), core.services.glog.known(), early=True)
    return Waiter(core, lambda: req, deadline, on_free, early=True)


class _Named(Enum):
    """Whether a global version names a queued transaction's outcome."""

    YES = "yes"
    NO = "no"  # published without it (a plan rolled back)
    UNPUBLISHED = "unpublished"  # that version is not published yet


@dataclass(frozen=True)
class _Withdrawn:
    """The request was withdrawn at the deadline while ``session`` held the key (None: it was free)."""

    session: Session


class Waiter:
    """The waiting side of group commit (:class:`~lv_core.protocol.vlock.Queued`): queues the request when
    the lock is busy, ends the wait once a global version names the outcome. At ``deadline`` the request is
    withdrawn, and the wait lasts until the session that may have read it ended. ``on_free(waiter, found)``:
    what the transaction does with a free key: :class:`FreeAnswer` and, when decided there, how."""

    def __init__(self, core: TxnCore, request: Callable[[], Request | None], deadline: float,
                 on_free: Callable[["Waiter", tuple[LockRecord, str]], tuple[FreeAnswer, Decided | None]], *,
                 early: bool = False) -> None:
        self.core = core
        self._request = request
        self._on_free = on_free
        self.deadline = deadline
        self.known = core.services.glog.known()
        self.queued = False
        self.key = ""  # of the queued request
        #: how the wait ended without the key (None: it did not, or not yet)
        self.decided: Decided | None = None
        self._round: tuple[Session, int | None] | None = None  # the holder session and gvl base last looked at
        self._withdrawn: _Withdrawn | None = None
        self._read_to = self.known  # the global versions up to this one are in the log's cache
        #: a free key may be claimed on unprobed settled tails: False once such a claim was void (a marker's
        #: version taken; probing then finds it)
        self.settled = True
        self._reading: Future[int] | None = None  # (:meth:`_read_ahead`)
        #: queued before its predecessors resolved (:func:`queue_early`): requests may wait behind it
        self.early = early
        self.queuing = concurrency.submit(Pool.REQUESTS, self.busy) if early else None  # that early PUT

    def retract(self, timeout_s: float) -> Decided | None:
        """Withdraw a request queued early, and how a holder committed it meanwhile (None: never, nor can any
        now: the key is taken, so every session that read it ended). Its owner is giving up: its abort must not
        free a marker, nor delete files, that a published commit uses. Cost: 1 DELETE, a key round, the global
        versions since :attr:`known`."""
        if self.queuing is not None:
            with contextlib.suppress(LvError):
                self.queuing.result()
        if not self.key:
            return None  # (no request was made)
        withdraw(self.core.store, self.key)
        self.queued = False
        return self._key_round(timeout_s)

    def _key_round(self, timeout_s: float) -> Decided | None:
        """Take the key and release it, reading whether a global version names the transaction: a holder that
        read its request before it was withdrawn holds the key until it published (then it names it), or has
        not claimed it yet (then its claim, conditioned on the record this round replaced, fails)."""
        glog = self.core.services.glog
        with self.core.services.vlock.acquire(self.core.id, timeout_s=timeout_s) as held:
            return outcome_of(glog, self.core.id, self.known, head=held.read_head(glog))

    def requeue(self, request: Callable[[], Request | None]) -> None:
        """After a redo the request queued early is stale: queue ``request`` instead (same key: overwritten),
        or withdraw it when there is none. 1 PUT or DELETE."""
        self._request, self.queued, old = request, False, self.key
        self.busy()
        if not self.queued:
            withdraw(self.core.store, old)

    def busy(self) -> None:
        if self.queued:  # (queued early: before its predecessors resolved)
            return
        req = self._request()
        if req is not None:
            self.key = req.key  # (set first: a PUT whose answer is lost may have queued it)
            put_request(self.core.store, req)
            self.queued = True

    def done(self, record: LockRecord | None) -> bool:
        if self.queued and record is not None and record.gvl_base is not None:
            self._read_ahead(record.gvl_base + (1 if record.state == COMMITTING else 0))
        ident = _session(record)
        rnd = (ident, record.gvl_base if record is not None else None)
        if (self.queued and record is not None and record.state == COMMITTING and record.gvl_base is not None
                and self.core.id in record.group):
            # our commit is being written: the next global version names it (looked for MEMBER_POLLS times, then
            # once per poll of the lock: a holder that died meanwhile is rolled forward by whoever polls it)
            tries = MEMBER_POLLS if rnd != self._round else 1  # a slow holder: 1 per poll
            self._round = rnd
            backoff = Backoff(MEMBER_POLL_S, MEMBER_POLL_S)
            for i in range(tries):
                named = self._named_in(record.gvl_base + 1)
                if named is _Named.YES:
                    return True
                if named is _Named.NO:
                    break  # published without us (a plan rolled back): look as usual
                if i + 1 < tries:
                    backoff.sleep()
        elif self.queued and rnd != self._round:
            # a new holder or round may have committed us, unless we just queued (a free lock is tried at
            # once: the outcome is looked up under it, with the head read anyway)
            just_queued, self._round = self._round is None, rnd
            withdrawn = self._withdrawn
            if not just_queued and (record is not None or (withdrawn is not None and withdrawn.session is not None)):
                if self._found():
                    return True
                # a holder that read the request before it was withdrawn commits it within its session
                if withdrawn is not None and ident != withdrawn.session:
                    self._timeout(record)
        if time.monotonic() > self.deadline and self._withdrawn is None:
            if not self.queued:
                self._timeout(record)
            try:
                withdraw(self.core.store, self.key)
                now = self.core.services.vlock.read()
                self._withdrawn = _Withdrawn(_session(now[0] if now is not None else None))
                if self._withdrawn.session is None:  # free: a holder may have read the request, not claimed yet
                    self.decided = self._key_round(3 * self.core.services.vlock.lease_s)
            except Exception as e:  # noqa: BLE001 - (a holder that read the request may still publish it)
                with contextlib.suppress(Exception):
                    if self._found():
                        return True
                raise undecided(self.core, f"{e}; whether a holder committed it is unknown") from e
            if self._withdrawn.session is None:
                if self.decided is not None:
                    return True
                self._timeout(record)
        return False

    def free(self, found: tuple[LockRecord, str]) -> FreeAnswer:
        if not self.queued or self._withdrawn is not None:
            return FreeAnswer.USUAL
        answer, decided = self._on_free(self, found)  # (it reads up to the free head: :meth:`catch_up`)
        if decided is not None:
            self.decided = decided
        return answer

    def catch_up(self, head: int | None) -> None:
        """The global versions since those read so far, up to the free record's ``head``, in the log's cache:
        what deciding the wait reads (:func:`outcome_of`). The free key's taker starts its other reads first,
        so that they share the round trip."""
        if head is not None:
            self._read_ahead(head, wait=True)

    def _read_ahead(self, upto: int, *, wait: bool = False) -> None:
        """Read the global versions after those read so far up to ``upto`` into the log's cache (in parallel;
        in the background unless ``wait``), so that deciding the wait once the key is free takes one round
        trip, not two (a version a holder is still publishing is read again at the next poll). Reads only.
        Cost: 1 GET per version (as reading them later would)."""
        if self._reading is not None and (wait or self._reading.done()):
            with contextlib.suppress(Exception):  # (a failed read: read again)
                self._read_to = max(self._read_to, self._reading.result())
            self._reading = None
        if upto <= self._read_to or self._reading is not None:  # (one read at a time)
            return
        read = functools.partial(read_ahead, self.core.services.glog, self._read_to, upto)
        if wait:
            self._read_to = max(self._read_to, read())
        else:
            self._reading = concurrency.submit(Pool.TASKS, read)

    def _named_in(self, version: int) -> "_Named":
        """Whether global version ``version`` names the outcome (then in :attr:`decided`)."""
        try:
            state = self.core.services.glog.at(version)
        except LvError:  # GlobalVersionNotFound included
            return _Named.UNPUBLISHED
        got = state.group.get(self.core.id)
        if got is None:
            return _Named.NO
        self.decided = (state, got)
        return _Named.YES

    def _found(self) -> bool:
        self.decided = outcome_of(self.core.services.glog, self.core.id, self.known)
        return self.decided is not None

    def _timeout(self, record: LockRecord | None) -> None:
        holder = record.txn if record is not None else "?"
        raise ValidationTimeout(
            f"timed out waiting for the validation lock, held by transaction {holder}. Help: retry, or raise "
            "`timeout`.", details={"holder": holder, "state": record.state if record is not None else "?"})


def undecided(core: TxnCore, reason: str) -> LvError:
    """The error of a commit whose outcome cannot be learnt (a holder may yet publish its request): the
    transaction ends undecided, every file kept, its markers left for the log to decide."""
    core.book.decision = Decision(DecisionKind.PLAN, {t: ts.marker_version for t, ts in core.book.tables.items()
                                                      if ts.marker_version is not None})
    return LvError(f"commit undecided: {reason}")


def _session(record: LockRecord | None) -> Session:
    """Which holder session a lock record belongs to (None: the lock is free)."""
    return (record.txn, record.acquired, record.recovering) if record is not None else None


def joined(core: TxnCore, found: tuple[GvlState, Mapping[str, Any]], writes: Mapping[str, list],
           key: str) -> Published:
    """The transaction was committed (or its plan broke) in another holder's group (``key``: its request):
    record it as its own."""
    state, entry = found
    cleaner.background(f"validation request of {core.id}", lambda: withdraw(core.store, key))
    validation = dict(entry.get("validation") or {})
    core.validation = validation
    versions = {str(t): int(v) for t, v in dict(entry.get("versions") or {}).items()}
    broke = "versions" not in entry
    core.events.emit(ev.Validated(core.id, compatible=True, gvl_version=None if broke else state.version,
                                  tables=validation.get("tables", {}), failed_rule=None))
    if broke:
        raise TransactionAborted(str(entry.get("reason") or "the commit broke while being written"),
                                 str(entry.get("rule") or "R2"), details={"validated_by": state.txn})
    core.book.decision = Decision(DecisionKind.PLAN, versions)
    for t, v in versions.items():
        core.book.mark_published(t, v, writes.get(t, []))
    return Published(versions, {}, state)


_Checked = tuple[list[PlannedCommit], dict, dict]  # a request's plan entries, validation outcome, additions


def _left(req: Request, why: str) -> _Checked | None:
    """None: the request is left to its owner (logged at DEBUG with why: benchmarks.group_trace counts them)."""
    log.debug("left to owner: %s (%s)", why, req.txn)
    return None


def _check(store: ObjectStore, state: GvlState, req: Request) -> _Checked | None:
    """Validate one request as its owner would (R1 by versions); its plan entries, validation outcome and
    additions, or None to leave it to its owner."""
    if req.unsettled is not None:  # (gather leaves them out: only a same-table holder certifies them)
        return _left(req, "unsettled")
    live = concurrency.submit(Pool.REQUESTS, markers_live, store, req)  # (GETs one after another: a leaf)
    try:
        outcome = validate(collect(store, state, req.accesses, req.policy, own_txn=req.txn, parallel=1), req.policy)
        if not live.result():
            return _left(req, "markers not live")
    except (LvError, ValueError) as e:  # e.g. a table dropped meanwhile: its owner finds out itself
        log.info("leaving the validation request of %s to its owner: %s", req.txn, e)
        return None
    if not outcome.compatible:
        return _left(req, f"incompatible {outcome.rule}")
    if any(v.written and (v.pending or v.foreign or v.moved_from is not None) for v in outcome.tables.values()):
        return _left(req, "pending, foreign or moved")
    names = outcome.write_versions()
    if any(names.get(t) != m for t, (m, _etag) in req.markers.items()):
        return _left(req, "not at its markers")
    additions = outcome.additions()
    try:
        if close_parts(store, state, {**names, **additions}, own_txn=req.txn, fixed=frozenset(names)):
            return _left(req, "parts")
    except LvError:  # PartMissing included
        return _left(req, "parts missing")
    commits = {t: c.data(state.version + 1) for t, c in req.commits.items()}
    return build_plan(outcome, commits, req.markers), outcome.to_json(), additions


def gather(store: ObjectStore, own: str | frozenset[str], taken: frozenset[str]) -> list[Request]:
    """The queued requests (other than those of the transaction(s) ``own``) on tables disjoint from
    ``taken`` and each other's. Cost: 1 LIST + 1 GET per request (in parallel)."""
    return _disjoint(pending(store, skip=own, avoid=taken), taken)


def _disjoint(reqs: list[Request], taken: frozenset[str]) -> list[Request]:
    chosen: list[Request] = []
    used = set(taken)
    for req in reqs:
        if req.tables & used or req.unsettled is not None:
            continue
        used |= req.tables
        chosen.append(req)
    return chosen


def serve(store: ObjectStore, state: GvlState, chosen: list[Request]) -> Group:
    """The requests of ``chosen`` that pass validation at ``state`` (the head read under the lock), as
    one :class:`Group`. Cost: each request's validation reads (requests in parallel)."""
    group = Group()
    checked = concurrency.gather(Pool.TASKS, lambda r: _check(store, state, r), chosen)
    for req, got in zip(chosen, checked, strict=True):
        if got is None:
            continue
        plan, validation, additions = got
        group.plan.extend(plan)
        group.members[req.txn] = {"tables": sorted(e.table for e in plan), "validation": validation}
        group.additions.update(additions)
        group.keys.append(req.key)
    return group


def keep_serving(held: HeldLock, head: GvlState) -> None:
    """After the holder's plan was published as ``head``, still holding the lock: commit the queued requests
    in further global versions, so that no handoff separates one group from the next (docs/PROTOCOL.md, "A
    holder serves the queue"). Stops when nothing new is queued, a request is left to its owner, or after
    :data:`SERVE_ROUNDS`. Cost per round: :func:`serve` + :meth:`HeldLock.commit`."""
    store = held.lock.store
    served = {held.txn, *held.record.group}
    tops = _tops(held.record.plan, head, {})
    for _ in range(SERVE_ROUNDS):
        found = held.looked()
        if held.lost or found is not None and not found or not threading.main_thread().is_alive():
            return  # (the program is exiting: release, the next holder serves them)
        chosen = [r for r in found or () if isinstance(r, Request) and r.txn not in served]
        ahead = found.ahead if isinstance(found, Looked) and len(chosen) == len(found) else None
        if not chosen:  # (read while the last plan was written: requests queued since then count too)
            chosen = _look(store, frozenset(served))
        same = _same(chosen, tops)
        settled = [r for r in chosen if r not in same]
        group = serve(store, head, settled)
        if same and tops:  # same-table requests behind the last commits published (tops)
            want = {t: e.version for t, e in tops.items()}
            behind = _prepared(ahead, want) or prepare(store, same, want, {})
            serve_same(store, head, held.txn, list(tops.values()), behind, group)
        held.note_queued(bool(chosen))  # the free record says whether any are left (to their owners)
        if not group.members:
            return
        crashpoint("serving-round")
        served.update(group.members)
        try:
            result = held.commit(group.plan, head, additions=group.additions, group=group.members, release=False)
        except LvError as e:  # the requests stay: whoever holds the key next commits them (or finds them done)
            log.info("validation lock of %s: serving the queue stopped: %s", held.txn, e)
            return
        forget(store, group.keys)
        if result.gvl is None or any(r.unsettled is None and r.txn not in group.members for r in chosen):
            return
        head = result.gvl
        tops = _tops(group.plan, head, tops)
    held.note_queued(True)


def _same(chosen: Sequence[Request], tops: Mapping[str, object]) -> list[Request]:
    """The requests of ``chosen`` a same-table chain judges (:func:`serve_same`): unsettled ones, and settled ones
    on one table of ``tops``."""
    return [r for r in chosen if r.unsettled is not None or (len(r.tables) == 1 and r.tables <= set(tops))]


def _tops(plan: Sequence[PlannedCommit], head: GvlState, tops: Mapping[str, PlannedCommit]) -> dict[str, PlannedCommit]:
    """Per table, the newest entry of ``plan`` (else of ``tops``) that ``head`` names: what a same-table
    request may follow in the next round (:func:`serve_same`)."""
    out = {t: e for t, e in tops.items() if head.table_version(t) == e.version}
    for e in plan:
        if head.table_version(e.table) == e.version and not e.blind:
            out[e.table] = e
    return out


class Looked(list[Request]):
    """The requests a look found while a plan was written, and (``ahead``) those that may follow the plan's
    entries being prepared for :func:`serve_same`: ``(tops, Behind)``, where ``tops`` (table -> version) are the
    entries the next round follows if the whole plan lands (:func:`keep_serving` uses it only then). The
    requests are known before the preparation ends: a release waits for them only."""

    ahead: tuple[dict[str, int], Future[Behind]] | None = None


def _prepared(ahead: tuple[dict[str, int], Future[Behind]] | None, tops: Mapping[str, int]) -> Behind | None:
    """What the look prepared, when the round follows the ``tops`` it was prepared for (else None)."""
    if ahead is None or ahead[0] != tops:
        return None
    try:
        return ahead[1].result()
    except Exception:  # noqa: BLE001 - prepared again by the caller, which then meets the error itself
        return None


def _look(store: ObjectStore, served: frozenset[str], record: LockRecord | None = None) -> list[Request]:
    """The settled requests :func:`gather` chooses, and the unsettled ones (:func:`serve_same` judges them).
    With the ``record`` whose plan is being written: also those behind its entries, prepared (1 round trip more,
    while the plan is written instead of between rounds: the markers' liveness is judged against the clock when
    used, and no owner can withdraw and free a marker while this session holds the key, :meth:`Waiter.retract`)."""
    reqs = pending(store, skip=served)
    found = Looked(_disjoint(reqs, frozenset()) + [r for r in reqs if r.unsettled is not None])
    tops = _plan_tops(record.plan) if record is not None else {}
    same = _same(found, tops)
    if same and tops and record is not None:
        found.ahead = (tops, concurrency.submit(Pool.TASKS, prepare, store, same, tops, _plan_versions(record)))
    return found


def _plan_tops(plan: Sequence[PlannedCommit]) -> dict[str, int]:
    """Per table, the newest version ``plan`` writes (not a blind append, which may move)."""
    out: dict[str, int] = {}
    for e in plan:
        if not e.blind:
            out[e.table] = max(out.get(e.table, e.version), e.version)
    return out


def _plan_versions(record: LockRecord) -> dict[tuple[str, int], VersionState]:
    """The versions ``record``'s plan writes, as they will read once written (the bytes as planned: what lands
    differs at most in the in-commit timestamp a commitInfo gets sealed with, which no conflict test reads;
    their committer: the member that names the table, at that version when it says so, else the plan's owner)."""
    owner: dict[tuple[str, int] | str, str] = {}
    for txn, g in record.group.items():
        at = g.get("at") or {}
        for t in g.get("tables", ()):
            owner[(t, at[t]) if t in at else t] = txn
    return {(e.table, e.version): VersionState(e.version, "commit", "", owner.get(
        (e.table, e.version), owner.get(e.table, record.plan_txn or record.txn)), raw=e.data) for e in record.plan}


#: what a holder does for the queue: reads the requests other than those its plans commit while it writes
#: a plan (:func:`gather`; 1 LIST when nothing is queued), and serves them after its own (:func:`keep_serving`)
SERVING = Serving(then=keep_serving, look=_look)


def forget(store: ObjectStore, keys: list[str]) -> None:
    """Delete the requests of a group once published (in the background: one left behind only costs the next
    holder a validation that fails R2)."""
    for key in keys:
        cleaner.background(f"validation request {key}", functools.partial(withdraw, store, key))
