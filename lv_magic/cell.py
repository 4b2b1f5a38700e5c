"""``%%lvtxn``: run a cell (SQL statements, or Python with ``txn`` bound) as one transaction.

A SQL cell is prepared before the transaction begins (variables, parse, bind: :mod:`lv_magic.sqlcell`),
and its preset resolved (with ``--features``/``--slack``), once for the cell and all its re-runs: a
cell with an error runs nothing and shows no widget. A leading ``BEGIN [ISOLATION LEVEL p]`` sets
the preset, a trailing ``COMMIT``/``END``/``ROLLBACK`` ends the cell's transaction that way. The
statements' output is shown once the outcome is known; a transaction that ends without committing
says why (the failed statement, an interrupt, the abort rule), and its statements show no counts.
"""

from __future__ import annotations

import contextlib
import html
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from IPython.display import HTML, display

from lv_core.engine import progress
from lv_core.engine.sql_ast import BoundStatement, SqlError, Statement
from lv_core.errors import Interrupted, LvError, TransactionAborted
from lv_core.presets import Isolation, resolve
from lv_magic.args import LvtxnArgs, parse_lvtxn
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
from lv_magic.outcome import LiveTranscript, background_commit
from lv_magic.results import Keep, keep_for, store
from lv_magic.sqlcell import Lingering, Transcript, prepare, progress_printer, run_statements
from lv_magic.state import OpenTxn, commit_in_background
from widgets.model import versions_text


@dataclass
class CellPlan:
    """A prepared SQL cell: its statements, the preset of a leading BEGIN, how a trailing statement
    ends the transaction ("commit", "rollback", or None: the cell's default)."""

    statements: list[BoundStatement]
    preset: Optional[str] = None
    end: Optional[str] = None


def plan_cell(ctx: MagicContext, lh: Any, cell: str) -> CellPlan:
    """Prepare the cell and take its transaction control apart (raises before anything runs)."""
    statements = prepare(ctx, lh, cell)
    plan = CellPlan(statements)
    if statements and statements[0].kind == "txn" and statements[0].spec.action == "begin":
        plan.preset = statements.pop(0).spec.preset
    if statements and statements[-1].kind == "txn" and statements[-1].spec.action in ("commit", "rollback"):
        plan.end = statements.pop().spec.action
    for st in statements:
        if st.kind == "txn":
            raise SqlError(f"line {st.line}: {st.text.split()[0].upper()} in the middle of a %%lvtxn cell: the cell "
                           "is one transaction (BEGIN may open it, COMMIT or ROLLBACK end it); use %%lvsql for "
                           "several", line=st.line)
    if not statements:
        raise LvError("the cell has no SQL statement besides BEGIN/COMMIT")
    return plan


def run_lvtxn(ctx: MagicContext, line: str, cell: str) -> None:
    """Run the cell, re-running it on abort up to ``--retries`` times (raises ArgError or LvError on
    user errors, TransactionAborted when the last attempt aborts)."""
    args = parse_lvtxn(line)
    lh = ctx.require()
    plan = None if args.python else plan_cell(ctx, lh, cell)
    isolation = resolve((plan.preset if plan is not None else None) or args.preset or ctx.default_preset,
                        args.features, args.slack)
    kept = keep_for(ctx, lh, args, plan.statements if plan is not None else None)  # --out, --chart: checked now
    retries = args.retries if args.retries is not None else ctx.default_retries
    attempt = 0
    while True:
        attempt += 1
        try:
            return run_cell(ctx, lh, args, cell, isolation, plan, kept)
        except TransactionAborted as e:
            if attempt > retries:
                raise
            display(HTML(f"<div class='lv-retry'>attempt {attempt} aborted ({html.escape(e.rule)}): "
                         f"{html.escape(ctx.state.names_in(e.reason))}; re-running the cell</div>"))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def run_cell(ctx: MagicContext, lh: Any, args: LvtxnArgs, cell: str, isolation: Isolation,
             plan: Optional[CellPlan] = None, kept: Optional[Keep] = None) -> None:
    """One attempt: begin under ``isolation`` (or continue the named open transaction), run the body,
    commit unless --open."""
    state = ctx.state
    current = state.txns.get(args.name) if args.name is not None else None  # the named transaction, if open
    continuing = current is not None and current.txn.state == "active"
    if current is not None and continuing:
        txn = current.txn
    else:
        txn = lh.begin(isolation, timeout_s=args.timeout or 60.0, name=args.name)
        current = state.add(args.name or txn.id, txn) if (args.open or args.name) else None
    widget = txn_widget(ctx, txn, args.quiet)  # the same display path for plain, named and continued cells
    if current is not None and widget is not None:
        current.widget = widget
    label = state.label(txn)
    keep = args.open or continuing
    out = Transcript(keep=kept)
    unsubscribe = progress_printer(txn) if widget is None else (lambda: None)
    try:
        run_body(ctx, lh, txn, args, cell, plan, out)
    except (KeyboardInterrupt, Interrupted) as e:
        how = "interrupted (kernel interrupt)" if isinstance(e, KeyboardInterrupt) else "cancelled"
        raise stop(txn, label, how, out.ran + 1, e) from None
    except BaseException as e:
        what = "the cell" if plan is None else f"statement {out.ran + 1}"
        ours = isinstance(e, LvError) and not isinstance(e, TransactionAborted)
        if keep:
            if ours:
                raise type(e)(f"{e}\ntransaction {label} stays open ({what} changed nothing)") from None
            raise
        txn.rollback(f"{what} failed: {_first_line(e)}", "error")
        if ours:
            raise type(e)(f"{e}\ntransaction {label} rolled back: nothing changed") from None
        raise
    finally:
        unsubscribe()
    store(ctx, kept, out.last, out.items)
    end = plan.end if plan is not None else None
    if end == "rollback":
        txn.rollback("rolled back by the cell's ROLLBACK", "rollback")
        print(f"ROLLBACK: {label} rolled back; nothing changed")
        return
    if keep and end != "commit":
        LiveTranscript(out.items, txn).show()  # struck through if the transaction later rolls back
        return
    try:
        fut, note = commit_in_background(txn, ctx.commit_wait_s)
    except KeyboardInterrupt:  # the commit thread goes on (it may have decided already): say where to look
        state.txns[args.name or txn.id] = OpenTxn(txn, future=txn_future(txn), widget=widget)
        raise Interrupted(f"interrupted while transaction {label} commits: the commit goes on in the background "
                          "(%lv status shows how it ends)") from None
    if note is not None:
        LiveTranscript(out.items, txn).show()
        name = args.name or txn.id
        state.txns[name] = OpenTxn(txn, future=fut, widget=widget)
        state.remember(name, txn)
        background_commit(label, state.names_in(note), fut, state.names_in)  # updated with the outcome
        return
    res = fut.result()  # raises TransactionAborted
    out.show()
    if widget is None and plan is not None:
        print(f"transaction {label} committed: {written(res.versions, plan.statements)}")


def written(versions: dict[str, int], statements: Sequence[Statement]) -> str:
    """What a commit wrote, in words: ``kv@4, kv_b@2``, or for a cell of CREATE TABLEs alone
    ``created x, y`` (creating a table writes its first version outside the transaction)."""
    if versions:
        return versions_text(versions)
    created = [st.spec.name for st in statements if st.kind == "create"]
    if created:
        return "created " + ", ".join(created)
    return "read-only, nothing written"


def txn_future(txn: Any) -> Any:
    """A future that resolves when ``txn`` ends (for %lv status after an interrupted commit wait)."""
    from concurrent.futures import Future

    from lv_core import events as ev

    fut: Future = Future()

    def on(e: ev.Event) -> None:
        if isinstance(e, (ev.Committed, ev.Aborted)) and not fut.done():
            fut.set_result(None)

    txn.events.subscribe(on)
    return fut


def stop(txn: Any, label: str, how: str, number: int, err: Optional[BaseException] = None) -> LvError:
    """Interrupt the running Spark operation, roll back, and say so in one line. When the statement
    runs on (``err`` is :class:`Lingering`), the rollback waits for it in the background."""
    try:
        txn.cancel()
    except Exception:  # best effort: the rollback below is what matters
        pass
    reason = f"{how} during statement {number}"
    if isinstance(err, Lingering):
        done = err.done

        def later() -> None:
            done.wait()
            with contextlib.suppress(Exception):
                txn.rollback(reason, "interrupt")
            progress.forget(txn.id)

        threading.Thread(target=later, name=f"lv-rollback-{txn.id}", daemon=True).start()
        return Interrupted(f"{how}: statement {number} did not stop yet (Spark ignored the interrupt); transaction "
                           f"{label} rolls back as soon as it ends; nothing is committed")
    txn.rollback(reason, "interrupt")
    progress.forget(txn.id)
    return Interrupted(f"{how}: statement {number} stopped, transaction {label} rolled back; nothing changed")


def run_body(ctx: MagicContext, lh: Any, txn: Any, args: LvtxnArgs, cell: str, plan: Optional[CellPlan],
             out: Transcript) -> None:
    """Run the cell body in ``txn``: Python (``--python``), or the prepared SQL statements."""
    if args.python or plan is None:
        ns = ctx.user_ns if ctx.user_ns is not None else {}
        ns["txn"] = txn
        exec(compile(cell, "<lvtxn>", "exec"), ns)  # the user's own cell
        return
    run_statements(ctx, lh, txn, plan.statements, out)
