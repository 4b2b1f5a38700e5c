"""The serializable (LV[I]) commit, as a state machine (diagram in docs/ARCHITECTURE.md, checked against
:data:`_NEXT`): a pure :func:`step` from (the commit so far, the last answer) to (the commit now, the requests
to send next); :mod:`lv_core.txn.isolation` performs them. Store errors are not answers: they propagate."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

__all__ = ["Answer", "Commit", "Phase", "Request", "start", "step"]


class Phase(Enum):
    """Where the commit is."""

    READ_ONLY = "read-only"  # nothing written: validate at the head without the key
    FREE_KEY = "free-key"  # the free key's head (warm: the record we released last; else 1 GET)
    FAST = "fast"  # validate at that head, plan
    CLAIM = "claim"  # take the free key with the plan (PUT-if-match on the free record)
    EXECUTE = "execute"  # write the plan, publish
    WAIT = "wait"  # wait for the key, queued for group commit (lv_core.protocol.keywait)
    HELD = "held"  # read the head, the queue and the tails under the key
    VALIDATE = "validate"  # validate R1-R3 at that head, plan
    COMMIT = "commit"  # write the plan (and the group's), publish
    PUBLISH_GROUP = "publish-group"  # decided by the holder before: publish the group we served
    CATCH_UP = "catch-up"  # incompatible: publish the group and the foreign versions found
    COMMITTED = "committed"
    JOINED = "joined"  # decided by another holder's global version
    ABORTED = "aborted"
    TIMED_OUT = "timed-out"
    BACK_IN_QUEUE = "back-in-queue"  # a queued try of the free key that decided nothing

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({Phase.COMMITTED, Phase.JOINED, Phase.ABORTED, Phase.TIMED_OUT, Phase.BACK_IN_QUEUE})


class Request(Enum):
    """What the driver is asked to do; the answer of the last request of a step is the next answer."""

    VALIDATE_READ_ONLY = "validate-read-only"
    FIND_FREE_KEY = "find-free-key"  # (queued: first, whether a holder decided it already)
    VALIDATE_AT_FREE_HEAD = "validate-at-free-head"
    CLAIM_WITH_PLAN = "claim-with-plan"
    WITHDRAW_REQUEST = "withdraw-request"  # queued: the key is ours, no later holder may commit the request
    EXECUTE_PLAN = "execute-plan"
    WAIT_FOR_KEY = "wait-for-key"
    READ_UNDER_KEY = "read-under-key"
    VALIDATE_UNDER_KEY = "validate-under-key"
    FILL_MARKERS = "fill-markers"  # an empty commit at each marker the plan does not commit at
    COMMIT_PLAN = "commit-plan"
    PUBLISH_OTHERS = "publish-others"  # the group served, and the catch-ups of an R1 failure


class Answer(Enum):
    """What came back."""

    FREE = "free"  # a free key whose head is known: validate against it
    BUSY = "busy"  # no free key to take with the plan (held, contended, or a write needs the usual way)
    DECIDED = "decided"  # a holder's global version names the transaction
    COMPATIBLE = "compatible"  # validated, planned
    UNUSED_MARKER = "unused-marker"  # compatible, but a marker the plan does not commit at
    INCOMPATIBLE = "incompatible"  # a rule failed
    REFUSED = "refused"  # compatible, but written past foreign or pending versions (an abort of its own)
    PART_MISSING = "part-missing"  # a part of a multi-table commit outside the log cannot be included
    TAKEN = "taken"  # the key is ours, with the plan
    LOST = "lost"  # the free record changed first: nothing written
    PUBLISHED = "published"
    VOID = "void"  # a writer that ignores markers took a version before anything was written
    HELD = "held"
    UNDECIDED = "undecided"  # under the key, not decided by a holder before
    TIMED_OUT = "timed-out"
    DONE = "done"


@dataclass(frozen=True)
class Commit:
    """One commit attempt (immutable: :func:`step` returns a new one). ``queued``: a queued transaction's
    try of the free key; ``last``: the answer that led here (why it ended, for a final phase)."""

    phase: Phase
    queued: bool = False
    last: Answer | None = None


_NEXT: dict[tuple[Phase, Answer], Phase] = {
    (Phase.READ_ONLY, Answer.COMPATIBLE): Phase.COMMITTED,
    (Phase.READ_ONLY, Answer.INCOMPATIBLE): Phase.CATCH_UP,
    (Phase.FREE_KEY, Answer.FREE): Phase.FAST,
    (Phase.FREE_KEY, Answer.BUSY): Phase.WAIT,
    (Phase.FREE_KEY, Answer.DECIDED): Phase.JOINED,
    (Phase.FAST, Answer.COMPATIBLE): Phase.CLAIM,
    (Phase.FAST, Answer.REFUSED): Phase.ABORTED,
    (Phase.FAST, Answer.INCOMPATIBLE): Phase.WAIT,  # decided under the key, with the head read there
    (Phase.FAST, Answer.UNUSED_MARKER): Phase.WAIT,  # filled under the key
    (Phase.FAST, Answer.PART_MISSING): Phase.WAIT,
    (Phase.CLAIM, Answer.TAKEN): Phase.EXECUTE,
    (Phase.CLAIM, Answer.LOST): Phase.WAIT,
    (Phase.EXECUTE, Answer.PUBLISHED): Phase.COMMITTED,
    (Phase.EXECUTE, Answer.VOID): Phase.WAIT,
    (Phase.WAIT, Answer.HELD): Phase.HELD,
    (Phase.WAIT, Answer.DECIDED): Phase.JOINED,
    (Phase.WAIT, Answer.PUBLISHED): Phase.COMMITTED,  # by its own try of the free key, while queued
    (Phase.WAIT, Answer.TIMED_OUT): Phase.TIMED_OUT,
    (Phase.HELD, Answer.UNDECIDED): Phase.VALIDATE,
    (Phase.HELD, Answer.DECIDED): Phase.PUBLISH_GROUP,
    (Phase.VALIDATE, Answer.COMPATIBLE): Phase.COMMIT,
    (Phase.VALIDATE, Answer.UNUSED_MARKER): Phase.COMMIT,
    (Phase.VALIDATE, Answer.INCOMPATIBLE): Phase.CATCH_UP,
    (Phase.VALIDATE, Answer.REFUSED): Phase.ABORTED,
    (Phase.VALIDATE, Answer.PART_MISSING): Phase.ABORTED,
    (Phase.COMMIT, Answer.PUBLISHED): Phase.COMMITTED,
    (Phase.PUBLISH_GROUP, Answer.DONE): Phase.JOINED,
    (Phase.CATCH_UP, Answer.DONE): Phase.ABORTED,
}

_SEND: dict[Phase, tuple[Request, ...]] = {
    Phase.READ_ONLY: (Request.VALIDATE_READ_ONLY,),
    Phase.FREE_KEY: (Request.FIND_FREE_KEY,),
    Phase.FAST: (Request.VALIDATE_AT_FREE_HEAD,),
    Phase.CLAIM: (Request.CLAIM_WITH_PLAN,),
    Phase.EXECUTE: (Request.EXECUTE_PLAN,),
    Phase.WAIT: (Request.WAIT_FOR_KEY,),
    Phase.HELD: (Request.READ_UNDER_KEY,),
    Phase.VALIDATE: (Request.VALIDATE_UNDER_KEY,),
    Phase.COMMIT: (Request.COMMIT_PLAN,),
    Phase.PUBLISH_GROUP: (Request.PUBLISH_OTHERS,),
    Phase.CATCH_UP: (Request.PUBLISH_OTHERS,),
}


def start(*, writes: bool, queued: bool = False, waiting: bool = False) -> tuple[Commit, list[Request]]:
    """The first phase: read-only, or the free key (a queued transaction's try of it: ``queued``), or
    (``waiting``: its request was queued before its predecessors resolved) the wait, already queued."""
    if waiting:
        return _enter(Commit(Phase.WAIT))
    return _enter(Commit(Phase.FREE_KEY if writes or queued else Phase.READ_ONLY, queued))


def step(c: Commit, answer: Answer) -> tuple[Commit, list[Request]]:
    """The next phase of ``c`` given the answer to its last request, and what to send next. Pure."""
    to = _NEXT.get((c.phase, answer))
    if to is None or c.phase.final:
        raise ValueError(f"no transition from {c.phase.name} on {answer!r}")
    if to is Phase.WAIT and c.queued:
        to = Phase.BACK_IN_QUEUE  # its wait is already under way
    c = dataclasses.replace(c, phase=to, last=answer)
    if to is Phase.COMMIT and answer is Answer.UNUSED_MARKER:
        return c, [Request.FILL_MARKERS, Request.COMMIT_PLAN]
    if to is Phase.EXECUTE and c.queued:
        return c, [Request.WITHDRAW_REQUEST, Request.EXECUTE_PLAN]
    return _enter(c)


def _enter(c: Commit) -> tuple[Commit, list[Request]]:
    return c, list(_SEND.get(c.phase, ()))
