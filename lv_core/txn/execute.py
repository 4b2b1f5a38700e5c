"""Module #2 for one transaction: running operations, recording them in the sublog, and redoing them.

An operation runs on the base snapshots plus the transaction's own changes (an
:class:`~lv_core.txn.context.OpContext`); its result is recorded (physical sublog while no other
transaction's marker precedes ours on its tables, logical for good once one does). A redo undoes
back to the first invalidated operation (deleting what it staged) and re-runs from there.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future
from typing import Any, Callable

import pyarrow as pa

from lv_core import events as ev
from lv_core.concurrency import Pool, may_wait, submit
from lv_core.delta.features import check_changes, check_writable
from lv_core.errors import LvError, TransactionError
from lv_core.protocol import clock
from lv_core.protocol.aborts import aborted
from lv_core.protocol.conflicts import Conflict
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.markers import VersionState, highest_claim
from lv_core.protocol.sublog import SublogEntry, write_entry
from lv_core.testing import crashpoint
from lv_core.txn import waiting
from lv_core.txn.access import (
    access,
    claim_write_marker,
    free_placed,
    place_write_marker,
    read_below,
    record_write_marker,
)
from lv_core.txn.context import OpContext
from lv_core.txn.core import TxnCore
from lv_core.txn.current import CaughtUp, catch_up, settle, speculate
from lv_core.txn.ops import Operation, OpResult
from lv_core.txn.precedence import give_way
from lv_core.txn.state import OpRecord, TableState

__all__ = ["execute", "redo_from", "run"]

log = logging.getLogger("lv_core.txn")


def context(core: TxnCore, step: int, attempt: int, on_write: Callable[[str], None] | None = None) -> OpContext:
    """The view an operation at ``step`` gets (base snapshots plus earlier steps' changes)."""
    book = core.book
    return OpContext(core.id, core.store, step, attempt, snapshots=lambda t: book.tables[t].base,
                     view=lambda t, upto: book.view_files(t, upto_step=upto),
                     changes=lambda t, upto: book.view_changes(t, upto_step=upto), on_write=on_write)


class EarlyMarkers:
    """Markers claimed while the operation that first writes their tables still runs (issue 38).

    A transaction that claims its markers at the first write (LV[I], LV[R] alone) used to place a
    table's marker after the operation wrote its data files: one round trip after the other. The
    placement only needs the table's read version, which is fixed before the operation runs, so it
    starts when the operation names its first new file in the table (:class:`OpContext` ``on_write``)
    and runs beside the data writes; the marker is recorded where it was before (after
    :func:`give_way`), or given up when the operation wrote nothing there after all or failed.
    Placed earlier, the marker carries the footprint of the operations before this one only; so under a
    policy whose markers carry footprints (LV[I] with file-level R1) it is used only while no operation
    of the transaction (this one included) is exposed: such a footprint has no reads and so never makes
    another transaction give way (:mod:`lv_core.txn.precedence`), the outcome the full footprint gives.

    Under contention (this process lost a claim on the table lately) the marker objects are listed when the
    operation starts, so that the claim is tried just above the highest one, which is a round trip fresher
    than what this process knew (issue 38: eight writers of one table lost about 1.5 races per claim, one
    round trip each). The listing is a lower bound of the claims made (claims only grow, and are contiguous),
    so the claim is placed as after a lost try.

    An operation run again on a newer head (its look found the table moved, :func:`_run_beside`) keeps
    the marker placed beside its first run when the marker lies above the newer version read and above
    the version right after the stale one. Any version above the version read can hold the commit (the
    versions between become predecessors, as for a marker placed past pending ones); the version right
    after the stale one is the only one the placement did not check in the log (the look was to), so a
    marker there is given up as before. Giving up a usable marker cost a Delta log version (an empty
    commit, written in the chain of commits above it) and a claim (issue 38: 6 in 62 versions of
    YCSB A with 8 serializable clients).
    """

    def __init__(self, core: TxnCore, op: Operation) -> None:
        self.core, self.op = core, op
        self.placing: dict[str, tuple[TableState, Future[tuple[int, str]]]] = {}
        self.above: dict[str, Future[int]] = {}  # the highest claim on a contended table, being listed
        self.below: dict[str, Future[dict[int, VersionState]]] = {}  # the versions under it, read beside the claim
        logs, within = core.services.logs, core.settings.tuning.contended_s
        for t in () if op.reads_only else op.tables:
            if not logs.claims_contended(t, within):  # (the usual case: nothing to look up)
                continue
            ts, known = core.book.tables.get(t), logs.known_reserved(t)
            if (ts is None or ts.marker_version is None) and known is not None:
                self.above[t] = submit(Pool.REQUESTS, highest_claim, core.store, t, known)

    @staticmethod
    def usable(core: TxnCore, op: Operation) -> bool:
        footprints = core.iso and core.policy.r1_files  # else markers carry no footprint at all
        exposed = op.exposed or any(rec.op.exposed for rec in core.book.ops)
        return core.claims_at_write and not (footprints and exposed)

    def __call__(self, table: str) -> None:
        ts = self.core.book.tables.get(table)
        if table in self.placing or table not in self.op.tables or ts is None or ts.marker_version is not None:
            return
        above = self.above.get(table)
        self.placing[table] = (ts, submit(Pool.TASKS, place_write_marker, self.core, ts, above))
        if above is not None:
            self.below[table] = submit(Pool.TASKS, read_below, self.core, ts, above)

    def finish(self, written: set[str]) -> set[str]:
        """Record the markers of ``written`` tables, give up the others (raises a failed placement's
        error after giving up every marker placed); returns the tables whose marker was recorded."""
        placed: dict[str, tuple[TableState, int, str]] = {}
        error: BaseException | None = None
        for t, (ts, fut) in self.placing.items():
            try:
                v, etag = fut.result()
            except BaseException as e:  # raised below, after the others are settled
                error = error or e
                continue
            placed[t] = (ts, v, etag)
        self.placing = {}
        recorded: set[str] = set()
        for t, (ts, v, etag) in placed.items():
            now = self.core.book.tables.get(t)
            if error is None and t in written and now is not None and now.marker_version is None and (
                    now is ts or v > max(now.base.version, ts.base.version + 1)):
                try:
                    record_write_marker(self.core, now, v, etag, self.below.get(t))
                    recorded.add(t)
                except BaseException as e:  # (the markers after it are given up, not left to their lease)
                    error = e
            else:
                free_placed(self.core, t, v, etag)
        if error is not None:
            raise error
        return recorded


def run(core: TxnCore, op: Operation, step: int, attempt: int,
        on_write: Callable[[str], None] | None = None) -> OpResult:
    """Run ``op`` once; an error deletes whatever it staged."""
    ctx = context(core, step, attempt, on_write)
    try:
        result = op.run(ctx)
        for t in set(result.adds) | set(result.removes):
            if t not in op.tables:
                raise TransactionError(f"operation {op.name} changed table {t!r} it did not declare")
            if result.adds.get(t) or result.removes.get(t):
                base = core.book.tables[t].base
                check_writable(base.protocol, base.metadata, table=t)
                check_changes(base.protocol, base.metadata, adds=result.adds.get(t, ()),
                              removes=result.removes.get(t, ()), rows_checked=t in ctx.rows_checked, table=t,
                              identity_kept=t in ctx.identity_kept, cdc=result.cdc.get(t, ()))
    except BaseException:
        _delete_staged(core, op.tables, ctx)
        raise
    return result


def _delete_staged(core: TxnCore, tables: tuple[str, ...], ctx: OpContext) -> None:
    prefix = f"part-{core.id}-{ctx.step:04d}-{ctx.attempt}-"
    for t in tables:
        for meta in list(core.store.list(f"{t}/")):
            if prefix in meta.key:
                core.store.delete(meta.key)


def _delete_unrecorded(core: TxnCore, result: OpResult) -> None:
    """Delete the files an execution staged that the transaction has not recorded (it gave up on them)."""
    for t, paths in result.staged().items():
        for path in paths:
            core.store.delete(f"{t}/{path}")


def execute(core: TxnCore, op: Operation) -> Any:
    """Run ``op`` inside a transaction with markers or LV[I]; returns its value."""
    book = core.book
    step = len(book.ops)
    early = EarlyMarkers(core, op) if EarlyMarkers.usable(core, op) else None
    caught: list[CaughtUp] = []  # a write statement's table read past its global version (current.catch_up)
    try:
        result = _first_run(core, op, early, caught)
    except BaseException:
        if early is not None:
            with contextlib.suppress(LvError):
                early.finish(set())
        for c in caught:
            c.undo(core)
        raise
    claimed: set[str] = set()  # tables whose marker this operation claimed (beside it, or below)
    try:
        give_way(core, op, result, step)
        if early is not None:
            claimed = early.finish({t for t in op.tables if result.adds.get(t) or result.removes.get(t)})
    except BaseException:
        if early is not None:
            with contextlib.suppress(LvError):
                early.finish(set())
        _delete_unrecorded(core, result)
        for c in caught:
            c.undo(core)
        raise
    claim = [t for t in op.tables if core.claims_at_write and book.tables[t].marker_version is None
             and (result.adds.get(t) or result.removes.get(t))]
    if claim:
        try:
            book.claiming = (op, result)
            try:
                for t in claim:
                    claim_write_marker(core, book.tables[t])
            finally:
                book.claiming = None
        except BaseException:
            _delete_unrecorded(core, result)
            for c in caught:
                c.undo(core)
            raise
    logical = any(book.tables[t].logical for t in op.tables)
    mode = "logical" if logical and not op.blind else "physical"
    rec = OpRecord(op, step, result, mode, 0)
    book.ops.append(rec)
    waiting.expose_for_commit(core)
    for t in op.tables:
        if book.tables[t].first_step is None:
            book.tables[t].first_step = step
    # A physical operation whose staged files all lie in tables we hold markers on needs no sublog
    # entry: until the commit those markers protect the files (recovery and VACUUM keep the files of
    # a transaction with a pending marker), after a crash their names identify them (`lv recover`),
    # and a redo runs from the records in memory. Nor does one that claimed those markers itself (a
    # first write under LV[R] alone or LV[I]), logical or not. Logical operations run behind another
    # transaction's marker placed before them still write theirs.
    staged_in = {t for t, v in result.staged().items() if v}
    covered = all(book.tables[t].marker_version is not None for t in staged_in) and (
        mode == "physical" or staged_in <= claimed | set(claim))
    if any(book.tables[t].marker_version is not None for t in op.tables) and not covered:
        write_sublog(core, rec)  # module #2 serves marker tables (LV[I] reads need none)
    crashpoint("data-staged")
    core.events.emit(ev.OperationDone(
        core.id, step=step, op=op.name, table=",".join(op.tables), sublog=mode,
        added=sum(len(v) for v in result.adds.values()),
        removed=sum(len(v) for v in result.removes.values())))
    return result.value


def _first_run(core: TxnCore, op: Operation, early: EarlyMarkers | None, caught: list[CaughtUp]) -> OpResult:
    """Access the operation's tables and run it: beside the look of :func:`speculate` when that applies;
    a write statement past the commits made outside the global log (:func:`catch_up`, noted in
    ``caught``) when it then writes the table, else where the table was read before."""
    step = len(core.book.ops)
    look = speculate(core, op)
    if look is not None:
        result = _run_beside(core, op, look, early, caught)
    else:
        for t in op.tables:
            access(core, t)
        caught.extend(c for c in [catch_up(core, op)] if c is not None)
        result = run(core, op, step, 0, early)
    if caught and not (result.adds.get(caught[0].table) or result.removes.get(caught[0].table)):
        # It wrote nothing there, so no marker will hold the table: run it where it was read before
        # (at the version its head names), as without the catch-up.
        _delete_unrecorded(core, result)
        if early is not None:
            early.finish(set())
        caught.pop().undo(core)
        result = run(core, op, step, 0, early)
    return result


def _run_beside(core: TxnCore, op: Operation, look: Future[GvlState | None], early: EarlyMarkers | None,
                caught: list[CaughtUp]) -> OpResult:
    """Run the transaction's first operation (one table) while :func:`lv_core.txn.current.speculate`'s
    look at the table's log is under way: kept when the look confirms the version it ran on (what it
    would have run on after the look), else what it staged is deleted and it runs again on the newest
    head (issue 38: a read or update without the round trip of the look), a write statement past the
    commits made outside the global log (:func:`lv_core.txn.current.catch_up`, noted in ``caught``)."""
    step = len(core.book.ops)
    try:
        access(core, op.tables[0])
        result = run(core, op, step, 0, early)
    except BaseException:
        with contextlib.suppress(LvError):
            settle(core, op, look)
        raise
    try:
        stands = settle(core, op, look)
    except BaseException:
        core.book.tables.pop(op.tables[0], None)
        core.book.head = None
        _delete_unrecorded(core, result)
        raise
    if stands:
        return result
    _delete_unrecorded(core, result)  # (a marker placed beside it is kept for the next run: EarlyMarkers.finish)
    access(core, op.tables[0])
    caught.extend(c for c in [catch_up(core, op)] if c is not None)
    return run(core, op, step, 0, early)


def write_sublog(core: TxnCore, rec: OpRecord) -> None:
    """Record one operation in the transaction's sublog: the files it staged (data and change data
    files), which a recoverer deletes if the transaction dies. An operation that staged nothing
    writes no entry (the owner redoes from memory; nobody else needs its reads)."""
    r = rec.result
    staged = {t: tuple(v) for t, v in r.staged().items() if v}
    if not staged:
        return
    entry = SublogEntry(
        step=rec.step, op=rec.op.name, mode=rec.mode, tables=rec.op.tables,
        reads={t: tuple(sorted(v)) for t, v in r.reads.items()},
        adds=staged,
        removes={t: tuple(x.path for x in v) for t, v in r.removes.items()},
        logical=rec.op.logical if rec.mode == "logical" else None,
        blind=rec.op.blind, exposed=rec.op.exposed, attempt=rec.attempt,
        lease_expires=max(core.book.lease_expires, clock.wall() + core.settings.lease_s))
    write_entry(core.store, core.id, entry)
    core.book.sublog_steps.add(rec.step)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, pa.Table) and isinstance(b, pa.Table):
        return a.schema.equals(b.schema) and a.sort_by([(n, "ascending") for n in a.column_names]).equals(
            b.sort_by([(n, "ascending") for n in b.column_names]))
    try:
        return bool(a == b)
    except Exception:
        return False


def redo_from(core: TxnCore, conflict: Conflict, *, must_complete: bool = False) -> None:
    """Undo back to the operation ``conflict`` invalidated and redo from there on the new state.

    An operation that changed a table whose commit is already published (LV[R] alone commits table
    by table; a decided LV[CT] commit may be half published) is kept as it was: its result is in the
    log. ``must_complete``: the transaction cannot abort any more (part of its decided commit is
    published); a changed exposed result is then logged instead of aborting.

    Raises:
        TransactionAborted: ``exposed_read``: a redone result the caller already saw changed.
    """
    book = core.book
    step = conflict.step
    undone = book.ops[step:]

    def published(rec: OpRecord) -> bool:
        return any(t in book.published for t in (*rec.result.adds, *rec.result.removes))

    old_values = {rec.step: rec.result.value for rec in undone if rec.op.exposed}
    # undo: delete the files the undone operations staged, beside the redo (issue 38: a hot key's redo
    # is on its table's commit chain); a redo names its files by attempt, so none is the same file.
    doomed = [f"{t}/{path}" for rec in reversed(undone) if not published(rec)
              for t, paths in rec.result.staged().items() for path in paths]
    deletes = [submit(Pool.REQUESTS, core.store.delete, key) for key in doomed] if may_wait(Pool.REQUESTS) else []
    if not deletes:
        for key in doomed:
            core.store.delete(key)
    book.ops = book.ops[:step]
    book.redo_count += 1
    core.events.emit(ev.Redo(core.id, from_step=step, attempt=book.redo_count))
    try:
        _redo(core, undone, published, old_values, conflict, must_complete)
    except BaseException:
        for f in deletes:
            with contextlib.suppress(Exception):
                f.result()  # (the redo's error is the one reported)
        raise
    for f in deletes:
        f.result()  # (every undone file is gone when the redo returns, as before)


def _redo(core: TxnCore, undone: list[OpRecord], published: Callable[[OpRecord], bool],
          old_values: dict[int, Any], conflict: Conflict, must_complete: bool) -> None:
    """The redo half of :func:`redo_from`: the undone operations, oldest to newest, on the new state."""
    book = core.book
    for rec in undone:  # redo: oldest to newest on the new state
        if published(rec):
            book.ops.append(rec)
            continue
        result = run(core, rec.op, rec.step, book.redo_count)
        new = OpRecord(rec.op, rec.step, result, "logical" if not rec.op.blind else rec.mode, book.redo_count)
        book.ops.append(new)
        # A redo writes an entry where the first run did (kept current), or where a table it staged files
        # in has no marker of ours; else none, for the first run's reason (execute): our pending markers
        # protect the files, their names identify them after a crash, and the redo runs from memory.
        staged_in = {t for t, v in result.staged().items() if v}
        if rec.step in book.sublog_steps or not all(book.tables[t].marker_version is not None for t in staged_in):
            write_sublog(core, new)
        if rec.step in old_values and not _same_value(old_values[rec.step], result.value):
            if must_complete:
                log.warning("transaction %s: a result it returned (step %d) changed in a redo after part of "
                            "its decided commit was published (%s@%s, by %s); completing it", core.id, rec.step,
                            conflict.table, conflict.version, conflict.txn)
                continue
            raise aborted("exposed_read", {"table": conflict.table, "version": conflict.version, "step": rec.step},
                          step=rec.step, op=rec.op.name, tables=",".join(rec.op.tables), on_txn=conflict.txn,
                          table=conflict.table, version=conflict.version)
