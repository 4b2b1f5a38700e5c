"""``%lv tables``, ``markers``, ``log``, ``dag``, ``status``: what the lakehouse and the open
transactions look like."""

from __future__ import annotations

import time
from typing import Any

from IPython.display import display

from lv_core.errors import LvError
from lv_magic.context import MagicContext
from lv_magic.display import html_table
from lv_magic.state import KernelState, OpenTxn

LOG_KINDS = {"marker": "MARKER (pending)", "freed": "freed marker (empty)"}


def tables(ctx: MagicContext, rest: list[str]) -> None:
    lh = ctx.require()
    display(html_table([[t, lh.version(t)] for t in lh.list_tables()], ["table", "version"], "lv-tables"))


def markers(ctx: MagicContext, rest: list[str]) -> None:
    lh = ctx.require()
    now = time.time()
    rows = []
    for tm in lh.scan_markers(rest or None, now=now, max_versions=None):
        if tm.errors:
            raise LvError(f"table {tm.table!r}: {tm.errors[0]}")
        for m in tm.markers:
            left = m.expires_in(now) or 0.0
            preds = ", ".join(f"{txn}@{table}@{version}" for txn, table, version in m.predecessors)
            rows.append([m.table, m.version, ctx.state.label(m.txn), f"{left:.0f}s" if left > 0 else "expired",
                         ctx.state.names_in(preds) or "-"])
    if not rows:
        print("no live markers")
        return
    display(html_table(rows, ["table", "version", "transaction", "lease left", "waits behind"], "lv-markers"))


def log(ctx: MagicContext, rest: list[str]) -> None:
    lh = ctx.require()
    if len(rest) != 1:
        raise LvError("usage: %lv log TABLE")
    label = ctx.state.label
    rows = [[e.version, LOG_KINDS.get(e.kind, "commit"), label(e.txn) if e.txn else "-", e.adds, e.removes]
            for e in lh.log(rest[0])]
    display(html_table(rows, ["version", "kind", "transaction", "adds", "removes"], "lv-log"))


def dag(ctx: MagicContext, rest: list[str]) -> None:
    ctx.require()
    label = ctx.state.label
    rows = [[name, label(e.dst), e.label] for name, ot in ctx.state.txns.items() for e in ot.txn.out_edges()]
    if not rows:
        print("no dependencies between open transactions")
        return
    display(html_table(rows, ["transaction", "waits behind", "at"], "lv-dag"))


def status_of(ot: OpenTxn, state: KernelState) -> str:
    """An open transaction's state, with what a background commit waits for (by name)."""
    if ot.future is not None and not ot.future.done():
        waits = [e for e in ot.txn.events.history if e.kind == "Waiting"]
        if waits:
            return f"waiting for {state.label(waits[-1].on_txn)} at {waits[-1].table}@{waits[-1].version}"
        return "committing"
    return ot.txn.state


def status(ctx: MagicContext, rest: list[str]) -> None:
    ctx.require()
    rows: list[list[Any]] = [
        [name, ot.txn.preset, status_of(ot, ctx.state),
         ", ".join(f"{t}@{v}" for t, v in ot.txn.marker_versions().items())]
        for name, ot in ctx.state.txns.items()]
    if not rows:
        print("no open transactions")
        return
    display(html_table(rows, ["name", "preset", "state", "markers"], "lv-status"))
