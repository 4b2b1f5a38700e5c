"""``%lv begin``, ``commit``, ``rollback``: named transactions driven by hand."""

from __future__ import annotations

from lv_core.errors import LvError
from lv_magic.args import begin_parser
from lv_magic.context import MagicContext
from lv_magic.display import txn_widget
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
    if note is not None:
        print(f"{rest[0]}: {ctx.state.names_in(note)}; the commit continues in the background (%lv status)")
        return
    res = fut.result()
    print(f"{rest[0]} committed: " + (", ".join(f"{t}@{v}" for t, v in res.versions.items()) or "read-only"))


def rollback(ctx: MagicContext, rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv rollback NAME")
    ot = ctx.state.get(rest[0])
    ot.txn.rollback("rolled back by %lv rollback", "rollback")
    print(f"{rest[0]} rolled back; nothing changed")
