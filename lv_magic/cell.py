"""``%%lvtxn``: run a cell (SQL statements, or Python with ``txn`` bound) as one transaction."""

from __future__ import annotations

import html
from typing import Any

from IPython.display import HTML, display

from lv_core.errors import LvError, TransactionAborted
from lv_magic.args import LvtxnArgs, parse_lvtxn
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
from lv_magic.state import OpenTxn, commit_in_background


def run_lvtxn(ctx: MagicContext, line: str, cell: str) -> None:
    """Run the cell, re-running it on abort up to ``--retries`` times (raises ArgError or LvError on
    user errors, TransactionAborted when the last attempt aborts)."""
    args = parse_lvtxn(line)
    lh = ctx.require()
    retries = args.retries if args.retries is not None else ctx.default_retries
    attempt = 0
    while True:
        attempt += 1
        try:
            return run_cell(ctx, lh, args, cell)
        except TransactionAborted as e:
            if attempt > retries:
                raise
            display(HTML(f"<div class='lv-retry'>attempt {attempt} aborted ({html.escape(e.rule)}): "
                         f"{html.escape(e.reason)}; re-running the cell</div>"))


def run_cell(ctx: MagicContext, lh: Any, args: LvtxnArgs, cell: str) -> None:
    """One attempt: begin (or continue the named open transaction), run the body, commit unless --open."""
    state = ctx.state
    current = state.txns.get(args.name) if args.name is not None else None  # the named transaction, if open
    continuing = current is not None and current.txn.state == "active"
    if current is not None and continuing:
        txn = current.txn
    else:
        txn = lh.begin(args.preset or ctx.default_preset, features=args.features, slack=args.slack,
                       timeout_s=args.timeout or 60.0, name=args.name)
        widget = txn_widget(ctx, txn, args.quiet)
        if args.open or args.name:
            state.add(args.name or txn.id, txn, widget)
    try:
        run_body(ctx, txn, args, cell)
    except KeyboardInterrupt:
        txn.rollback()
        raise
    except BaseException:
        if not (args.open or continuing):
            txn.rollback()
        raise
    if args.open or continuing:
        return
    fut, note = commit_in_background(txn, ctx.commit_wait_s)
    if note is not None:
        name = args.name or txn.id
        state.txns[name] = OpenTxn(txn, future=fut)
        display(HTML(f"<div class='lv-waiting'>{html.escape(name)}: {html.escape(note)}; the commit "
                     "continues in the background (see the widget, or %lv status)</div>"))
        return
    fut.result()  # raises TransactionAborted


def run_body(ctx: MagicContext, txn: Any, args: LvtxnArgs, cell: str) -> None:
    """Run the cell body in ``txn``: Python (``--python``), or SQL statements shown one by one."""
    if args.python:
        ns = ctx.user_ns if ctx.user_ns is not None else {}
        ns["txn"] = txn
        exec(compile(cell, "<lvtxn>", "exec"), ns)  # the user's own cell
        return
    from lv_core.engine.sql_parse import parse_script

    # Parse the whole cell first: a syntax error anywhere runs nothing, and its line/column count
    # from the top of the cell. Then run statement by statement, showing each result.
    if not cell.strip():
        raise LvError("the cell has no SQL statement (use --python for Python)")
    last = None
    for st in parse_script(cell):
        result = txn.sql(st.text)
        if result is not None:
            last = result
            show_result(ctx, result)
    if args.out and last is not None and ctx.user_ns is not None:
        ctx.user_ns[args.out] = last


def show_result(ctx: MagicContext, df: Any) -> None:
    """Display the first ``row_limit`` rows of a statement's result."""
    limit = ctx.row_limit
    try:
        pdf = df.limit(limit + 1).toPandas()
    except AttributeError:
        display(df)
        return
    display(pdf.head(limit))
    if len(pdf) > limit:
        display(HTML(f"<div class='lv-note'>showing the first {limit} rows (use --out VAR for all)</div>"))
