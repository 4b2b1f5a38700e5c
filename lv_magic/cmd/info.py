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
from widgets.model import versions_text

ENDED_SHOWN = 10  # ended transactions `%lv status` lists (the most recent)
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
            preds = ", ".join(f"{ctx.state.label(txn)} at {table}@{version}" for txn, table, version in m.predecessors)
            rows.append([m.table, m.version, ctx.state.label(m.txn), f"{left:.0f}s" if left > 0 else "expired",
                         preds or "-"])
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
    """Who waits for whom: this kernel's open transactions' edges and waits, and the edges other
    clients' markers name (what the inspector draws), each once."""
    lh = ctx.require()
    state = ctx.state
    edges: dict[tuple[str, str, str], None] = {}
    for ot in list(state.txns.values()):
        for e in ot.txn.out_edges():
            edges[(ot.txn.id, e.dst, e.label)] = None
        if ot.future is not None and not ot.future.done():
            waits = [e for e in ot.txn.events.history if e.kind in ("Waiting", "WaitEnded")]
            if waits and waits[-1].kind == "Waiting" and waits[-1].version >= 0:
                w = waits[-1]
                edges[(ot.txn.id, w.on_txn, f"{w.table}@{w.version}")] = None
    try:
        found = lh.scan_markers(now=time.time())
    except LvError as e:
        print(f"(other clients' markers could not be read: {e})")
        found = []
    for src, dst, table, version in marker_edges([m for tm in found for m in tm.markers]):
        edges.setdefault((src, dst, f"{table}@{version}"), None)
    rows = [[state.label(src), state.label(dst), at] for src, dst, at in edges]
    if not rows:
        print("no dependencies: no transaction waits for another")
        return
    display(html_table(rows, ["transaction", "waits behind", "at"], "lv-dag"))


def marker_edges(markers: list[Any]) -> list[tuple[str, str, str, int]]:
    """(waiter, waited-for, table, version) for each predecessor a live marker names that is still
    pending: the global DAG as the markers tell it (pure)."""
    pending = {(m.table, m.version): m.txn for m in markers}
    out: dict[tuple[str, str, str, int], None] = {}
    for m in markers:
        for dst, table, version in m.predecessors:
            if pending.get((table, version)) == dst and dst != m.txn:
                out[(m.txn, dst, table, version)] = None
    return list(out)


def status_of(ot: OpenTxn, state: KernelState) -> str:
    """An open transaction's state, with what a background commit waits for (by name)."""
    if ot.future is not None and not ot.future.done():
        waits = [e for e in ot.txn.events.history if e.kind == "Waiting"]
        if waits:
            return f"waiting for {state.label(waits[-1].on_txn)} at {waits[-1].table}@{waits[-1].version}"
        return "committing"
    return ot.txn.state


def status(ctx: MagicContext, rest: list[str]) -> None:
    """This kernel's transactions: the open ones first, then those that ended (committed, aborted or
    rolled back), each group as its own table."""
    ctx.require()
    open_rows: list[list[Any]] = []
    ended_rows: list[list[Any]] = []
    for name, ot in list(ctx.state.txns.items()):
        st = status_of(ot, ctx.state)
        if ot.txn.state in ("active", "committing") or (ot.future is not None and not ot.future.done()):
            open_rows.append([name, ot.txn.preset, st,
                              versions_text(ot.txn.marker_versions(), "-")])
        else:
            ended_rows.append([name, ot.txn.preset, ended_as(ot, ctx.state)])
    if not open_rows and not ended_rows:
        print("no transactions")
        return
    if open_rows:
        display(html_table(open_rows, ["open", "preset", "state", "markers"], "lv-status"))
    else:
        print("no open transactions")
    if ended_rows:
        shown = ended_rows[-ENDED_SHOWN:]
        display(html_table(shown, ["recently ended", "preset", "outcome"], "lv-status-ended"))
        if len(ended_rows) > len(shown):
            print(f"({len(ended_rows) - len(shown)} that ended earlier not shown)")


def ended_as(ot: OpenTxn, state: KernelState) -> str:
    """How an ended transaction ended, in words (its final event)."""
    for e in reversed(ot.txn.events.history):
        if e.kind == "Committed":
            return "committed: " + versions_text(e.versions, "read-only")
        if e.kind == "Aborted":
            return "rolled back" if e.rule in ("rollback", "error", "interrupt") else \
                f"aborted ({e.rule}): {state.names_in(e.reason.splitlines()[0] if e.reason else '')}"
    return str(ot.txn.state)
