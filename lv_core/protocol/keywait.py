"""Waiting for the validation key, as a state machine: named phases, and a pure :func:`step` from (the
wait so far, what the store or the queue answered) to (the wait now, the requests to send next).

The protocol is the one :mod:`lv_core.protocol.vlock` describes; this module only decides, it sends
nothing: :meth:`ValidationLock._acquire <lv_core.protocol.vlock.ValidationLock>` is the driver that
sends each request and feeds the answer of the last one back. Every request but the last of a step is
one whose answer the machine does not need (a notice, the queued request's PUT).

Phases (the diagram is in docs/ARCHITECTURE.md)::

    CLAIM      PUT our "validating" record over the free record we know (if-match), or where there is no
               key (create)                          -> HELD | LOOK (someone else's now)
    LOOK       GET the key                           -> CLAIM (free) | ASK_FREE (free, queued) | ASK | judge
    ASK_FREE   queued, key free: the wait over?      -> DECIDED | FREE_KEY | CLAIM (no key)
    FREE_KEY   queued, key free: decide here?        -> DECIDED | LOOK (taken meanwhile) | CLAIM
    ASK        queued, key held: the wait over?      -> DECIDED | judge
    judge      (no request) the holder's lease expired -> TAKE_OVER; the deadline passed -> TIMED_OUT;
               else SLEEP (one backoff step)
    TAKE_OVER  PUT-if-match on the expired record    -> HELD | LOOK (someone changed it first)
    SLEEP                                            -> LOOK
    HELD, DECIDED, TIMED_OUT: the end (the key is ours; a holder decided the queued transaction; too late)

Expiry (either proves the holder is gone): the record's ``lease_expires`` is more than ``skew_s`` in the
past by our clock, or its etag has not changed for ``lease_s`` as we measured it (no synchronised clocks
needed: a live holder renews every ``lease_s / 3``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, NamedTuple, Union

from lv_core.protocol.lockrecord import FREE, LockRecord

__all__ = ["Answer", "AskDone", "AskFree", "Claim", "Claimed", "Clock", "Done", "Enqueue", "FreeAnswer", "Get",
           "KeyLook", "Looked", "Notify", "NoteContention", "Phase", "Request", "Sleep", "Slept", "TakeOver",
           "TookOver", "Wait",
           "start", "step"]

Found = tuple[LockRecord, str]  # a record and its etag


class Phase(Enum):
    """Where the wait for the key is (see the module doc)."""

    CLAIM = "claim"
    LOOK = "look"
    ASK_FREE = "ask-free"
    FREE_KEY = "free-key"
    ASK = "ask"
    TAKE_OVER = "take-over"
    SLEEP = "sleep"
    HELD = "held"
    DECIDED = "decided"
    TIMED_OUT = "timed-out"

    @property
    def final(self) -> bool:
        return self in (Phase.HELD, Phase.DECIDED, Phase.TIMED_OUT)


class FreeAnswer(Enum):
    """What a queued transaction did with a free key (:meth:`~lv_core.protocol.vlock.Queued.free`)."""

    USUAL = "usual"  # nothing: take the key as usual (claim it, validate under it)
    TAKEN = "taken"  # the key was taken by another between the look and its claim: look again
    DECIDED = "decided"  # the transaction was decided here (committed before, or by taking the key with its plan)


# ---------------------------------------------------------------- requests (what the driver sends)
@dataclass(frozen=True)
class Claim:
    """PUT our "validating" record over the free record ``free_etag`` (if-match), or PUT-create (None)."""

    free_etag: str | None


@dataclass(frozen=True)
class Get:
    """GET the key (``cached``: what was read just before, answered without a request)."""

    cached: "KeyLook | None" = None


@dataclass(frozen=True)
class Enqueue:
    """Queue the transaction's commit request (1 PUT; ``background``: beside the next GET, joined after it)."""

    background: bool = False


@dataclass(frozen=True)
class AskDone:
    """Ask the queue whether the wait is over (``record``: the key now, None when free)."""

    record: LockRecord | None


@dataclass(frozen=True)
class AskFree:
    """Ask the queue what it does with the free key ``found``."""

    found: Found


@dataclass(frozen=True)
class TakeOver:
    """PUT-if-match on the expired ``record`` (roll back or forward: :func:`~lv_core.protocol.heldlock.take_over`)."""

    record: LockRecord
    etag: str


@dataclass(frozen=True)
class Notify:
    """The waited-for holder or its state changed (a ``Waiting`` event); no answer."""

    record: LockRecord


@dataclass(frozen=True)
class NoteContention:
    """The key was found held: commits of this process queue at once for a while; no answer."""


@dataclass(frozen=True)
class Sleep:
    """One backoff step (never past the deadline)."""


Request = Union[Claim, Get, Enqueue, AskDone, AskFree, TakeOver, Notify, NoteContention, Sleep]


# ---------------------------------------------------------------- answers (what came back)
class Clock(NamedTuple):
    """When an answer came: wall clock (``time.time()``) and monotonic."""

    now: float
    mono: float


@dataclass(frozen=True)
class Claimed:
    etag: str | None  # None: the key was not free that way


@dataclass(frozen=True)
class KeyLook:
    """What a GET found: the record and its etag (None: no key)."""

    found: Found | None


@dataclass(frozen=True)
class Looked:
    found: Found | None
    clock: Clock


@dataclass(frozen=True)
class Done:
    over: bool
    clock: Clock


@dataclass(frozen=True)
class TookOver:
    held: bool  # False: someone changed the record first


@dataclass(frozen=True)
class Slept:
    pass


Answer = Union[Claimed, Looked, Done, FreeAnswer, TookOver, Slept, None]


# ---------------------------------------------------------------- the machine
@dataclass(frozen=True)
class Wait:
    """One wait for the key (immutable: :func:`step` returns a new one).

    Attributes:
        phase: where it is.
        queued: the transaction queues a commit request when the key is busy (group commit).
        deadline: monotonic time after which the wait times out.
        skew_s: clock skew tolerated before ``lease_expires`` alone proves expiry.
        tried: the key was found held (or the request queued) at least once.
        found: the record being judged (ASK, TAKE_OVER, TIMED_OUT) or claimed (FREE_KEY).
        clock: when ``found`` was read.
        first_seen: etag -> when this waiter first saw it (monotonic), for expiry by observation.
        last_seen: the holder and state last notified.
    """

    phase: Phase
    queued: bool
    deadline: float
    skew_s: float
    tried: bool = False
    found: Found | None = None
    clock: Clock = Clock(0.0, 0.0)
    first_seen: Mapping[str, float] = field(default_factory=dict)
    last_seen: tuple[str, str] | None = None


def start(*, queued: bool, deadline: float, skew_s: float, free_etag: str | None, seen: KeyLook | None,
          contended: bool) -> tuple[Wait, list[Request]]:
    """The first phase. With a free record of our own to claim (``free_etag``) and nothing read just
    before, claim it at once; otherwise look first (the key exists, free or held, unless the warehouse
    never validated, so a blind PUT-create would only fail). Found held moments ago (``contended``) and
    queueing: queue the request while reading the key."""
    if free_etag is not None and seen is None:
        return Wait(Phase.CLAIM, queued, deadline, skew_s), [Claim(free_etag)]
    early = queued and contended
    return (Wait(Phase.LOOK, queued, deadline, skew_s, tried=early),
            [*([Enqueue(background=True)] if early else []), Get(seen)])


def step(w: Wait, answer: Answer) -> tuple[Wait, list[Request]]:
    """The next phase of ``w`` given the answer to its last request, and what to send next (the answer of
    the last request listed is the next call's ``answer``). Pure: no I/O, no clock."""
    ph = w.phase
    if ph is Phase.CLAIM and isinstance(answer, Claimed):
        return (_to(w, Phase.HELD), []) if answer.etag is not None else (_to(w, Phase.LOOK), [Get()])
    if ph is Phase.LOOK and isinstance(answer, Looked):
        return _looked(w, answer.found, answer.clock)
    if ph is Phase.ASK_FREE and isinstance(answer, Done):
        if answer.over:
            return _to(w, Phase.DECIDED), []
        if w.found is None:
            return _to(w, Phase.CLAIM), [Claim(None)]
        return _to(w, Phase.FREE_KEY, found=w.found), [AskFree(w.found)]
    if ph is Phase.FREE_KEY and isinstance(answer, FreeAnswer):
        if answer is FreeAnswer.DECIDED:
            return _to(w, Phase.DECIDED), []
        if answer is FreeAnswer.TAKEN:
            return _to(w, Phase.LOOK), [Get()]
        assert w.found is not None
        return _to(w, Phase.CLAIM), [Claim(w.found[1])]
    if ph is Phase.ASK and isinstance(answer, Done):
        return (_to(w, Phase.DECIDED), []) if answer.over else _judge(w, answer.clock)
    if ph is Phase.TAKE_OVER and isinstance(answer, TookOver):
        return (_to(w, Phase.HELD), []) if answer.held else (_to(w, Phase.LOOK), [Get()])
    if ph is Phase.SLEEP and isinstance(answer, Slept):
        return _to(w, Phase.LOOK), [Get()]
    raise ValueError(f"no transition from {ph.name} on {answer!r}")


def _to(w: Wait, phase: Phase, **changes: object) -> Wait:
    return dataclasses.replace(w, phase=phase, **changes)  # type: ignore[arg-type]


def _looked(w: Wait, found: Found | None, clock: Clock) -> tuple[Wait, list[Request]]:
    if found is None or found[0].state == FREE:
        if w.queued:  # (a queued transaction may have been decided, or decide here: ask first)
            return _to(w, Phase.ASK_FREE, found=found, clock=clock), [AskDone(None)]
        return _to(w, Phase.CLAIM), [Claim(found[1] if found is not None else None)]  # released: claim at once
    first: list[Request] = [] if w.tried else [NoteContention(), *([Enqueue()] if w.queued else [])]
    w = _to(w, Phase.ASK, found=found, clock=clock, tried=True)
    if w.queued:
        return w, [*first, AskDone(found[0])]
    w, rest = _judge(w, clock)
    return w, [*first, *rest]


def _judge(w: Wait, clock: Clock) -> tuple[Wait, list[Request]]:
    """The key is held by ``w.found``: take it over when expired, else wait one step (or time out)."""
    assert w.found is not None
    rec, etag = w.found
    seen_at = w.first_seen.get(etag, clock.mono)
    w = dataclasses.replace(w, first_seen={**w.first_seen, etag: seen_at})
    if clock.now > rec.lease_expires + w.skew_s or clock.mono - seen_at > rec.lease_s:
        return _to(w, Phase.TAKE_OVER), [TakeOver(rec, etag)]
    notify: list[Request] = []
    if w.last_seen != (rec.txn, rec.state):
        w, notify = dataclasses.replace(w, last_seen=(rec.txn, rec.state)), [Notify(rec)]
    if w.deadline - clock.mono <= 0:
        return _to(w, Phase.TIMED_OUT), notify
    return _to(w, Phase.SLEEP), [*notify, Sleep()]
