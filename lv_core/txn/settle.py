"""Commit stage 1, settling: wait until every marker before ours resolved, then redo what the
resolved commits invalidated (bounded), until the transaction's operations build on final state.

Hands a :class:`Settled` to the next stage (:mod:`lv_core.txn.publish`, or LV[I]'s validation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType

from lv_core import events as ev
from lv_core.delta.snapshot import Snapshot, apply_actions, replay
from lv_core.protocol.aborts import aborted
from lv_core.protocol.conflicts import Conflict, PredecessorCommit, first_conflict
from lv_core.txn.core import TxnCore
from lv_core.txn.execute import redo_from
from lv_core.txn.waiting import Restart, resolve_all

__all__ = ["Settled", "settle_group", "settle_markers"]


@dataclass(frozen=True)
class Settled:
    """Every predecessor of ``group`` resolved and nothing they committed invalidates our operations;
    ``redos``: redo rounds this group needed so far (bounded by the transaction's ``retries``)."""

    group: tuple[str, ...]
    redos: int


def rebase(base: Snapshot, preds: list[PredecessorCommit]) -> Snapshot:
    """Apply resolved predecessors: pending markers inside ``base`` (read as empty) are patched in,
    versions after ``base`` are replayed. File adds/removes of distinct commits commute."""
    inside = [p for p in preds if p.version <= base.version]
    after = [p for p in preds if p.version > base.version]
    if inside:
        files, tombstones = dict(base.files), dict(base.tombstones)
        metadata, protocol = base.metadata, base.protocol
        for p in inside:
            md, pr = apply_actions(p.actions, files, tombstones, metadata, protocol)
            assert md is not None and pr is not None  # given both, apply_actions only ever replaces them
            metadata, protocol = md, pr
        base = dataclasses.replace(base, files=MappingProxyType(files), tombstones=MappingProxyType(tombstones),
                                   metadata=metadata, protocol=protocol)
    if after:
        base = replay(base, [(p.version, p.actions) for p in sorted(after, key=lambda p: p.version)])
    return base


def _in_global_log(preds: list[PredecessorCommit], conflict: Conflict) -> bool:
    """Whether the commit behind ``conflict`` was validated into the global version log (LV[I])."""
    for p in preds:
        if p.table == conflict.table and p.version == conflict.version:
            return any("gvl" in lv for lv in p.lakevilla)
    return False


def _forget_stale_key(core: TxnCore, preds: list[PredecessorCommit]) -> None:
    """A predecessor validated into a global version newer than any this process knows: the free
    validation key it may have cached is not the current one any more (taking it warm would only fail:
    the commit reads the key instead)."""
    known = core.services.glog.known()
    if any(isinstance(lv.get("gvl"), int) and lv["gvl"] > known for p in preds for lv in p.lakevilla):
        core.services.vlock.remember_free(None)


def settle_group(core: TxnCore, group: list[str], deadline: float, redos: int = 0) -> Settled:
    """Resolve the predecessors of ``group`` and redo what they invalidated, until nothing does."""
    book = core.book
    while True:
        try:
            preds = resolve_all(core, group, deadline)
        except Restart:
            continue
        if core.iso:
            _forget_stale_key(core, preds)
        # Also after a decision: a marker lost and claimed again later (a writer that ignores markers
        # took its version) has new predecessors, and their changes must be redone into our commit.
        conflict = first_conflict(book.footprints(), preds)
        for t in group:
            ts = book.tables[t]
            ts.base = rebase(ts.base, [p for p in preds if p.table == t])
            ts.pending = {}
            for (x, tt) in [k for k in book.preds if k[1] == t]:
                del book.preds[(x, tt)]  # resolved: no longer an edge we wait on
        if conflict is None:
            return Settled(tuple(group), redos)
        core.events.emit(ev.ConflictFound(core.id, table=conflict.table, version=conflict.version,
                                          step=conflict.step, files=conflict.files))
        details = {"table": conflict.table, "version": conflict.version}
        if book.decision is not None and book.published:
            # Decided, and part of the commit is in the log: the rest can only be completed. Redo
            # until it builds on final state (bounded by the deadline, not by ``retries``).
            redo_from(core, conflict, must_complete=True)
            redos += 1
            continue
        if core.iso and not core.policy.check_r1 and _in_global_log(preds, conflict):
            # Snapshot isolation: the conflicting commit is ordered in the global log after our
            # snapshot; a redo would mix the snapshot with newer state (first committer wins).
            # (Commits outside the log have no such position: a redo onto them stays allowed.)
            raise aborted("si_first_committer", details, table=conflict.table, version=conflict.version,
                          on_txn=conflict.txn, step=conflict.step, why=conflict.why)
        if redos >= core.settings.retries:
            raise aborted("redo_exhausted", details, redos=book.redo_count, table=conflict.table,
                          version=conflict.version, on_txn=conflict.txn, step=conflict.step, why=conflict.why)
        redo_from(core, conflict)
        redos += 1  # the next round finds everything below the markers resolved


def settle_markers(core: TxnCore, deadline: float) -> Settled:
    """Settle every table the transaction holds a marker on (LV[I]: before validation, nothing published)."""
    group = [t for t, ts in core.book.tables.items() if ts.marker_version is not None]
    return settle_group(core, group, deadline)
