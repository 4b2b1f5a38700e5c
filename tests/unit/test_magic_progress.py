"""Progress events and interrupts of a running statement (lv_core.engine.progress) and the magics'
text fallback line, against a recording stand-in for the Spark Connect session."""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from lv_core import events as ev
from lv_core.engine import progress
from lv_core.errors import Interrupted
from lv_magic.sqlcell import progress_printer


@dataclass
class RecordingSpark:
    """Records what the progress module asks of a Spark Connect session."""

    tags: list[str] = field(default_factory=list)
    handlers: list[Any] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)

    def registerProgressHandler(self, handler: Any) -> None:  # noqa: N802 - pyspark's name
        self.handlers.append(handler)

    def addTag(self, tag: str) -> None:  # noqa: N802
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.tags.remove(tag)

    def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
        self.interrupted.append(tag)
        return []


def stage(tasks: int, completed: int) -> Any:
    return SimpleNamespace(num_tasks=tasks, num_completed_tasks=completed)


def test_progress_reports_become_events_of_the_running_statement() -> None:
    spark, txn = RecordingSpark(), SimpleNamespace(id="T-1", events=ev.EventStream())
    with progress.statement(spark, txn, 3):
        assert spark.tags == [progress.tag_of("T-1")]  # Spark operations of this thread carry the tag
        with progress.statement(spark, txn, 9):  # txn.sql inside a numbered cell statement keeps the number
            spark.handlers[0](stages=[stage(10, 4), stage(5, 5)], inflight_tasks=2, operation_id="op", done=False)
    spark.handlers[0](stages=[stage(1, 1)], inflight_tasks=0, operation_id="other", done=False)  # not ours
    got = [(e.statement, e.stage, e.done, e.total) for e in txn.events.history if isinstance(e, ev.Progress)]
    assert got == [(3, "running", 9, 15), (3, "done", 0, 0)]
    assert spark.tags == []


def test_cancel_interrupts_the_tagged_operation_and_the_statement_says_so() -> None:
    spark, txn = RecordingSpark(), SimpleNamespace(id="T-2", events=ev.EventStream())
    with pytest.raises(Interrupted, match="cancelled"):
        with progress.statement(spark, txn, 1):
            progress.interrupt(spark, "T-2")  # e.g. from the widget's Cancel button thread
            raise RuntimeError("OPERATION_CANCELED")  # what Spark raises in the statement
    assert spark.interrupted == [progress.tag_of("T-2")]
    assert [e.stage for e in txn.events.history if isinstance(e, ev.Progress)] == ["failed"]
    with progress.statement(spark, txn, 2):  # the request was used up: the next statement runs
        pass


def test_a_cancel_between_two_operations_interrupts_the_next_one() -> None:
    """The cancel lands after the statement's first Spark operation ended (it interrupts nothing);
    the statement's next operation is interrupted too, not left to run to its end."""
    again = threading.Event()

    class Spark(RecordingSpark):
        def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
            super().interruptTag(tag)
            if len(self.interrupted) == 2:
                again.set()
            return []

    spark, txn = Spark(), SimpleNamespace(id="T-4", events=ev.EventStream())
    with pytest.raises(Interrupted, match="cancelled"):
        with progress.statement(spark, txn, 1):
            progress.interrupt(spark, "T-4")  # between operations: nothing to interrupt yet
            assert again.wait(10.0)  # the second operation runs: it is interrupted as well
            raise RuntimeError("OPERATION_CANCELED")
    n = len(spark.interrupted)
    time.sleep(3 * progress._REPEAT_S)  # noqa: SLF001 - no event marks "nothing happens": give it time
    assert len(spark.interrupted) == n  # the statement saw the cancel: no more interrupts


def test_text_fallback_line_overwrites_itself_and_is_erased() -> None:
    txn = SimpleNamespace(id="T-3", events=ev.EventStream())
    out = io.StringIO()
    unsubscribe = progress_printer(txn, out)
    txn.events.emit(ev.Progress("T-3", statement=2, stage="running", done=40, total=200, elapsed_s=3.14))
    txn.events.emit(ev.Progress("T-3", statement=2, stage="done", done=0, total=0, elapsed_s=4.0))
    unsubscribe()
    text = out.getvalue()
    assert text.startswith("\r  statement 2: 40/200 tasks, 3.1 s") and text.endswith("\r")


def test_connect_says_the_engine_is_starting_and_how_long_it_took(capsys: Any) -> None:
    from lv_magic.cmd.admin import start_engine

    class Lakehouse:
        touched = 0

        @property
        def spark(self) -> object:
            Lakehouse.touched += 1
            return object()

    start_engine(Lakehouse(), "sc://spark.example:15002")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "connecting to Spark at sc://spark.example:15002 ..."
    assert lines[1].startswith("Spark engine ready in ") and lines[1].endswith(" s")
    assert Lakehouse.touched == 1


class _Stubborn:
    """A transaction port whose running statement ignores cancels (as Spark does when an interrupt
    lands while a write job sets up its output folder): it ends only when ``release`` is set."""

    def __init__(self) -> None:
        self.id = "t-stubborn"
        self.cancels = 0
        self.rolled_back = threading.Event()
        self.release = threading.Event()

    def cancel(self) -> None:
        self.cancels += 1

    def rollback(self, reason: str, rule: str) -> None:
        assert self.release.is_set(), "rolled back while the statement still ran"
        self.rolled_back.set()


def test_an_interrupt_spark_ignores_frees_the_kernel_and_rolls_back_when_the_statement_ends() -> None:
    import _thread
    import signal

    from lv_magic.cell import stop
    from lv_magic.sqlcell import Lingering, in_worker

    txn, started = _Stubborn(), threading.Event()

    def statement() -> None:
        started.set()
        txn.release.wait(30)

    def interrupter() -> None:
        started.wait(10)
        _thread.interrupt_main()

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupter, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(Lingering) as caught:
            in_worker(txn, statement, grace_s=0.5)
    finally:
        signal.signal(signal.SIGINT, old)
    assert txn.cancels == 1 and time.monotonic() - t0 < 10
    err = stop(txn, "t", "interrupted (kernel interrupt)", 2, caught.value)
    assert "did not stop yet" in str(err) and "rolls back as soon as it ends" in str(err)
    assert not txn.rolled_back.is_set()  # the statement still runs: no rollback under it
    txn.release.set()
    assert txn.rolled_back.wait(10)


def test_tasks_count_over_every_operation_and_skipped_stages_count_as_done(monkeypatch: Any) -> None:
    """The bar moved to 50% and froze: a statement's second operation restarted the count, and a
    skipped stage (a reused shuffle) never completes its tasks. Now: done of all known tasks."""
    monkeypatch.setattr(progress, "TICK_S", 3600.0)  # no ticks in this test
    spark, txn = RecordingSpark(), SimpleNamespace(id="T-6", events=ev.EventStream())
    skipped = SimpleNamespace(num_tasks=4, num_completed_tasks=0, done=True)
    with progress.statement(spark, txn, 1):
        h = spark.handlers[0]
        h(stages=[stage(4, 2), stage(4, 0)], inflight_tasks=2, operation_id="a", done=False)
        h(stages=[stage(4, 4), skipped], inflight_tasks=0, operation_id="a", done=False)
        h(stages=[stage(4, 4), skipped], inflight_tasks=0, operation_id="a", done=True)
        h(stages=[stage(2, 1)], inflight_tasks=1, operation_id="b", done=False)
    got = [(e.stage, e.done, e.total, e.running) for e in txn.events.history if isinstance(e, ev.Progress)]
    assert got == [("running", 2, 8, 2), ("running", 8, 8, 0), ("running", 9, 10, 1), ("done", 0, 0, 0)]


def test_the_statement_clock_runs_while_spark_reports_nothing_new(monkeypatch: Any) -> None:
    monkeypatch.setattr(progress, "TICK_S", 0.05)
    spark, txn = RecordingSpark(), SimpleNamespace(id="T-7", events=ev.EventStream())
    ticks: list[ev.Progress] = []
    three = threading.Event()

    def on(e: ev.Event) -> None:
        if isinstance(e, ev.Progress) and e.stage == "running":
            ticks.append(e)
            if len(ticks) >= 3:
                three.set()

    txn.events.subscribe(on)
    with progress.statement(spark, txn, 1):
        time.sleep(0.2)  # no event marks "no tick comes": before Spark's first report, none does
        assert ticks == []  # (a Cancel at the first "running" event still meets a Spark operation)
        spark.handlers[0](stages=[stage(2, 1)], inflight_tasks=1, operation_id="a", done=False)
        assert three.wait(10.0)  # the last task runs long: the same counts, sent again with the time
    stream = [e for e in txn.events.history if isinstance(e, ev.Progress)]
    assert all((e.done, e.total, e.running) == (1, 2, 1) for e in ticks[:3])
    assert ticks[0].elapsed_s < ticks[1].elapsed_s < ticks[2].elapsed_s
    assert stream[-1].stage == "done"  # the end is the last event: no tick after it
    n = len(txn.events.history)
    time.sleep(0.2)  # no event marks "no tick comes": give the ticker time to misbehave
    assert len(txn.events.history) == n


def test_text_fallback_says_running_tasks_and_a_statement_of_unknown_size() -> None:
    txn = SimpleNamespace(id="T-8", events=ev.EventStream())
    out = io.StringIO()
    unsubscribe = progress_printer(txn, out)
    txn.events.emit(ev.Progress("T-8", statement=1, stage="running", done=0, total=0, elapsed_s=1.5))
    txn.events.emit(ev.Progress("T-8", statement=1, stage="running", done=3, total=4, elapsed_s=2.5, running=1))
    unsubscribe()
    text = out.getvalue()
    assert "statement 1: starting, 1.5 s" in text and "statement 1: 3/4 tasks (1 running), 2.5 s" in text
