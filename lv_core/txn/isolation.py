"""LV[I] inside a transaction: reads at global-log versions, validation R1-R3, atomic publication.

- Reads: the first table access reads the global version log's head once; every table is read at
  the version the log names (tables the log does not know yet: deduced from their own log). No
  marker is placed for reading; with LV[R]/LV[CT] a marker is claimed when a table is first written.
- Commit: marker tables first wait for their predecessors and redo what they invalidated (LV[R]);
  then, under the validation lock, rules R1-R3 are checked with the head read under the lock, and a
  compatible transaction records its plan in the lock, writes every table commit and publishes the
  next global version (roll forward by whoever takes the lock over if it crashes). Read-only
  transactions validate without the lock and write nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lv_core import events as ev
from lv_core.delta.actions import CommitInfo, decode_commit, encode_commit
from lv_core.errors import TransactionAborted
from lv_core.protocol.commitplan import build_plan
from lv_core.protocol.conflicts import PredecessorCommit, first_conflict
from lv_core.protocol.gvl import GvlState, read_versions
from lv_core.protocol.hidden import collect
from lv_core.protocol.parts import PartMissing, close_parts
from lv_core.protocol.markers import encode_freed, lakevilla_commit_info, overwrite, read_version
from lv_core.protocol.validation import TableAccess, ValidationOutcome, validate
from lv_core.testing import crashpoint

if TYPE_CHECKING:
    from lv_core.txn.transaction import Transaction


def head(txn: "Transaction") -> GvlState:
    """The global log head this transaction reads at (read once, at its first table access)."""
    if txn._gvl is None:
        txn._gvl = txn.lh._glog.head()
    return txn._gvl


def read_version_of(txn: "Transaction", table: str) -> int:
    """The version ``table`` is read at: the global log's, else the latest in its own log."""
    state = head(txn)
    hint = txn.lh._logs._latest.get(table)
    return read_versions(txn.store, state, [table], {table: hint} if hint is not None else None)[table]


def _accesses(txn: "Transaction", writes: dict[str, list]) -> list[TableAccess]:
    out = []
    for t, ts in txn._tables.items():
        read = any(t in rec.result.reads or t in rec.result.scans for rec in txn._ops)
        written = t in writes
        blind = written and not read and all(rec.op.blind for rec in txn._ops if t in rec.op.tables)
        if ts.marker_version is not None:
            out.append(TableAccess(t, read=read, written=written, marker=ts.marker_version, blind=blind))
        else:
            out.append(TableAccess(t, read=read, written=written, read_version=ts.read_version, blind=blind))
    return out


def _emit(txn: "Transaction", outcome: ValidationOutcome, gvl_version: int | None) -> None:
    data = outcome.to_json()
    txn.validation = data
    txn.events.emit(ev.Validated(txn.id, compatible=outcome.compatible, gvl_version=gvl_version,
                                 tables=data["tables"], failed_rule=outcome.rule))


def _check_foreign(txn: "Transaction", outcome: ValidationOutcome) -> None:
    """Written tables without a marker move past commits the global log does not know (plain Delta
    writers) or pending markers: refuse when those touch what the transaction read or rewrote."""
    for t, v in outcome.tables.items():
        if v.written and v.w is not None and any(p < v.w for p in v.pending) and (
                v.moved_from is not None or txn._tables[t].marker_version is None):
            # A write placed above a pending marker: when that marker commits, the global version
            # published now would gain content later. Refuse; the retry finds it resolved.
            first = min(p for p in v.pending if p < v.w)
            raise TransactionAborted(
                f"{t}@{first} is held by a running LakeVilla transaction whose changes are not known yet "
                f"(R2: the version this write needs, {v.moved_from if v.moved_from is not None else v.w}, was "
                "taken and the next free one lies above that transaction). Help: retry once it finished.", "R2",
                details={"table": t, "pending": list(v.pending)})
        if not v.written or txn._tables[t].marker_version is not None:
            continue
        if v.pending and not v.blind:
            raise TransactionAborted(
                f"{t}@{v.pending[0]} is held by a running LakeVilla transaction whose changes are not known "
                "yet (R2: the version this write needs is taken). Help: retry once it finished.", "R2",
                details={"table": t, "pending": list(v.pending)})
        preds = []
        for fv in v.foreign:
            st = read_version(txn.store, t, fv)
            preds.append(PredecessorCommit(t, fv, st.txn, decode_commit(st.raw, version=fv, table=t)))
        c = first_conflict(txn._footprints(), preds) if preds else None
        if c is not None:
            raise TransactionAborted(
                f"{t}@{c.version} was written by a writer that ignores the global log and {c.why} "
                f"(R3: lost update). Help: retry the transaction.", "R3",
                details={"table": t, "version": c.version})


def _whole(txn: "Transaction", state: GvlState, versions: dict[str, int]) -> dict[str, int]:
    """``versions`` plus what keeps every multi-table commit outside the log whole (see parts.py);
    tables whose parts cannot be included yet are dropped (a catch-up is best effort)."""
    versions = dict(versions)
    while versions:
        try:
            return {**versions, **close_parts(txn.store, state, versions, own_txn=txn.id)}
        except PartMissing as e:
            versions.pop(e.table, None)
    return versions


def _catch_up_versions(outcome: ValidationOutcome) -> dict[str, int]:
    """After an R1 failure caused by commits the global log does not know (writers without LV[I]:
    plain Delta, or LakeVilla presets without I), the versions to publish so a retry reads them.

    Only up to the last real commit below the first pending marker: a published version must never
    gain content later."""
    out: dict[str, int] = {}
    for t, v in outcome.tables.items():
        if v.rules["R1"].passed or not v.foreign or v.l is None:
            continue
        limit = min(v.pending) - 1 if v.pending else max(v.foreign)
        target = max((f for f in v.foreign if f <= limit), default=None)
        if target is not None and target > v.l:
            out[t] = target
    return out


def _catch_up(txn: "Transaction", outcome: ValidationOutcome, deadline: float) -> None:
    """Publish the foreign versions an R1 failure found (under the validation lock), best effort."""
    import time

    updates = _catch_up_versions(outcome)
    if not updates:
        return
    try:
        left = max(0.001, deadline - time.monotonic())
        with txn.lh._vlock.acquire(txn.id, timeout_s=left) as held:
            state = txn.lh._glog.head()
            fresh = _whole(txn, state, {t: v for t, v in updates.items()
                                        if state.table_version(t) is None or state.table_version(t) < v})
            held.commit([], state, additions=fresh) if fresh else held.release()
    except Exception:  # noqa: BLE001 - the abort below is what the caller needs; a retry catches up
        pass


def commit_isolated(txn: "Transaction", deadline: float) -> tuple[dict[str, int], dict[str, int], GvlState]:
    """Validate and commit under LV[I]; returns (versions written, markers freed, global state)."""
    import time

    if txn.markers and any(ts.marker_version is not None for ts in txn._tables.values()):
        txn._settle(deadline)  # LV[R]: predecessors resolved and redone, nothing published yet
    results = [rec.result for rec in txn._ops]
    writes = {t: a for t in txn._tables if (a := txn._net_actions(t, results))}
    accesses = _accesses(txn, writes)
    glog = txn.lh._glog
    if not writes:  # read-only: validate without the lock, write nothing
        policy = txn.policy
        if any(ts.marker_version is not None for ts in txn._tables.values()):
            # It wrote, but a redo left nothing to write: its reads may no longer be one snapshot,
            # so it is not a read-only transaction that write_serializable may let pass without R1.
            policy = dataclasses.replace(policy, r1_read_only=True)
        state = glog.head()
        outcome = validate(collect(txn.store, state, accesses, policy, own_txn=txn.id, parallel=1), policy)
        _emit(txn, outcome, None)
        if not outcome.compatible:
            _catch_up(txn, outcome, deadline)
            raise outcome.to_abort()
        return {}, {}, state

    def on_wait(rec: Any) -> None:
        txn.events.emit(ev.Waiting(txn.id, table="validation lock", version=-1, on_txn=getattr(rec, "txn", "?")))

    left = max(0.001, deadline - time.monotonic())
    with txn.lh._vlock.acquire(txn.id, timeout_s=left, on_wait=on_wait) as held:
        crashpoint("validation-key-held")
        state = glog.head()
        outcome = validate(collect(txn.store, state, accesses, txn.policy, own_txn=txn.id, parallel=1), txn.policy)
        if outcome.compatible:
            _check_foreign(txn, outcome)
        _emit(txn, outcome, None if not outcome.compatible else state.version + 1)
        if not outcome.compatible:
            updates = _whole(txn, state, _catch_up_versions(outcome))
            if updates:
                held.commit([], state, additions=updates)
            raise outcome.to_abort()
        commits = {}
        for t, actions in writes.items():
            ci = CommitInfo(lakevilla_commit_info(txn.id, "LAKEVILLA COMMIT", {
                "preset": txn.preset, "tables": sorted(writes), "redo": txn.redo_count, "gvl": state.version + 1}))
            commits[t] = encode_commit([*actions, ci])
        markers = {t: (ts.marker_version, ts.marker_etag) for t, ts in txn._tables.items()
                   if ts.marker_version is not None and ts.marker_etag is not None}
        plan = build_plan(outcome, commits, markers)
        additions = outcome.additions()
        try:
            names = outcome.write_versions()
            additions.update(close_parts(txn.store, state, {**names, **additions}, own_txn=txn.id,
                                         fixed=frozenset(names)))
        except PartMissing as e:
            raise TransactionAborted(
                f"{e} (R2: the global version this commit would publish must hold that multi-table commit "
                "whole). Help: retry once it finished.", "R2",
                details={"table": e.table, "version": e.version, "part": f"{e.sibling}@{e.sibling_version}"}) from None
        txn._decided = True
        result = held.commit(plan, state, additions=additions)
    freed: dict[str, int] = {}
    for t, ts in txn._tables.items():  # markers not overwritten by the plan (read-only, or a blind move)
        if ts.marker_version is None or result.versions.get(t) == ts.marker_version:
            continue
        try:
            overwrite(txn.store, t, ts.marker_version, ts.marker_etag or "", encode_freed(txn.id, "read-only"))
            freed[t] = ts.marker_version
            txn.events.emit(ev.MarkerFreed(txn.id, table=t, version=ts.marker_version, reason="read-only"))
        except Exception:  # noqa: BLE001 - freed by someone else, or expires by lease
            pass
    for t, v in result.versions.items():
        txn._mark_published(t, v, writes.get(t, []))
    return dict(result.versions), freed, result.gvl or state
