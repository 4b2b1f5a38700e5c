"""Preset ``delta`` (no LakeVilla features): every operation commits alone at the next free version,
with plain Delta optimistic concurrency (the baseline the anomaly tests compare against)."""

from __future__ import annotations

import contextlib
from typing import Any

from lv_core.delta.actions import AddCDCFile, CommitInfo, decode_commit
from lv_core.delta.features import check_readable
from lv_core.delta.table import validate_table_name
from lv_core.errors import AlreadyExists
from lv_core.protocol import layout
from lv_core.protocol.aborts import aborted
from lv_core.protocol.conflicts import PredecessorCommit, first_conflict
from lv_core.protocol.ict import commit_info_first, seal
from lv_core.protocol.markers import lakevilla_commit_info, read_version
from lv_core.storage.base import CREATE
from lv_core.txn.core import TxnCore
from lv_core.txn.execute import run
from lv_core.txn.ops import Operation
from lv_core.txn.state import Bookkeeping, OpRecord, TableState, net_actions

__all__ = ["execute_autocommit"]


def execute_autocommit(core: TxnCore, op: Operation) -> Any:
    """Run ``op`` and commit its changes to each table at once (put-if-absent; a concurrent commit
    it conflicts with aborts the statement, one it does not conflict with is skipped over)."""
    book = core.book
    logs = core.services.logs
    for t in op.tables:
        validate_table_name(t)
    views = {t: logs.resolved_view(t, logs.latest_hint(t, core.store), core.store) for t in op.tables}
    book.tables = {t: TableState(t, snap) for t, (snap, _pending) in views.items()}
    for t, ts in book.tables.items():
        check_readable(ts.base.protocol, ts.base.metadata, table=t)
    book.ops = []
    step = book.statements
    book.statements += 1
    result = run(core, op, step, 0)
    footprint = Bookkeeping(ops=[OpRecord(op, step, result, "physical", 0)]).footprints()
    for t in op.tables:
        actions = net_actions(t, [result])
        if not actions:
            continue
        v = book.tables[t].base.version + 1
        info = lakevilla_commit_info(core.id, op.name.upper())
        committed = [*actions, CommitInfo(info)]
        data = commit_info_first(actions, info, core.ict(t))
        while True:
            try:
                core.store.put(layout.commit_key(t, v), seal(core.store, t, v, data), mode=CREATE)
                break
            except AlreadyExists:
                st = read_version(core.store, t, v)
                c = first_conflict(footprint, [PredecessorCommit(t, v, st.txn, decode_commit(st.raw))])
                if c is not None:
                    for path in result.staged().get(t, ()):
                        core.store.delete(f"{t}/{path}")
                    raise aborted("delta_conflict", {"table": t, "version": v}, op=op.name, table=t, version=v,
                                  why=c.why) from None
                v += 1
        logs.note_latest(t, v)
        book.autocommitted[t] = v
        if not views[t][1]:  # no pending marker below: cache the new snapshot, checkpoint when due
            with contextlib.suppress(Exception):  # a cache and a checkpoint: the commit stands regardless
                core.services.after_commit(t, v, book.tables[t].base, committed)
        kept = {a.path for a in actions if isinstance(a, AddCDCFile)}
        for x in result.cdc.get(t, ()):  # an INSERT's change files, implied by its adds: not committed
            if x.path not in kept:
                core.store.delete(f"{t}/{x.path}")
    return result.value
