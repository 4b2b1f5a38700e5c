"""Waiting for the validation key, as a state machine (diagram in docs/ARCHITECTURE.md): a pure :func:`step`
from (the wait so far, the last answer) to (the wait now, the requests to send next, of which only the last
one's answer is needed); ``ValidationLock.acquire_or_join`` sends them.

A holder is gone when its ``lease_expires`` is more than ``skew_s`` past by our clock, or its etag has not
changed for ``lease_s`` as we measured it (no synchronised clocks needed: a live holder renews every
``lease_s / 3``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, NamedTuple, Union

from lv_core.protocol.lockrecord import FREE, LockRecord

__all__ = ["Act", "Answer", "AskDone", "AskFree", "Claim", "Claimed", "Clock", "Done", "FreeAnswer", "Get", "KeyLook",
           "Looked", "Notify", "Phase", "Request", "TakeOver", "Wait", "start", "step"]

Found = tuple[LockRecord, str]  # a record and its etag


class Phase(Enum):
    """Where the wait for the key is: the request in flight, or the end (HELD, DECIDED, TIMED_OUT)."""

    CLAIM = "claim"  # PUT our record over the free one we know (if-match) or where there is none (create)
    LOOK = "look"  # GET the key
    ASK_FREE = "ask-free"  # queued, key free: is the wait over?
    FREE_KEY = "free-key"  # queued, key free, not decided: decide here?
    ASK = "ask"  # queued, key held: is the wait over?
    TAKE_OVER = "take-over"  # PUT-if-match on the expired record
    HELD = "held"  # the key is ours
    DECIDED = "decided"  # a holder decided the queued transaction
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
    free_etag: str | None  # PUT-if-match on this free record; None: PUT-create


@dataclass(frozen=True)
class Get:
    cached: "KeyLook | None" = None  # what was read just before: answered without a request


@dataclass(frozen=True)
class AskDone:
    record: LockRecord | None  # the key now (None: free); answered with :class:`Done`


@dataclass(frozen=True)
class AskFree:
    found: Found  # the free key; answered with a :class:`FreeAnswer`


@dataclass(frozen=True)
class TakeOver:
    """PUT-if-match on the expired ``record`` (roll back or forward: :func:`~lv_core.protocol.heldlock.take_over`)."""

    record: LockRecord
    etag: str


@dataclass(frozen=True)
class Notify:
    record: LockRecord  # the waited-for holder or its state changed (a ``Waiting`` event)


class Act(Enum):
    """The requests without a payload (no answer)."""

    NOTE_CONTENTION = "note-contention"  # the key was found held: this process's commits queue at once a while
    ENQUEUE = "enqueue"  # queue the commit request (1 PUT)
    ENQUEUE_BESIDE = "enqueue-beside"  # the same, beside the next GET (joined after it)
    SLEEP = "sleep"  # one backoff step (never past the deadline)


Request = Union[Claim, Get, AskDone, AskFree, TakeOver, Notify, Act]


# ---------------------------------------------------------------- answers (what came back)
class Clock(NamedTuple):
    now: float  # time.time()
    mono: float  # time.monotonic()


@dataclass(frozen=True)
class Claimed:
    held: bool  # the claim or takeover won (False: the key was not free that way, or changed first)


@dataclass(frozen=True)
class KeyLook:
    found: Found | None  # what a GET found (None: no key)


@dataclass(frozen=True)
class Looked:
    found: Found | None
    clock: Clock


@dataclass(frozen=True)
class Done:
    over: bool
    clock: Clock


Answer = Union[Claimed, Looked, Done, FreeAnswer, None]


# ---------------------------------------------------------------- the machine
@dataclass(frozen=True)
class Wait:
    """One wait for the key (immutable). ``queued``: queues a commit request when the key is busy; ``tried``:
    the key was found held (or the request queued) before; ``found``: the record judged or claimed;
    ``first_seen``: etag -> when first seen (monotonic); ``last_seen``: the holder and state last notified."""

    phase: Phase
    queued: bool
    deadline: float
    skew_s: float
    tried: bool = False
    found: Found | None = None
    first_seen: Mapping[str, float] = field(default_factory=dict)
    last_seen: tuple[str, str] | None = None


def start(*, queued: bool, deadline: float, skew_s: float, free_etag: str | None, seen: KeyLook | None,
          contended: bool) -> tuple[Wait, list[Request]]:
    """The first phase: claim our own free record at once unless something was read just before; otherwise
    look first (a blind PUT-create would only fail). Queued and contended: queue beside the GET."""
    if free_etag is not None and seen is None:
        return Wait(Phase.CLAIM, queued, deadline, skew_s), [Claim(free_etag)]
    early = queued and contended
    return (Wait(Phase.LOOK, queued, deadline, skew_s, tried=early),
            [*([Act.ENQUEUE_BESIDE] if early else []), Get(seen)])


def step(w: Wait, answer: Answer) -> tuple[Wait, list[Request]]:
    """The next phase of ``w`` given the answer to its last request, and what to send next. Pure."""
    ph = w.phase
    look: tuple[Wait, list[Request]] = (_to(w, Phase.LOOK), [Get()])
    if ph in (Phase.CLAIM, Phase.TAKE_OVER) and isinstance(answer, Claimed):
        return (_to(w, Phase.HELD), []) if answer.held else look
    if ph is Phase.LOOK and isinstance(answer, Looked):
        return _looked(w, answer.found, answer.clock)
    if ph in (Phase.ASK_FREE, Phase.ASK) and isinstance(answer, Done):
        if answer.over:
            return _to(w, Phase.DECIDED), []
        if ph is Phase.ASK:
            return _judge(w, answer.clock)
        if w.found is None:
            return _to(w, Phase.CLAIM), [Claim(None)]
        return _to(w, Phase.FREE_KEY), [AskFree(w.found)]
    if ph is Phase.FREE_KEY and isinstance(answer, FreeAnswer):
        assert w.found is not None
        if answer is FreeAnswer.USUAL:
            return _to(w, Phase.CLAIM), [Claim(w.found[1])]
        return (_to(w, Phase.DECIDED), []) if answer is FreeAnswer.DECIDED else look
    raise ValueError(f"no transition from {ph.name} on {answer!r}")


def _to(w: Wait, phase: Phase, **changes: object) -> Wait:
    return dataclasses.replace(w, phase=phase, **changes)  # type: ignore[arg-type]


def _looked(w: Wait, found: Found | None, clock: Clock) -> tuple[Wait, list[Request]]:
    if found is None or found[0].state == FREE:
        if w.queued:  # (a queued transaction may have been decided, or decide here: ask first)
            return _to(w, Phase.ASK_FREE, found=found), [AskDone(None)]
        return _to(w, Phase.CLAIM), [Claim(found[1] if found is not None else None)]  # released: claim at once
    first: list[Request] = [] if w.tried else [Act.NOTE_CONTENTION, *([Act.ENQUEUE] if w.queued else [])]
    w = _to(w, Phase.ASK, found=found, tried=True)
    if w.queued:
        return w, [*first, AskDone(found[0])]
    w, rest = _judge(w, clock)
    return w, [*first, *rest]


def _judge(w: Wait, clock: Clock) -> tuple[Wait, list[Request]]:
    """The key is held by ``w.found``: take it over when expired, else sleep and look again (or time out)."""
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
    return _to(w, Phase.LOOK), [*notify, Act.SLEEP, Get()]
