"""``%lv begin``, ``commit``, ``rollback``: named transactions driven by hand."""

from __future__ import annotations

import time
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any

from lv_core import events as ev
from lv_core.errors import LvError
from lv_magic.args import begin_parser
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
from lv_magic.outcome import background_commit, outcome_line
from lv_magic.state import commit_in_background


def begin(ctx: MagicContext, rest: list[str]) -> None:
    lh = ctx.require()
    ns = begin_parser().parse_args(rest)
    txn = lh.begin(ns.preset or ctx.default_preset, features=ns.features, slack=ns.slack,
                   timeout_s=ns.timeout or 60.0, name=ns.name)
    ot = ctx.state.add(ns.name, txn)
    ot.widget = txn_widget(ctx, txn, ns.quiet)
    if ot.widget is None:
        print(f"began {ns.name} ({txn.preset})")


def commit(ctx: MagicContext, rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv commit NAME")
    ot = ctx.state.get(rest[0])
    fut, note = commit_in_background(ot.txn, ctx.commit_wait_s)
    ot.future = fut
    if note is not None:  # this line shows the outcome once the commit ends
        background_commit(rest[0], ctx.state.names_in(note), fut, ctx.state.names_in)
        return
    try:
        res = fut.result()
    except BaseException:
        settle(ctx, ot.txn.id)
        raise
    print(f"{rest[0]} committed: " + (", ".join(f"{t}@{v}" for t, v in res.versions.items()) or "read-only"))
    settle(ctx, ot.txn.id)


def settle(ctx: MagicContext, ended: str, timeout_s: float = 10.0) -> None:
    """After ``ended`` committed or rolled back, give the background commits that waited for it up to
    ``timeout_s`` to end, and say how each ended: in this cell, and (by the post-execute hook, from
    this cell's thread) in the cell that asked for it, so that a notebook run saves both."""
    waiting = [(name, ot) for name, ot in list(ctx.state.txns.items())
               if ot.future is not None and not ot.future.done() and waits_on(ot.txn, ended)]
    deadline = time.monotonic() + timeout_s
    for name, ot in waiting:
        assert ot.future is not None
        try:
            ot.future.exception(timeout=max(0.0, deadline - time.monotonic()))
        except FuturesTimeout:
            continue
        print(outcome_line(name, ot.future, ctx.state.names_in)[1])


def waits_on(txn: Any, other: str) -> bool:
    """Whether ``txn``'s last wait is for ``other`` (from its events)."""
    waits = [e for e in txn.events.history if isinstance(e, (ev.Waiting, ev.WaitEnded))]
    return bool(waits) and isinstance(waits[-1], ev.Waiting) and waits[-1].on_txn == other


def rollback(ctx: MagicContext, rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv rollback NAME")
    ot = ctx.state.get(rest[0])
    ot.txn.rollback("rolled back by %lv rollback", "rollback")
    print(f"{rest[0]} rolled back; nothing changed")
    settle(ctx, ot.txn.id)
