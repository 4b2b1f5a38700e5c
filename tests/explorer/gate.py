"""Store requests that wait for a scheduler: the mechanics under the schedule explorer.

Every request a transaction makes to a :class:`GatedStore` (from its own thread or from one of
lv_core's pools working for it) becomes a :class:`Request` that blocks until the :class:`Scheduler`
decides it: RUN (applied, answered), LOST (applied, but the caller gets an error: a lost response)
or KILL (never applied: the client is dead). Requests are attributed to a transaction ("actor") by
a context variable that :func:`attribution` carries into lv_core's thread pools and helper threads.
Requests nobody is attributed to (the process-wide lease keeper thread) pass straight through: the
explorer does not schedule heartbeats; a paused or crashed client's keeper registration is paused
instead (:func:`lv_core.protocol.lease.LeaseKeeper.pause`), which is what a hung process looks like.

:class:`ShiftedClock` replaces the ``time`` module of every loaded lv_core module with one whose
``time()`` and ``monotonic()`` run ``offset`` seconds ahead: the explorer makes time pass (a pause
past a lease) without sleeping. Both are test-only patches; lv_core has no hook for them.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import contextlib
import contextvars
import re
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterator

from lv_core.errors import StorageError
from lv_core.storage.base import OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode
from tests.explorer.memstore import MemStore

__all__ = ["ACTOR", "Decision", "GatedStore", "Killed", "Request", "Scheduler", "ShiftedClock", "attribution"]

#: The transaction (actor name) the current thread works for; None: nobody's (not scheduled).
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("lv_explorer_actor", default=None)


class Killed(BaseException):
    """Raised in a crashed client's threads at its next request: it never gets another answer.
    A BaseException, so lv_core's ``except Exception`` handlers cannot turn it into a retry."""


class Decision(Enum):
    PENDING = "pending"
    RUN = "run"
    LOST = "lost"  # applied, then the caller gets a StorageError (the response was lost)
    KILL = "kill"


class Op(Enum):
    GET = "GET"
    HEAD = "HEAD"
    LIST = "LIST"
    PUT = "PUT"
    DELETE = "DELETE"
    COPY = "COPY"

    @property
    def writes(self) -> bool:
        return self in (Op.PUT, Op.DELETE, Op.COPY)


_TXN = re.compile(r"\d{8}T\d{6}-[0-9a-f]{16}")
_HEX = re.compile(r"\b(?=[0-9]*[a-f])[0-9a-f]{12,}\b")  # random hex; version numbers (digits) stay


def norm_key(key: str) -> str:
    """A key with transaction ids and random hex removed: the same request in every run."""
    return _HEX.sub("#", _TXN.sub("T", key))


@dataclass(eq=False)
class Request:
    """One store request waiting for (or given) a decision."""

    seq: int
    actor: str
    op: Op
    key: str  # the key written or read; the prefix of a LIST
    detail: str  # put mode, LIST start_after, COPY source
    ident: tuple[str, str, str, int] = ("", "", "", 0)  # (actor, op, normalised key, occurrence)
    stutter: bool = False  # a repeated poll: see :meth:`Scheduler._is_stutter`
    decision: Decision = Decision.PENDING
    done: threading.Event = field(default_factory=threading.Event)

    def reads_key(self, key: str) -> bool:
        if self.op is Op.LIST:
            return key.startswith(self.key)
        return key == self.key or (self.op is Op.COPY and key == self.detail)

    def conflicts(self, other: Request) -> bool:
        """Do the two requests not commute (the same object, at least one writing it)? Requests of one
        actor pending together come from different threads: no program order between them either."""
        if not (self.op.writes or other.op.writes):
            return False
        a, b = (self, other) if self.op.writes else (other, self)
        return b.reads_key(a.key) or (b.op.writes and a.reads_key(b.key))

    def __str__(self) -> str:
        extra = f" [{self.detail}]" if self.detail else ""
        return f"{self.actor}: {self.op.value} {norm_key(self.key)}{extra}"


class Scheduler:
    """Pending requests, and the rules for when the set of them is complete enough to choose from."""

    def __init__(self, *, settle_s: float = 0.002, max_wait_s: float = 1.5) -> None:
        self.settle_s = settle_s
        self.max_wait_s = max_wait_s
        self.cv = threading.Condition()
        self.pending: list[Request] = []
        self.alive: set[str] = set()  # actors whose main thread still runs
        self.held: set[str] = set()  # paused actors: nothing of theirs is released
        self.crashed: set[str] = set()
        self.passthrough = False  # after the schedule: everything not killed runs at once
        self.running = 0  # released requests not yet answered
        self.last_arrival = time.monotonic()
        self.trace: list[str] = []
        self._seq = 0
        self._released = 0  # how many requests were released so far
        self._counts: dict[tuple[str, str, str], int] = {}
        self._writes: list[tuple[int, str]] = []  # (release number, key) of every write released
        self._repeating: dict[str, bool] = {}  # actor -> its last released request was a repeated read
        self._last_read: dict[tuple[str, str, str, str], int] = {}  # (actor, op, key, detail) -> release number

    # ---------------------------------------------------------------- requester side
    def call(self, op: Op, key: str, detail: str, thunk: Callable[[], Any]) -> Any:
        actor = ACTOR.get()
        with self.cv:
            if actor in self.crashed:
                raise Killed(actor)
            if actor is None or self.passthrough:
                if op.writes:  # a heartbeat (or clean-up) write still ends other actors' stutters
                    self._released += 1
                    self._writes.append((self._released, key))
                return thunk()
            self._seq += 1
            req = Request(self._seq, actor, op, key, detail)
            n = self._counts.get((actor, op.value, norm_key(key)), 0)
            self._counts[(actor, op.value, norm_key(key))] = n + 1
            req.ident = (actor, op.value, norm_key(key) + (f"|{norm_key(detail)}" if detail else ""), n)
            req.stutter = self._is_stutter(req)
            self.pending.append(req)
            self.last_arrival = time.monotonic()
            self.cv.notify_all()
            while req.decision is Decision.PENDING:
                self.cv.wait()
            if req.decision is Decision.KILL:
                raise Killed(actor)
        try:
            result = thunk()
            if req.decision is Decision.LOST:
                raise StorageError(f"injected lost response: {req}")
            return result
        except Exception:
            if req.decision is Decision.LOST:
                raise StorageError(f"injected lost response: {req}") from None
            raise
        finally:
            with self.cv:
                self.running -= 1
                self.last_arrival = time.monotonic()
                self.cv.notify_all()

    def _is_stutter(self, req: Request) -> bool:
        """A read that answers exactly as this actor's previous identical read (no write released
        since to what it reads), when the actor's last released request already was such a repeat:
        the second repeat in a row of a poll loop. The explorer defers these until nobody else can
        move (a bound, stated in the tests: a poll's first repeat is explored in every position)."""
        if req.op.writes or not self._repeating.get(req.actor):
            return False
        return self._repeats(req)

    def _repeats(self, req: Request) -> bool:
        if req.op.writes:
            return False
        seen = self._last_read.get((req.actor, req.op.value, req.key, req.detail))
        return seen is not None and not any(req.reads_key(k) for n, k in self._writes if n > seen)

    # ---------------------------------------------------------------- scheduler side
    def settle(self, timeout_s: float = 60.0) -> list[Request]:
        """Wait until the pending set is complete: nothing released is still running, every live
        actor that is neither held nor crashed waits in the store, and no request arrived for
        ``settle_s`` (or ``max_wait_s`` passed with something pending: an actor waits in-process).
        Returns the pending requests ([] when every actor finished)."""
        began = time.monotonic()
        with self.cv:
            while True:
                now = time.monotonic()
                active = self.alive - self.held - self.crashed
                waiting = {r.actor for r in self.pending}
                complete = self.running == 0 and active <= waiting and now - self.last_arrival >= self.settle_s
                if complete or (self.pending and self.running == 0 and now - began >= self.max_wait_s):
                    for r in self.pending:  # releases since it arrived may have changed that
                        r.stutter = self._is_stutter(r)
                    return list(self.pending)
                if not active and not self.pending and self.running == 0:
                    return []
                if now - began > timeout_s:
                    raise TimeoutError(f"no progress for {timeout_s} s; pending: {[str(r) for r in self.pending]}")
                self.cv.wait(timeout=self.settle_s)

    def wait_for(self, ident: tuple[str, str, str, int], timeout_s: float = 0.5) -> Request | None:
        """The pending request named ``ident`` once it arrived (replaying a schedule), else None."""
        deadline = time.monotonic() + timeout_s
        with self.cv:
            while True:
                for r in self.pending:
                    if r.ident == ident:
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(timeout=min(left, 0.05))

    def decide(self, req: Request, decision: Decision) -> None:
        with self.cv:
            self.pending.remove(req)
            req.decision = decision
            if decision is not Decision.KILL:
                self._repeating[req.actor] = self._repeats(req)
                self.running += 1
                self._released += 1
                if req.op.writes:
                    self._writes.append((self._released, req.key))
                else:
                    self._last_read[(req.actor, req.op.value, req.key, req.detail)] = self._released
            self.trace.append(f"{decision.value} {req}")
            self.cv.notify_all()

    def crash(self, actor: str) -> None:
        """The actor's process dies: none of its requests is ever released (now or later)."""
        with self.cv:
            self.crashed.add(actor)
            self.trace.append(f"crash {actor}")
            self.cv.notify_all()

    def finish(self) -> None:
        """The schedule is over: kill the crashed actors' requests, run everyone else's at once."""
        with self.cv:
            self.passthrough = True
            for r in list(self.pending):
                self.pending.remove(r)
                r.decision = Decision.KILL if r.actor in self.crashed else Decision.RUN
                if r.decision is Decision.RUN:
                    self.running += 1
            self.cv.notify_all()

    def actor_started(self, actor: str) -> None:
        with self.cv:
            self.alive.add(actor)

    def actor_done(self, actor: str) -> None:
        with self.cv:
            self.alive.discard(actor)
            self.last_arrival = time.monotonic()
            self.cv.notify_all()


class GatedStore(ObjectStore):
    """A :class:`MemStore` whose every request waits for the :class:`Scheduler`."""

    scheme = "mem"

    def __init__(self, inner: MemStore, scheduler: Scheduler) -> None:
        self.inner = inner
        self.scheduler = scheduler

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        return self.scheduler.call(Op.GET, key, "", lambda: self.inner.get(key, byte_range=byte_range))

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        detail = "if-match" if isinstance(mode, IfMatch) else str(mode)
        return self.scheduler.call(Op.PUT, key, detail, lambda: self.inner.put(key, data, mode=mode))

    def head(self, key: str) -> ObjectMeta:
        return self.scheduler.call(Op.HEAD, key, "", lambda: self.inner.head(key))

    def delete(self, key: str) -> None:
        self.scheduler.call(Op.DELETE, key, "", lambda: self.inner.delete(key))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        found = self.scheduler.call(Op.LIST, prefix, start_after or "",
                                    lambda: list(self.inner.list(prefix, start_after=start_after)))
        return iter(found)

    def copy(self, src: str, dst: str) -> str:
        return self.scheduler.call(Op.COPY, dst, src, lambda: self.inner.copy(src, dst))

    def url(self, key: str = "") -> str:
        return self.inner.url(key)


class ShiftedClock:
    """lv_core's view of time, ``offset`` seconds ahead of the machine's (see the module docstring)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.module = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
        self.module.time = lambda: time.time() + self.offset
        self.module.monotonic = lambda: time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    @contextlib.contextmanager
    def installed(self) -> Iterator[ShiftedClock]:
        """Every loaded ``lv_core`` module that imported ``time`` sees this clock while inside."""
        patched = [m for name, m in list(sys.modules.items()) if name.startswith("lv_core")
                   and isinstance(m, types.ModuleType) and getattr(m, "time", None) is time]
        for m in patched:
            m.time = self.module  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            for m in patched:
                m.time = time  # type: ignore[attr-defined]


@contextlib.contextmanager
def attribution() -> Iterator[None]:
    """Carry the :data:`ACTOR` of the submitting thread into thread-pool tasks and helper threads
    (Python 3.11 threads start with an empty context). The lease keeper is nobody's."""
    submit = concurrent.futures.ThreadPoolExecutor.submit
    start = threading.Thread.start

    def submit_in_context(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return submit(self, contextvars.copy_context().run, fn, *args, **kwargs)

    def start_in_context(self: threading.Thread) -> None:
        target = getattr(self, "_target", None)
        pool_worker = target is concurrent.futures.thread._worker
        if ACTOR.get() is not None and self.name != "lv-lease-keeper" and not pool_worker:
            ctx, run = contextvars.copy_context(), self.run

            def run_in_context() -> None:
                try:
                    ctx.run(run)
                except Killed:  # a crashed client's helper thread ends silently (pytest's own thread
                    pass  # hook, installed per test, would report it before quiet_when_killed below)

            self.run = run_in_context  # type: ignore[method-assign]
        start(self)

    hook = threading.excepthook

    def quiet_when_killed(args: Any) -> None:  # a crashed client's helper thread ends silently
        if not isinstance(args.exc_value, Killed):
            hook(args)

    concurrent.futures.ThreadPoolExecutor.submit = submit_in_context  # type: ignore[method-assign]
    threading.Thread.start = start_in_context  # type: ignore[method-assign]
    threading.excepthook = quiet_when_killed
    try:
        yield
    finally:
        concurrent.futures.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        threading.Thread.start = start  # type: ignore[method-assign]
        threading.excepthook = hook
