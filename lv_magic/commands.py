"""The ``%lv`` subcommands (thin: parse, call lv_core, render)."""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from IPython.display import HTML, display

from lv_core.errors import LvError
from lv_magic.args import begin_parser, connect_parser, help_text, recover_parser, split_line
from lv_magic.state import commit_in_background

if TYPE_CHECKING:
    from lv_magic.magics import LvMagics


def _table(rows: list[list[Any]], header: list[str], cls: str) -> HTML:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return HTML(f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def run(m: "LvMagics", line: str) -> Any:
    cmd, rest = split_line(line)
    return globals()[f"cmd_{cmd}"](m, rest)


def cmd_help(m: "LvMagics", rest: list[str]) -> None:
    print(help_text())


def cmd_connect(m: "LvMagics", rest: list[str]) -> None:
    import lv_core

    ns = connect_parser().parse_args(rest)
    opts = {k: v for k, v in (("endpoint_url", ns.endpoint), ("region", ns.region), ("profile", ns.profile)) if v}
    lh = lv_core.connect(ns.warehouse, spark=ns.spark, storage_options=opts or None)
    m.state.shutdown()
    m.state.txns.clear()
    m.state.lh = lh
    if m.shell is not None:
        m.shell.user_ns["lh"] = lh
    print(f"connected to {lh.url} as `lh` (Spark starts on first data access)")


def cmd_tables(m: "LvMagics", rest: list[str]) -> None:
    lh = m.state.require()
    display(_table([[t, lh.version(t)] for t in lh.list_tables()], ["table", "version"], "lv-tables"))


def _markers(lh: Any, tables: list[str]) -> list[list[Any]]:
    from lv_core.delta.log import DeltaLog
    from lv_core.delta.table import validate_table_name
    from lv_core.protocol.lease import read_lease
    from lv_core.protocol.markers import read_version

    rows = []
    now = time.time()
    for t in tables:
        validate_table_name(t)
        snap = DeltaLog(lh.store, t).snapshot(method="probe", check=False)
        first = snap.checkpoint_version + 1 if snap.checkpoint_version is not None else 0
        for v in range(first, snap.version + 1):
            ci = snap.commit_infos.get(v)
            lv = ci.get("lakevilla") if ci is not None else None
            if isinstance(lv, dict) and lv.get("kind") == "marker":
                st = read_version(lh.store, t, v)
                if not st.pending:
                    continue
                lease = read_lease(lh.store, st.txn or "")
                left = (lease["expires"] - now) if lease else (st.marker.lease_expires - now if st.marker else 0)
                preds = ", ".join(f"{p.get('txn')}@{p.get('table')}@{p.get('version')}"
                                  for p in (st.marker.predecessors if st.marker else ()))
                rows.append([t, v, st.txn, f"{left:.0f}s" if left > 0 else "expired", preds or "-"])
    return rows


def cmd_markers(m: "LvMagics", rest: list[str]) -> None:
    lh = m.state.require()
    tables = rest or lh.list_tables()
    rows = _markers(lh, tables)
    if not rows:
        print("no live markers")
        return
    display(_table(rows, ["table", "version", "transaction", "lease left", "waits behind"], "lv-markers"))


def cmd_log(m: "LvMagics", rest: list[str]) -> None:
    from lv_core.delta.actions import AddFile, RemoveFile, decode_commit
    from lv_core.protocol.markers import read_version

    lh = m.state.require()
    if len(rest) != 1:
        raise LvError("usage: %lv log TABLE")
    t = rest[0]
    latest = lh.version(t)
    rows = []
    for v in range(max(0, latest - 49), latest + 1):
        st = read_version(lh.store, t, v)
        acts = decode_commit(st.raw) if st.kind == "commit" else []
        adds = sum(isinstance(a, AddFile) for a in acts)
        removes = sum(isinstance(a, RemoveFile) for a in acts)
        kind = {"marker": "MARKER (pending)", "freed": "freed marker (empty)"}.get(st.kind, "commit")
        rows.append([v, kind, st.txn or "-", adds, removes])
    display(_table(rows, ["version", "kind", "transaction", "adds", "removes"], "lv-log"))


def cmd_dag(m: "LvMagics", rest: list[str]) -> None:
    m.state.require()
    rows = []
    for name, ot in m.state.txns.items():
        for e in ot.txn.out_edges():
            rows.append([name, e.dst, e.label])
    if not rows:
        print("no dependencies between open transactions")
        return
    display(_table(rows, ["transaction", "waits behind", "at"], "lv-dag"))


def _status_of(ot: Any) -> str:
    if ot.future is not None and not ot.future.done():
        waits = [e for e in ot.txn.events.history if e.kind == "Waiting"]
        return f"waiting for {waits[-1].on_txn} at {waits[-1].table}@{waits[-1].version}" if waits else "committing"
    return ot.txn.state


def cmd_status(m: "LvMagics", rest: list[str]) -> None:
    m.state.require()
    rows = [[name, ot.txn.preset, _status_of(ot), ", ".join(f"{t}@{v}" for t, v in ot.txn.marker_versions().items())]
            for name, ot in m.state.txns.items()]
    if not rows:
        print("no open transactions")
        return
    display(_table(rows, ["name", "preset", "state", "markers"], "lv-status"))


def cmd_begin(m: "LvMagics", rest: list[str]) -> None:
    lh = m.state.require()
    ns = begin_parser().parse_args(rest)
    txn = lh.begin(ns.preset or m.default_preset, features=ns.features, slack=ns.slack,
                   timeout_s=ns.timeout or 60.0, name=ns.name)
    ot = m.state.add(ns.name, txn)
    ot.widget = m._widget(txn, ns.quiet)
    if ot.widget is None:
        print(f"began {ns.name} ({txn.preset})")


def cmd_commit(m: "LvMagics", rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv commit NAME")
    ot = m.state.get(rest[0])
    fut, note = commit_in_background(ot.txn, m.commit_wait_s)
    ot.future = fut
    if note is not None:
        print(f"{rest[0]}: {note}; the commit continues in the background (%lv status)")
        return
    res = fut.result()
    print(f"{rest[0]} committed: " + (", ".join(f"{t}@{v}" for t, v in res.versions.items()) or "read-only"))


def cmd_rollback(m: "LvMagics", rest: list[str]) -> None:
    if len(rest) != 1:
        raise LvError("usage: %lv rollback NAME")
    ot = m.state.get(rest[0])
    ot.txn.rollback()
    print(f"{rest[0]} rolled back")


def cmd_recover(m: "LvMagics", rest: list[str]) -> None:
    from lv_core.protocol.recovery import recover

    lh = m.state.require()
    ns = recover_parser().parse_args(rest)
    grace = lh.lease_s if ns.grace is None else ns.grace
    print(recover(lh.store, lease_grace_s=grace).summary())


def cmd_inspect(m: "LvMagics", rest: list[str]) -> None:
    lh = m.state.require()
    try:
        from widgets import inspect_lakehouse
    except ImportError:
        raise LvError("the inspector widget is not available in this installation") from None
    display(inspect_lakehouse(lh))
