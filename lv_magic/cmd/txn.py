"""``%lv begin``, ``commit``, ``rollback``: named transactions driven by hand."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

from lv_core import events as ev
from lv_core.errors import LvError
from lv_magic.args import begin_parser
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
from lv_magic.outcome import background_commit, outcome_line
from lv_magic.state import OpenTxn, commit_in_background
from widgets.model import versions_text


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
    pending = in_background(ctx)
    fut, note = commit_in_background(ot.txn, ctx.commit_wait_s)
    ot.future = fut
    if note is not None:  # this line shows the outcome once the commit ends
        background_commit(rest[0], ctx.state.names_in(note), fut, ctx.state.names_in)
        return
    try:
        res = fut.result()
    except BaseException:
        settle(ctx, ot.txn.id, pending)
        raise
    print(f"{rest[0]} committed: {versions_text(res.versions, 'read-only')}")
    settle(ctx, ot.txn.id, pending)


def in_background(ctx: MagicContext) -> list[tuple[str, OpenTxn]]:
    """The named transactions whose commit goes on in the background right now."""
    return [(name, ot) for name, ot in list(ctx.state.txns.items()) if ot.future is not None and not ot.future.done()]


def settle(ctx: MagicContext, ended: str, pending: list[tuple[str, OpenTxn]], timeout_s: float = 10.0) -> None:
    """After ``ended`` committed or rolled back, give the background commits that waited for it up to
    ``timeout_s`` to end, and say how each ended: in this cell, and (by the post-execute hook, from
    this cell's thread) in the cell that asked for it, so that a notebook run saves both. A commit
    that goes on to wait for another transaction is not waited for: this cell says so.

    ``pending`` are the background commits from before ``ended`` ended (:func:`in_background`): one
    that ended at once when ``ended`` did is reported too, not only those still running now."""
    waiting = [(name, ot) for name, ot in pending
               if any(isinstance(e, ev.Waiting) and e.on_txn == ended for e in ot.txn.events.history)]
    deadline = time.monotonic() + timeout_s
    for name, ot in waiting:
        fut = ot.future
        assert fut is not None
        poke = threading.Event()
        unsubscribe = ot.txn.events.subscribe(lambda _e, poke=poke: poke.set(), replay=False)
        fut.add_done_callback(partial(_set, poke))
        try:
            while not (fut.done() or current_wait(ot.txn) not in (None, ended)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                poke.wait(left)
                poke.clear()
        finally:
            unsubscribe()
        if fut.done():
            print(outcome_line(name, fut, ctx.state.names_in)[1])
        elif current_wait(ot.txn) not in (None, ended):
            print(f"{name}: {ctx.state.names_in(last_wait(ot.txn))}; its commit goes on in the background")


def current_wait(txn: Any) -> str | None:
    """The transaction ``txn`` waits for right now (its last Waiting not ended since), or None."""
    for e in reversed(txn.events.history):
        if isinstance(e, ev.Waiting):
            return e.on_txn
        if isinstance(e, (ev.WaitEnded, ev.Committed, ev.Aborted)):
            return None
    return None


def _set(flag: threading.Event, _fut: Any) -> None:
    flag.set()


def last_wait(txn: Any) -> str:
    """What ``txn`` waits for now, in words (from its last Waiting event)."""
    w = next((e for e in reversed(txn.events.history) if isinstance(e, ev.Waiting)), None)
    return f"waiting for {w.on_txn} at {w.table}@{w.version}" if w is not None else "committing"


def rollback(ctx: MagicContext, rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv rollback NAME")
    ot = ctx.state.get(rest[0])
    pending = in_background(ctx)
    ot.txn.rollback("rolled back by %lv rollback", "rollback")
    print(f"{rest[0]} rolled back; nothing changed")
    settle(ctx, ot.txn.id, pending)
