"""SQL cells: prepare a cell before anything runs (variables, parse, bind), run its statements one by
one (numbered progress, interrupts), and say what each did in one short line.

:func:`prepare` substitutes ``{name}``/``:name`` notebook variables as typed literals, parses every
statement and binds its tables and columns to the lakehouse (:mod:`lv_core.engine.sql_check`): a
cell with an error raises before any transaction begins, so it runs nothing and shows no widget.
:func:`run_statements` collects each statement's output in a :class:`Transcript` that the caller
shows once the outcome is known: statements of a rolled-back transaction show no counts.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from IPython.display import display

from lv_core import events as ev
from lv_core.engine import progress
from lv_core.engine.sql_ast import BoundStatement, Statement
from lv_core.engine.sql_check import check_script
from lv_core.engine.sql_params import bind_params
from lv_core.engine.sql_parse import parse_script
from lv_core.errors import LvError
from lv_magic.context import MagicContext
from lv_magic.results import ResultTable, show_query

__all__ = ["ResultTable", "Transcript", "columns_of", "prepare", "progress_printer", "run_statements"]

_VERBS = {"update": "UPDATE", "delete": "DELETE FROM", "insert": "INSERT INTO", "merge": "MERGE INTO"}


def columns_of(lh: Any, table: str) -> dict[str, str]:
    """The latest schema of ``table`` as {column: Delta type} ("" for nested types)."""
    return {f.name: f.type if isinstance(f.type, str) else "" for f in lh.snapshot(table).schema}


def prepare(ctx: MagicContext, lh: Any, cell: str) -> list[BoundStatement]:
    """Variables, parse and bind: the cell's statements, or an LvError before anything ran. This is
    the cell's one parse and bind: its statements run as they are (:func:`run_statements`).

    Raises:
        SqlError, TableNotFound, SchemaError: naming the line, the cause and close names.
    """
    if not cell.strip():
        raise LvError("the cell has no SQL statement (use --python for Python)")
    text = bind_params(cell, ctx.user_ns if ctx.user_ns is not None else {})
    return check_script(parse_script(text), lh.list_tables(), lambda t: columns_of(lh, t))


@dataclass
class Transcript:
    """What the statements of a cell said, shown once the transaction's outcome is known."""

    items: list[Any] = field(default_factory=list)
    last: Any = None  # the last statement result (a DataFrame) for --out
    keep: Any = None  # what the cell keeps of its last SELECT (lv_magic.results.Keep: --out, --chart)
    ran: int = 0  # statements that completed

    def say(self, line: str) -> None:
        self.items.append(line)

    def show(self) -> None:
        for item in self.items:
            if isinstance(item, str):
                print(item)
            elif callable(getattr(item, "show", None)):  # an output that updates itself (lv_magic.outcome)
                item.show()
            else:
                display(item)


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"


def describe_result(ctx: MagicContext, st: Statement, result: Any, out: Transcript) -> None:
    """One short line (DML, DDL) or a result table (queries) for statement ``st``."""
    if st.kind in _VERBS:
        row = result.first().asDict() if result is not None else {}
        line = f"{_VERBS[st.kind]} {st.target}: {_rows(int(row.get('num_affected_rows', 0)))}"
        if st.kind == "merge":
            parts = [f"{row.get(f'num_{k}_rows', 0)} {k}" for k in ("updated", "deleted", "inserted")]
            line += f" ({', '.join(parts)})"
        out.say(line)
        return
    if st.kind == "create":
        out.say(f"CREATE TABLE {st.spec.name}: created")
        return
    if st.kind == "optimize":
        row = result.first().asDict()
        out.say(f"OPTIMIZE {st.spec.name}: {row['numFilesRemoved']} files compacted into {row['numFilesAdded']}")
        return
    if result is None:
        return
    title = {"show": "SHOW TABLES", "describe": f"DESCRIBE {st.spec.name if st.spec else ''}",
             "vacuum": f"VACUUM {st.target}"}.get(st.kind) or (f"SELECT ({', '.join(st.sources)})" if st.sources
                                                              else "SELECT")
    show_query(ctx, st, title, result, out.items, out.keep)


def run_statements(ctx: MagicContext, lh: Any, txn: Any, statements: Sequence[BoundStatement], out: Transcript,
                   numbers: Optional[list[int]] = None) -> None:
    """Run ``statements`` in ``txn`` in order, numbered 1.. (or ``numbers``) for Progress events,
    recording each one's output in ``out`` (``out.ran`` counts the completed ones). Reading a
    query's rows for display belongs to its statement: it carries the transaction's tag, so a
    cancel or an interrupt stops it too."""
    if any(st.kind != "create" for st in statements):
        # Start (or reach) Spark in this thread: the embedded server dies with the thread that
        # started it (PR_SET_PDEATHSIG), and the worker threads below end after each statement.
        lh.spark  # noqa: B018
    for i, st in enumerate(statements):
        number = numbers[i] if numbers else i + 1
        result = in_worker(txn, lambda st=st, number=number: _one(ctx, lh, txn, st, number, out))  # type: ignore[misc]
        if result is not None and st.kind == "select":
            out.last = result
        out.ran += 1


def _one(ctx: MagicContext, lh: Any, txn: Any, st: BoundStatement, number: int, out: Transcript) -> Any:
    if st.kind == "create":  # no Spark needed
        result = lh.data_plane.run_bound(txn, st, number)
    else:
        with progress.statement(lh.spark, txn, number):
            result = lh.data_plane.run_bound(txn, st, number)
            describe_result(ctx, st, result, out)
            return result
    describe_result(ctx, st, result, out)
    return result


class Lingering(KeyboardInterrupt):
    """An interrupted statement whose worker still runs after the grace period (Spark can lose an
    interrupt, e.g. one landing while a write job sets up its output folder); ``done`` is set when
    the worker ends."""

    def __init__(self, done: threading.Event) -> None:
        super().__init__()
        self.done = done


def in_worker(txn: Any, fn: Callable[[], Any], *, grace_s: float = 60.0) -> Any:
    """``fn()`` in a worker thread while this (the kernel's main) thread waits for it.

    A kernel interrupt then lands here, never inside the Spark client's gRPC calls (an interrupt
    there can leave the client's channel locked): it cancels ``txn``'s running operation, waits up
    to ``grace_s`` for the worker to end, and raises KeyboardInterrupt (:class:`Lingering` if the
    worker still runs: the kernel is free again while it ends on its own).
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e
        finally:
            done.set()

    try:
        # started inside the try: Thread.start() waits for the worker to run, and an interrupt landing
        # in that wait must cancel the statement too
        threading.Thread(target=target, name=f"lv-statement-{txn.id}", daemon=True).start()
        while not done.wait(0.25):  # short waits: an interrupt reaches this thread between them
            pass
    except KeyboardInterrupt:
        txn.cancel()
        deadline = time.monotonic() + grace_s
        while not done.is_set() and time.monotonic() < deadline:
            try:
                done.wait(0.25)
            except KeyboardInterrupt:  # a second interrupt: still let the worker end first
                pass
        if not done.is_set():
            raise Lingering(done) from None
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value")


def progress_printer(txn: Any, stream: Any = None) -> Callable[[], None]:
    """The text fallback when no widget is shown: one line per statement running for more than a
    second (``statement 2: 40/200 tasks, 3.1 s``) that updates itself and is erased when the statement
    ends. In a Jupyter kernel it is one display updated in place (a saved notebook keeps nothing of
    it); elsewhere (a terminal, ``stream``) a line rewritten with ``\\r``. Returns the unsubscribe."""
    in_kernel = stream is None and "ipykernel" in sys.modules
    stream = stream if stream is not None else sys.stdout
    state: dict[str, Any] = {"width": 0, "handle": None}

    def show(text: str) -> None:
        if in_kernel:
            if state["handle"] is None:
                state["handle"] = display(_Line(text), display_id=True)
            else:
                state["handle"].update(_Line(text))
            return
        state["width"] = max(state["width"], len(text))
        stream.write("\r" + text.ljust(state["width"]) + ("\r" if not text else ""))
        stream.flush()

    def on(e: ev.Event) -> None:
        if not isinstance(e, ev.Progress):
            return
        if e.stage == "running" and e.elapsed_s >= 1.0:  # quick statements show none
            running = getattr(e, "running", 0)
            tasks = (f"{e.done}/{e.total} tasks" + (f" ({running} running)" if running else "") if e.total
                     else f"{running} tasks running" if running else "starting")
            show(f"  statement {e.statement}: {tasks}, {e.elapsed_s:.1f} s")
            state["shown"] = True
        elif e.stage != "running" and state.get("shown"):
            show("")
            state["shown"] = False

    return txn.events.subscribe(on, replay=False)


class _Line:
    """One line of text for a display (empty: shows nothing)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<div class='lv-progress'>{html.escape(self.text)}</div>" if self.text else ""
