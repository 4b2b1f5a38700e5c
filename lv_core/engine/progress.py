"""A running statement: Spark Connect progress reports as :class:`~lv_core.events.Progress` events,
and interruption (``Transaction.cancel()``, a kernel interrupt).

While :func:`statement` is active in a thread, every Spark operation that thread starts carries the
transaction's tag (Spark Connect tags are per thread), so :func:`interrupt` stops exactly this
transaction's running operation (``SparkSession.interruptTag``), not the background commits of
other transactions sharing the session. Spark's progress handler runs in the thread that executes
the operation, so a thread-local says which transaction and statement a report belongs to.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from lv_core import events as ev
from lv_core.concurrency import Backoff
from lv_core.errors import Interrupted

__all__ = ["forget", "interrupt", "numbering", "raise_if_cancelled", "statement", "tag_of"]

_local = threading.local()
_lock = threading.Lock()
_installed: set[int] = set()  # id() of the sessions our handler is registered on
_cancelled: set[str] = set()  # transactions whose running statement was interrupted
_running: dict[str, int] = {}  # transactions with a statement running (how many threads)
#: While a cancelled statement runs on, its operations are interrupted this often: a cancel landing
#: between two Spark operations of one statement must stop the next one too.
_REPEAT_S = 0.2


#: Once Spark reported on a statement, its progress is re-sent this often while it runs even when
#: Spark reports nothing new (its clock moves on; a long last task does not look like a frozen
#: statement). Not before the first report: a "running" event always follows Spark's own first one.
TICK_S = 1.0


@dataclass
class _Run:
    events: ev.EventStream
    txn: str
    number: int
    t0: float
    last: tuple[int, int, int] = (-1, -1, -1)  # (done, total, running) of the last event: repeats are dropped
    #: operation id -> (tasks done, tasks known): a statement may run several Spark operations
    ops: dict[str, tuple[int, int]] = field(default_factory=dict)
    running: int = 0  # tasks in flight in the current operation
    sent: float = 0.0  # monotonic time of the last event
    ended: bool = False
    #: Spark reported a running operation with tasks: events start then (a Cancel at the first "running"
    #: event meets a running Spark operation, never the gap between two)
    reported: bool = False
    #: held while an event of this run is emitted: the final event is the last one, never a tick after it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def counts(self) -> tuple[int, int, int]:
        return (sum(d for d, _ in self.ops.values()), sum(t for _, t in self.ops.values()), self.running)

    def emit(self, final: Optional[str] = None) -> None:
        """Send the current progress (call with ``lock`` held); ``final``: the statement ended so
        ("done" or "failed"), the last event of this run."""
        if self.ended:
            return
        self.sent = time.monotonic()
        if final is not None:
            self.ended = True
            self.events.emit(ev.Progress(self.txn, statement=self.number, stage=final, done=0, total=0,
                                         elapsed_s=self.sent - self.t0))
            return
        done, total, running = self.last = self.counts()
        self.events.emit(ev.Progress(self.txn, statement=self.number, stage="running", done=done, total=total,
                                     elapsed_s=self.sent - self.t0, running=running))


def tag_of(txn_id: str) -> str:
    """The Spark operation tag of a transaction's statements (no commas: Spark refuses them)."""
    return "lv-" + txn_id.replace(",", "_")


_runs: dict[int, _Run] = {}  # the runs in progress, by id() (the ticker re-sends theirs)
_ticker: Optional[threading.Thread] = None


def stage_counts(stages: Any) -> tuple[int, int]:
    """(tasks done, tasks known) of one Spark operation's stages: a stage that is done counts as
    all done (a skipped stage, e.g. a reused shuffle, never completes its tasks)."""
    done = total = 0
    for s in stages or ():
        n = int(s.num_tasks)
        total += n
        done += n if getattr(s, "done", False) else min(n, int(s.num_completed_tasks))
    return done, total


def _handler(stages: Any = None, inflight_tasks: int = 0, operation_id: Optional[str] = None,
             done: bool = False, **_: Any) -> None:
    run: Optional[_Run] = getattr(_local, "run", None)
    if run is None:
        return
    finished, total = stage_counts(stages)
    with run.lock:
        key = operation_id or ""
        if done:  # the operation ended: all its tasks are done (or were not needed); said with the next event
            if key in run.ops:
                total = max(total, run.ops[key][1])
                run.ops[key] = (total, total)
            run.running = 0
            return
        if total:
            run.ops[key] = (finished, total)
            run.reported = True  # events ("running") only from here on: while a Spark operation runs
        run.running = int(inflight_tasks or 0)
        if run.reported and run.counts() != run.last:
            run.emit()


def _tick() -> None:
    """Re-send the progress of every statement that reported nothing for :data:`TICK_S`."""
    global _ticker
    every = Backoff(min(0.25, TICK_S / 4), min(0.25, TICK_S / 4))
    while True:
        every.sleep()
        with _lock:
            if not _runs:
                _ticker = None
                return
            runs = list(_runs.values())
        for run in runs:
            with run.lock:
                if run.reported and time.monotonic() - run.sent >= TICK_S:
                    run.emit()


def _start(run: _Run) -> None:
    global _ticker
    run.sent = time.monotonic()
    with _lock:
        _runs[id(run)] = run
        if _ticker is None:
            # A daemon thread while statements run (not a pool task: it lives as long as they do).
            _ticker = threading.Thread(target=_tick, name="lv-progress-ticker", daemon=True)
            _ticker.start()


def _stop(run: _Run, stage: str) -> None:
    """The statement ended: its last event (stage "done" or "failed"); no tick after it."""
    with _lock:
        _runs.pop(id(run), None)
    with run.lock:
        run.emit(final=stage)


def _install(spark: Any) -> None:
    """Register the handler once per session (marked on the session: ids of dead objects recur)."""
    with _lock:
        if getattr(spark, "_lv_progress_handler", False):
            return
        try:
            spark._lv_progress_handler = True
        except AttributeError:  # a session that takes no attributes: register once per id
            if id(spark) in _installed:
                return
            _installed.add(id(spark))
    with contextlib.suppress(AttributeError):  # a classic (non-Connect) session reports no progress
        spark.registerProgressHandler(_handler)


@contextlib.contextmanager
def statement(spark: Any, txn: Any, number: int) -> Iterator[None]:
    """Run statement ``number`` of ``txn`` (a TransactionPort with ``events``) in this thread: its
    Spark operations carry the transaction's tag, progress reports become Progress events, and a
    final Progress has stage ``"done"`` (or ``"failed"``). Nested calls for the same transaction
    keep the outer number (a cell numbers its statements; ``txn.sql`` inside does not renumber).

    Raises:
        Interrupted: the transaction was cancelled (before or while the statement ran).
    """
    outer: Optional[_Run] = getattr(_local, "run", None)
    if outer is not None and outer.txn == txn.id:
        yield
        return
    given = getattr(_local, "number", None)
    if given is not None and given[0] == txn.id:
        number = given[1]
    _check(txn.id)
    _install(spark)
    run = _Run(txn.events, txn.id, number, time.monotonic())
    _local.run = run
    _start(run)
    with _lock:
        _running[txn.id] = _running.get(txn.id, 0) + 1
    tag = tag_of(txn.id)
    tagged = False
    with contextlib.suppress(Exception):
        spark.addTag(tag)
        tagged = True
    stage = "failed"
    try:
        yield
        stage = "done"
    except Exception:
        _check(txn.id)  # an interrupted operation fails with whatever Spark says: report the interrupt
        raise
    finally:
        _local.run = outer
        with _lock:
            left = _running.pop(txn.id, 1) - 1
            if left > 0:
                _running[txn.id] = left
        if tagged:
            with contextlib.suppress(Exception):
                spark.removeTag(tag)
        _stop(run, stage)


@contextlib.contextmanager
def numbering(txn_id: str, number: int) -> Iterator[None]:
    """Statements of ``txn_id`` run in this thread meanwhile count as statement ``number`` (a cell
    runs its statements one ``txn.sql`` call at a time and numbers them itself)."""
    outer = getattr(_local, "number", None)
    _local.number = (txn_id, number)
    try:
        yield
    finally:
        _local.number = outer


def raise_if_cancelled(txn_id: str) -> None:
    """Before a statement's next Spark operation: raise :class:`~lv_core.errors.Interrupted` if its
    transaction was cancelled meanwhile. An interrupt that reaches Spark while a write job sets up
    its output folder is lost (Hadoop's local file system swallows it while it runs ``chmod``), so a
    cancel must not rely on reaching the next operation in time."""
    _check(txn_id)


def _check(txn_id: str) -> None:
    with _lock:
        if txn_id not in _cancelled:
            return
        _cancelled.discard(txn_id)
    raise Interrupted("the running statement was cancelled; the transaction stays as it was before it") from None


def interrupt(spark: Any, txn_id: str) -> None:
    """Interrupt the Spark operation ``txn_id`` is running (from any thread); its statement raises
    :class:`~lv_core.errors.Interrupted`, and so does its next one if none was running."""
    with _lock:
        _cancelled.add(txn_id)
    if spark is None:
        return

    def stop() -> None:
        with contextlib.suppress(Exception):  # nothing running, or a session that cannot interrupt
            spark.interruptTag(tag_of(txn_id))

    def unseen() -> bool:
        """The statement still runs and has not seen the cancel."""
        with _lock:
            return txn_id in _cancelled and txn_id in _running

    def until_seen() -> None:
        # Again while the statement runs on: the cancel may have fallen between two of its
        # operations (hitting nothing), and the next one must not run to its end.
        deadline = time.monotonic() + 600.0
        every = Backoff(_REPEAT_S, _REPEAT_S)
        while time.monotonic() < deadline:
            every.sleep()
            if not unseen():
                return
            stop()

    stop()
    if unseen():
        # A daemon thread, not a WAITS task: it may repeat for minutes, and pool threads are joined at exit.
        threading.Thread(target=until_seen, name=f"lv-cancel-{txn_id}", daemon=True).start()


def forget(txn_id: str) -> None:
    """Drop a pending cancel request of an ended transaction."""
    with _lock:
        _cancelled.discard(txn_id)
