"""Every thread pool of lv_core, the rule of what may wait on what, and the one poll backoff.

Three process-wide executors, ordered. A task may wait only on futures of an executor *before* its
own, never on its own or a later one, so the wait-for graph between pools has no cycle and a full
pool only delays work, never deadlocks:

1. ``REQUESTS``: leaf store requests (a GET, a PUT, a LIST, one marker or log entry). A task here
   never waits on another future, another transaction, a lock or the clock beyond its own request.
2. ``TASKS``: short compound steps that fan out requests and collect them (a plan's writes, a probe
   that reads ahead, a group's checks). A task here waits on ``REQUESTS`` futures only.
3. ``WAITS``: anything that waits for *other transactions* or for time: predecessor waits, the
   validation lock's renewal, background commits, queued cleanup. A task here may wait on
   ``REQUESTS`` and ``TASKS`` futures and on other transactions. Its bound is high (threads are
   created lazily) because a wait holds its thread for as long as another transaction takes: a
   bounded pool of waits could fill with waiters whose awaited transactions need a thread to finish.

Callers that run on a plain thread (the user's thread, a magic cell) may wait on any pool.
:func:`gather` enforces the rule in every build: waiting on one's own or a later pool raises.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

__all__ = ["Backoff", "Pool", "REQUESTS", "TASKS", "WAITS", "current_pool", "gather", "gather_or_inline", "may_wait",
           "submit", "then"]

T = TypeVar("T")


class Pool(IntEnum):
    """The executors in wait order: a task may wait on pools with a lower value only."""

    REQUESTS = 1
    TASKS = 2
    WAITS = 3


_local = threading.local()


def current_pool() -> Pool | None:
    """The pool running the calling thread's current task, or None on a plain thread."""
    return getattr(_local, "pool", None)


class _Executor(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose tasks know which pool they run on (for :func:`gather`'s check)."""

    def __init__(self, pool: Pool, max_workers: int) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=f"lv-{pool.name.lower()}")
        self.pool = pool

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        pool = self.pool

        def run() -> T:
            outer = getattr(_local, "pool", None)
            _local.pool = pool
            try:
                return fn(*args, **kwargs)
            finally:
                _local.pool = outer

        return super().submit(run)


#: Wide enough that a 32-table commit writes in one round (each table's write is a request, or a
#: task of a few when a marker must be placed again).
REQUESTS = _Executor(Pool.REQUESTS, 32)
TASKS = _Executor(Pool.TASKS, 32)
#: Threads are made on demand: the bound is a safety net, not a tuning knob (see the module doc).
WAITS = _Executor(Pool.WAITS, 256)
_EXECUTORS = {Pool.REQUESTS: REQUESTS, Pool.TASKS: TASKS, Pool.WAITS: WAITS}


def submit(pool: Pool, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """Run ``fn`` on ``pool``'s executor."""
    return _EXECUTORS[pool].submit(fn, *args, **kwargs)


def may_wait(on: Pool) -> bool:
    """Whether the calling thread may wait on ``on``'s futures (the module's rule)."""
    me = current_pool()
    return me is None or on < me


def _check_wait(on: Pool) -> None:
    me = current_pool()
    if not may_wait(on):
        assert me is not None  # a plain thread may wait on any pool
        raise RuntimeError(f"a {me.name} task may not wait on {on.name} futures (lv_core.concurrency's rule)")


def gather(pool: Pool, fn: Callable[[T], Any], items: Iterable[T], *, limit: int | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` with the calls run in parallel on ``pool``; results in order, the
    first error (in item order) raised once every call started has ended (none is left running behind
    the caller). ``limit``: at most this many calls in flight at once (a long read must not fill the
    shared pool); once a call failed, no further one starts."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    _check_wait(pool)
    window = len(items) if limit is None else max(1, limit)
    futures: list[Future[Any]] = []
    out: list[Any] = []
    first: BaseException | None = None
    for i, x in enumerate(items):
        if i >= window:  # keep ``window`` in flight: the oldest ends before the next starts
            first = _collect(futures[i - window], out, first)
            if first is not None:
                break
        futures.append(submit(pool, fn, x))
    for f in futures[len(out):]:
        first = _collect(f, out, first)
    if first is not None:
        raise first
    return out


def gather_or_inline(pool: Pool, fn: Callable[[T], Any], items: Iterable[T], *, limit: int | None = None) -> list[Any]:
    """:func:`gather` where the calling thread may wait on ``pool``, else the calls one after another on this
    thread (a read path that runs both from a transaction's thread and from inside a pool task)."""
    return gather(pool, fn, items, limit=limit) if may_wait(pool) else [fn(x) for x in items]


def _collect(f: Future[Any], out: list[Any], first: BaseException | None) -> BaseException | None:
    try:
        out.append(f.result())
    except BaseException as e:  # noqa: BLE001 - re-raised by gather once all have ended
        out.append(None)
        return first or e
    return first


def done(value: T) -> Future[T]:
    """A future that already holds ``value`` (an answer known without a request)."""
    out: Future[T] = Future()
    out.set_result(value)
    return out


def then(pool: Pool, future: Future[T], fn: Callable[[T], Any]) -> Future[Any]:
    """``fn(future.result())`` on ``pool`` once ``future`` is done, without a thread waiting for it:
    how a task goes on from another task's result without breaking the wait rule (the result's
    error, if any, becomes the returned future's)."""
    out: Future[Any] = Future()

    def go(done: Future[T]) -> None:
        def run() -> None:
            if not out.set_running_or_notify_cancel():
                return
            try:
                out.set_result(fn(done.result()))
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                out.set_exception(e)

        try:
            submit(pool, run)
        except RuntimeError as e:  # interpreter shutting down
            if out.set_running_or_notify_cancel():
                out.set_exception(e)

    future.add_done_callback(go)
    return out


@dataclass
class Backoff:
    """The delays of one poll loop: ``first`` growing by ``factor`` up to ``cap``, with jitter
    (each delay drawn from ``[jitter * d, d]``) so pollers of the same object spread out.

    ``sleep(deadline)`` never sleeps past ``deadline`` (a ``time.monotonic()`` value) and says whether
    time is left.
    """

    first: float
    cap: float
    factor: float = 2.0
    jitter: float = 1.0
    _next: float = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1 or not 0 < self.jitter <= 1:
            raise ValueError("need 0 < first <= cap, factor >= 1, 0 < jitter <= 1")
        self._next = self.first

    def delays(self) -> Iterator[float]:
        while True:
            yield self.next_delay()

    def next_delay(self) -> float:
        d = self._next
        self._next = min(self.cap, self._next * self.factor)
        return d if self.jitter >= 1 else d * random.uniform(self.jitter, 1.0)

    def reset(self) -> None:
        self._next = self.first

    def sleep(self, deadline: float | None = None) -> bool:
        delay = self.next_delay()
        if deadline is not None:
            delay = min(delay, deadline - time.monotonic())
            if delay <= 0:
                return False
        time.sleep(delay)
        return deadline is None or time.monotonic() < deadline
