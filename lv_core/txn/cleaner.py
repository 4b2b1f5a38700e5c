"""Clean-up off the caller's path: a finished transaction's leftovers are deleted in the background.

Once a transaction is committed (or aborted and its markers freed), nothing in the protocol waits for
its sublog, decision, staged-but-unpublished files or lease to disappear: they only tell `lv recover`
what to remove after a crash. So ``commit()`` returns before those deletes, and a few daemon workers
per process run them (the lease last, as before: a transaction seen without a lease has published
everything it will publish). A process that dies first leaves leftovers that `lv recover` removes,
exactly as a crash during a synchronous clean-up did. :func:`drain` waits for queued clean-ups
(``Lakehouse.close()`` and interpreter exit call it; tests that look at leftovers call it).

The work runs on :data:`lv_core.concurrency.WAITS` (a background checkpoint reads a table's log with
requests in parallel, and the rule lets only that pool wait on them), at most :data:`WORKERS` jobs at
once, first come first served: a burst (a 32-table commit's checkpoints) must not take the CPU and
the shared request pool from the transactions in the foreground. Queued work still runs at
interpreter exit (concurrent.futures joins its workers first).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import threading
from collections import deque
from typing import Callable, Sequence

from lv_core import concurrency
from lv_core.errors import LvError
from lv_core.storage.base import ObjectStore
from lv_core.storage.instrumented import QUIESCE

__all__ = ["background", "drain", "submit"]

log = logging.getLogger("lv_core.txn")

#: Background jobs running at once.
WORKERS = 4

_cv = threading.Condition()
_pending = 0
_queue: deque[Callable[[], None]] = deque()
_running = 0  # workers draining _queue


def _work() -> None:
    """One worker: run queued jobs until none is left."""
    global _running
    while True:
        with _cv:
            if not _queue:
                _running -= 1
                return
            job = _queue.popleft()
        try:
            job()
        except BaseException:  # noqa: BLE001 - a failed ``done`` callback, or a thread-killing error: the
            # worker goes on with the queue (a worker that died would still count as running, and
            # the jobs queued behind it would never run)
            log.exception("background clean-up callback failed")


def _enqueue(job: Callable[[], None]) -> None:
    """Queue ``job`` (which never raises); start a worker when fewer than :data:`WORKERS` run. The job
    runs in its submitter's context (context variables), as a task submitted to a pool would: a worker
    runs many jobs, and must not lend one submitter's context to the next."""
    global _running
    with _cv:
        _queue.append(functools.partial(contextvars.copy_context().run, job))
        if _running >= WORKERS:
            return
        _running += 1
    try:
        concurrency.submit(concurrency.Pool.WAITS, _work)
    except RuntimeError:  # interpreter shutting down: run it here
        _work()


def _run(store: ObjectStore, txn: str, keys: Sequence[str], last: str | None,
         done: Callable[[], None] | None) -> None:
    global _pending
    try:
        for k in keys:  # one by one: off the caller's path
            store.delete(k)
        if last is not None:
            store.delete(last)
    except LvError as e:
        log.warning("transaction %s: its clean-up failed (lv recover removes the leftovers): %s", txn, e)
    except Exception:  # never let a background clean-up die silently
        log.exception("transaction %s: clean-up failed (lv recover removes the leftovers)", txn)
    finally:
        if done is not None:
            done()
        with _cv:
            _pending -= 1
            _cv.notify_all()


def submit(store: ObjectStore, txn: str, keys: Sequence[str], last: str | None = None,
           done: Callable[[], None] | None = None) -> None:
    """Delete ``keys``, then ``last``, in the background; ``done`` runs afterwards."""
    global _pending
    with _cv:
        _pending += 1
    keys = list(keys)
    _enqueue(lambda: _run(store, txn, keys, last, done))


def background(what: str, fn: Callable[[], object]) -> None:
    """Run ``fn`` in the background (e.g. a checkpoint: nobody waits for it); errors are logged."""
    global _pending

    def run() -> None:
        global _pending
        try:
            fn()
        except Exception:
            log.exception("background %s failed", what)
        finally:
            with _cv:
                _pending -= 1
                _cv.notify_all()

    with _cv:
        _pending += 1
    _enqueue(run)


def drain(timeout_s: float | None = None) -> bool:
    """Wait until every clean-up submitted so far has run; False on timeout."""
    with _cv:
        return _cv.wait_for(lambda: _pending == 0, timeout=timeout_s)


atexit.register(drain, 60.0)
QUIESCE.append(lambda: drain(60.0))  # request counts reset after earlier clean-ups ran
