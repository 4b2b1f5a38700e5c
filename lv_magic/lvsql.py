"""``%%lvsql``: SQL in autocommit (each statement its own transaction, committed before the next runs)
with SQL transaction control: ``BEGIN [ISOLATION LEVEL p]`` opens a named transaction (``--name``,
default ``sql``) exactly as ``%lv begin`` does; the statements after it, in this cell and the next
ones, run in it until ``COMMIT`` or ``ROLLBACK`` (or ``%lv commit sql``). ``BEGIN ATOMIC ... END``
is one transaction that a failing statement rolls back as a whole.
"""

from __future__ import annotations

from typing import Any, Optional

from lv_core.engine.sql import SqlError
from lv_core.engine.sql_ast import BoundStatement, Statement
from lv_core.engine.sql_txn import check_blocks
from lv_core.errors import Interrupted, LvError, TransactionAborted
from lv_magic.args import LvsqlArgs, parse_lvsql
from lv_magic.cell import stop
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
from lv_magic.outcome import LiveTranscript, background_commit
from lv_magic.results import keep_for, store
from lv_magic.sqlcell import Transcript, describe_result, prepare, progress_printer, run_statements
from lv_magic.state import OpenTxn, commit_in_background
from widgets.model import versions_text

_NO_TXN = ("create", "show", "describe", "vacuum")
_AUTOCOMMIT_RETRIES = 3


def run_lvsql(ctx: MagicContext, line: str, cell: str) -> None:
    """Run the cell's statements (raises ArgError or LvError on user errors; what ran before an
    error is shown first)."""
    args = parse_lvsql(line)
    lh = ctx.require()
    statements = prepare(ctx, lh, cell)
    check_blocks(statements)
    out = Transcript(keep=keep_for(ctx, lh, args, statements))  # --out, --chart: checked before anything runs
    atomic_mark: Optional[int] = None  # where the open BEGIN ATOMIC block's output starts
    open_from: Optional[int] = 0 if _open(ctx) is not None else None  # where the open transaction's lines start
    try:
        for number, st in enumerate(statements, 1):
            if st.kind == "txn":
                atomic_mark = _control(ctx, lh, args, st, out)
                open_from = (open_from if open_from is not None else len(out.items)) if _open(ctx) else None
            else:
                _statement(ctx, lh, st, number, out, atomic_mark)
    except BaseException:
        out.show()
        raise
    store(ctx, out.keep, out.last, out.items)
    ot = _open(ctx)
    if ot is None or open_from is None or open_from >= len(out.items):
        out.show()
        return
    # the lines of a transaction still open (BEGIN ... in a later cell COMMIT or ROLLBACK): struck
    # through in place if it rolls back or aborts
    Transcript(items=out.items[:open_from]).show()
    LiveTranscript(out.items[open_from:], ot.txn).show()


def _open(ctx: MagicContext) -> Optional[OpenTxn]:
    """The transaction a SQL BEGIN opened, while it is still active."""
    name = ctx.state.sql_txn
    ot = ctx.state.txns.get(name) if name is not None else None
    return ot if ot is not None and ot.txn.state == "active" else None


def _control(ctx: MagicContext, lh: Any, args: LvsqlArgs, st: Statement, out: Transcript) -> Optional[int]:
    """BEGIN / COMMIT / ROLLBACK; returns where a BEGIN ATOMIC block's output starts (else None)."""
    state, c = ctx.state, st.spec
    ot = _open(ctx)
    if c.action == "begin":
        if ot is not None:
            raise SqlError(f"line {st.line}: BEGIN while {state.label(ot.txn)} is open; COMMIT or ROLLBACK it first",
                           line=st.line)
        txn = lh.begin(c.preset or ctx.default_preset, name=args.name)
        ot = state.add(args.name, txn)
        state.sql_txn = args.name
        ot.widget = txn_widget(ctx, txn, args.quiet)
        out.say(f"BEGIN{' ATOMIC' if c.atomic else ''}: {args.name} ({txn.preset}) is open")
        return len(out.items) if c.atomic else None
    if ot is None:
        raise SqlError(f"line {st.line}: {st.text.split()[0].upper()} without an open transaction (no BEGIN)",
                       line=st.line)
    state.sql_txn = None
    label = state.label(ot.txn)
    if c.action == "rollback":
        ot.txn.rollback("rolled back by ROLLBACK", "rollback")
        out.say(f"ROLLBACK: {label} rolled back; nothing changed")
        return None
    fut, note = commit_in_background(ot.txn, ctx.commit_wait_s)
    ot.future = fut
    if note is not None:  # a line that becomes the commit's outcome when it ends
        out.items.append(background_commit(f"COMMIT: {label}", state.names_in(note), fut, state.names_in, show=False))
        return None
    res = fut.result()  # raises TransactionAborted
    out.say(f"COMMIT: {label} committed ({versions_text(res.versions, 'read-only')})")
    return None


def _statement(ctx: MagicContext, lh: Any, st: BoundStatement, number: int, out: Transcript,
               atomic_mark: Optional[int]) -> None:
    ot = _open(ctx)
    if ot is not None:
        _in_open(ctx, lh, ot, st, number, out, atomic_mark)
    elif st.kind in _NO_TXN:
        describe_result(ctx, st, lh.data_plane.run_bound(None, st, number), out)
        out.ran += 1
    else:
        _autocommit(ctx, lh, st, number, out)


def _in_open(ctx: MagicContext, lh: Any, ot: OpenTxn, st: BoundStatement, number: int, out: Transcript,
             atomic_mark: Optional[int]) -> None:
    label = ctx.state.label(ot.txn)
    unsubscribe = progress_printer(ot.txn) if ot.widget is None else (lambda: None)
    try:
        run_statements(ctx, lh, ot.txn, [st], out, [number])
    except (KeyboardInterrupt, Interrupted) as e:
        ctx.state.sql_txn = None
        how = "interrupted (kernel interrupt)" if isinstance(e, KeyboardInterrupt) else "cancelled"
        if atomic_mark is not None:
            del out.items[atomic_mark:]
        raise stop(ot.txn, label, how, number, e) from None
    except LvError as e:
        if atomic_mark is None:
            kept = f"transaction {label} stays open (this statement changed nothing): go on, COMMIT or ROLLBACK"
            raise type(e)(f"{e}\n{kept}") from None
        ctx.state.sql_txn = None
        ot.txn.rollback(f"statement {number} failed: {str(e).splitlines()[0]}", "error")
        del out.items[atomic_mark:]
        raise type(e)(f"{e}\ntransaction {label} (BEGIN ATOMIC) rolled back: nothing of the block changed") from None
    finally:
        unsubscribe()


def _autocommit(ctx: MagicContext, lh: Any, st: BoundStatement, number: int, out: Transcript) -> None:
    """One statement as its own transaction, re-run when its commit aborts (as ``lh.sql`` does)."""
    mark = len(out.items)
    for attempt in range(_AUTOCOMMIT_RETRIES + 1):
        txn = lh.begin(ctx.default_preset)
        label = ctx.state.label(txn)
        unsubscribe = progress_printer(txn)
        try:
            run_statements(ctx, lh, txn, [st], out, [number])
            txn.commit()
            return
        except TransactionAborted:
            del out.items[mark:]
            if attempt >= _AUTOCOMMIT_RETRIES:
                raise
        except (KeyboardInterrupt, Interrupted) as e:
            del out.items[mark:]
            how = "interrupted (kernel interrupt)" if isinstance(e, KeyboardInterrupt) else "cancelled"
            raise stop(txn, label, how, number, e) from None
        except BaseException as e:
            del out.items[mark:]
            txn.rollback(f"statement {number} failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                         "error")
            raise
        finally:
            unsubscribe()
