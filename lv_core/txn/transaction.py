"""The Transaction object: markers (#1), sublogs with undo/redo (#2), commit, rollback.

Life of a transaction with LV[R] (see docs/PROTOCOL.md for the crash analysis):
1. begin: a heartbeat object (lease) is written; one background thread renews it.
2. first access of a table: put-if-absent a marker at the next free version m; the snapshot at m-1
   (pending markers of others read as empty) is the base its operations build on. Preceding pending
   markers switch the table to logical sublogs for good.
3. each operation runs on the base plus the transaction's own changes and is recorded in its sublog.
4. commit: wait for preceding markers to resolve (freeing expired ones), read what they committed,
   find the first operation they invalidate, undo back to it and redo from there on the new state
   (bounded), then overwrite each marker (if-match) with the real actions; read-only markers are freed.
With no features (preset ``delta``) every operation commits on its own at the next free version, as a
plain Delta writer does: the baseline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pyarrow as pa

from lv_core import events as ev
from lv_core.delta.actions import Action, AddFile, CommitInfo, RemoveFile, decode_commit, encode_commit
from lv_core.delta.features import check_readable, check_writable
from lv_core.delta.log import DeltaLog
from lv_core.delta.table import validate_table_name
from lv_core.delta.snapshot import Snapshot, apply_actions, replay
from lv_core.errors import (AlreadyExists, LvError, NotFound, PreconditionFailed, TransactionAborted,
                            TransactionError)
from lv_core.protocol import layout
from lv_core.protocol.conflicts import Conflict, OpFootprint, PredecessorCommit, first_conflict
from lv_core.protocol.lease import keeper, lease_expired, write_lease
from lv_core.protocol.dag import DagView, Edge, closes_cycle, edges_from_json, shift_tables
from lv_core.protocol.markers import (KEY, MarkerInfo, encode_freed, encode_marker, lakevilla_commit_info, overwrite,
                                      VersionState, place_marker, read_version, unfinished_part)
from lv_core.protocol.recovery import resolve_expired
from lv_core.protocol.sublog import SublogEntry, write_entry
from lv_core.storage.base import CREATE, OVERWRITE
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.testing import crashpoint
from lv_core.protocol.validation import Policy
from lv_core.txn import isolation
from lv_core.txn.context import OpContext, TableState
from lv_core.txn.ops import Operation, OpResult
from lv_core.txn.result import CommitResult

if TYPE_CHECKING:
    from lv_core.lakehouse import Lakehouse


_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lv-table")
_log = logging.getLogger("lv_core.txn")


class _Restart(Exception):
    """Internal: markers moved while waiting (a shift): recompute what to wait for."""


@dataclass
class _OpRecord:
    op: Operation
    step: int
    result: OpResult
    mode: str
    attempt: int


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, pa.Table) and isinstance(b, pa.Table):
        return a.schema.equals(b.schema) and a.sort_by([(n, "ascending") for n in a.column_names]).equals(
            b.sort_by([(n, "ascending") for n in b.column_names]))
    try:
        return bool(a == b)
    except Exception:
        return False


def _in_global_log(preds: list[PredecessorCommit], conflict: Conflict) -> bool:
    """Whether the commit behind ``conflict`` was validated into the global version log (LV[I])."""
    for p in preds:
        if p.table == conflict.table and p.version == conflict.version:
            return any(isinstance(a, CommitInfo) and isinstance(a.payload.get(KEY), dict)
                       and "gvl" in a.payload[KEY] for a in p.actions)
    return False


def _rebase(base: Snapshot, preds: list[PredecessorCommit]) -> Snapshot:
    """Apply resolved predecessors: pending markers inside ``base`` (read as empty) are patched in,
    versions after ``base`` are replayed. File adds/removes of distinct commits commute."""
    inside = [p for p in preds if p.version <= base.version]
    after = [p for p in preds if p.version > base.version]
    if inside:
        files, tombstones = dict(base.files), dict(base.tombstones)
        metadata, protocol = base.metadata, base.protocol
        for p in inside:
            metadata, protocol = apply_actions(p.actions, files, tombstones, metadata, protocol)
        base = dataclasses.replace(base, files=MappingProxyType(files), tombstones=MappingProxyType(tombstones),
                                   metadata=metadata, protocol=protocol)
    if after:
        base = replay(base, [(p.version, p.actions) for p in sorted(after, key=lambda p: p.version)])
    return base


class Transaction:
    """One multi-statement transaction over one or more tables (see ARCHITECTURE.md)."""

    def __init__(self, lh: "Lakehouse", *, preset: str, features: frozenset[str], slack: int,
                 timeout_s: float, name: str | None, retries: int, lease_s: float) -> None:
        self.lh = lh
        # A per-transaction counting view of the store: the widget and CommitResult report how many
        # object-store requests of each kind this transaction made (whatever thread made them).
        self.store = InstrumentedStore(lh.store)
        self.id = layout.new_txn_id()
        self.name = name
        self.preset = preset
        self.features = features
        self.slack = slack
        self.timeout_s = timeout_s
        self.retries = retries
        self.lease_s = lease_s
        self.events = ev.EventStream()
        self.state = "active"
        self.redo_count = 0
        self.waits = 0
        self._t0 = time.monotonic()
        self._lock = threading.RLock()
        self._tables: dict[str, TableState] = {}
        self._ops: list[_OpRecord] = []
        self._sublog_steps: set[int] = set()
        self._autocommitted: dict[str, int] = {}
        self._decided = False
        self._published: dict[str, int] = {}
        self._freed: dict[str, int] = {}
        self._published_paths: dict[str, set[str]] = {}
        self._attempted: set[str] = set()  # tables whose commit write was sent (its outcome may be unknown)
        self._decision_at: dict[str, int | None] = {}  # table -> version the written decision names
        self._decision_tried = False
        self._lease_expires = 0.0
        self._created = time.time()
        self.markers = bool({"R", "CT"} & features)
        self.ct = "CT" in features
        self._preds: dict[tuple[str, str], int] = {}  # (txn, table) -> its marker version we wait behind
        self._cycles: list[list[Edge]] = []
        self._shifts: list[dict[str, Any]] = []
        self.max_shifts = 8
        self._shift_lock = threading.Lock()  # one shift at a time when tables are waited on in parallel
        self.iso = "I" in features
        self.policy = Policy.for_preset(preset, slack)
        self._gvl: Any = None
        self.gvl_version: int | None = None
        self.validation: dict[str, Any] = {}
        self.events.emit(ev.Began(self.id, preset=preset, features=tuple(sorted(features)), name=name))

    # ------------------------------------------------------------------ helpers
    def __repr__(self) -> str:
        return f"<Transaction {self.name or self.id} {self.preset} {self.state}>"

    def _check_active(self) -> None:
        if self.state != "active":
            raise TransactionError(f"transaction {self.name or self.id} is {self.state}; begin a new one")

    def _table(self, name: str) -> TableState:
        return self._tables[name]

    def _view_files(self, table: str, upto_step: int | None = None) -> Mapping[str, AddFile]:
        files = dict(self._tables[table].base.files)
        for rec in self._ops:
            if upto_step is not None and rec.step >= upto_step:
                break
            for r in rec.result.removes.get(table, ()):
                files.pop(r.path, None)
            for a in rec.result.adds.get(table, ()):
                files[a.path] = a
        return files

    def requests(self) -> dict[str, int]:
        """Object-store requests this transaction made so far, by kind (GET, PUT, PUT-create, ...)."""
        return {k: v for k, v in self.store.counts().items() if v}

    def tables(self) -> list[str]:
        return list(self._tables)

    def marker_versions(self) -> dict[str, int]:
        return {t: s.marker_version for t, s in self._tables.items() if s.marker_version is not None}

    # ------------------------------------------------------------------ table access (module #1)
    def _access(self, name: str) -> TableState:
        ts = self._tables.get(name)
        if ts is not None:
            return ts
        logs = self.lh._logs
        validate_table_name(name)
        if self.iso:
            r = isolation.read_version_of(self, name)
            # Pending markers at or below r (possible only for a table the global log does not know
            # yet) read as empty; they are predecessors a marker on this table must wait for.
            base, pending = logs.resolved_view(name, r, self.store)
            check_readable(base.protocol, base.metadata, table=name)
            ts = TableState(name, base, read_version=r, pending={v: x for v, x in pending.items() if x != self.id})
            self._tables[name] = ts
        elif not self.markers:
            ts = TableState(name, logs.latest_snapshot(name, self.store))
            check_readable(ts.base.protocol, ts.base.metadata, table=name)
            self._tables[name] = ts
        else:
            v, etag, attempts = self._place(name, logs.cached_hint(name, self.store) + 1)
            crashpoint("marker-placed")
            try:
                base, pending = logs.resolved_view(name, v - 1, self.store)
                check_readable(base.protocol, base.metadata, table=name)
            except BaseException:
                self._free_quietly(name, v, etag, "error")
                raise
            pending = {pv: x for pv, x in pending.items() if x != self.id}
            ts = TableState(name, base, v, etag, logical=bool(pending), pending=pending)
            self._tables[name] = ts
            self._add_edges(ts)
        self.events.emit(ev.SnapshotRead(self.id, table=name, version=ts.base.version, files=len(ts.base.files)))
        return ts

    def _place(self, name: str, start: int) -> tuple[int, str, int]:
        """Put-if-absent a marker at the first free version >= ``start`` (writing the lease first)."""
        if self._lease_expires == 0.0:
            self._lease_expires = keeper().register(self.store, self.id, self.lease_s)
        v, etag, attempts = place_marker(self.store, name, start, self._marker_info())
        self.lh._logs.note_latest(name, v)
        self.events.emit(ev.MarkerPlaced(self.id, table=name, version=v, attempts=attempts))
        return v, etag, attempts

    def _free_quietly(self, table: str, version: int, etag: str, reason: str) -> None:
        """Free a marker not recorded in the transaction yet (an error right after placing it)."""
        try:
            overwrite(self.store, table, version, etag, encode_freed(self.id, reason))
            self.events.emit(ev.MarkerFreed(self.id, table=table, version=version, reason=reason))
        except LvError:
            pass  # expires by lease; any reader frees it then

    def _add_edges(self, ts: TableState) -> None:
        """LV[CT]: the pending markers before ours are new outgoing edges (rules II and IV)."""
        if not (self.ct and ts.pending):
            return
        new = [Edge(self.id, x, ts.name, pv) for pv, x in sorted(ts.pending.items()) if (x, ts.name) not in self._preds]
        for e in new:
            self._preds[(e.dst, e.table)] = e.version
            self.events.emit(ev.EdgeAdded(self.id, to_txn=e.dst, table=e.table, version=e.version))
        if new:
            self._break_cycles(new)
            self._expose_predecessors()

    def _claim_write_marker(self, ts: TableState) -> None:
        """LV[I] with markers: a table read at its global version gets its marker when first written.

        Versions between the read version and the marker are predecessors, checked at commit."""
        v, etag, _ = self._place(ts.name, self.lh._logs.cached_hint(ts.name, self.store) + 1)
        crashpoint("marker-placed")
        ts.marker_version, ts.marker_etag = v, etag
        for pv in range(ts.base.version + 1, v):
            st = read_version(self.store, ts.name, pv)
            if st.pending and st.txn and st.txn != self.id:
                ts.pending[pv] = st.txn
        ts.logical = v - 1 > ts.base.version
        self._add_edges(ts)

    # ------------------------------------------------------------------ dependency DAG (module #3)
    def _marker_info(self) -> MarkerInfo:
        preds = tuple(e.to_json() for e in self.out_edges()) if self.ct else ()
        return MarkerInfo(txn=self.id, predecessors=preds, created=self._created,
                          lease_expires=self._lease_expires, client=layout.client_label())

    def out_edges(self) -> list[Edge]:
        """This transaction's outgoing DAG edges (the markers it waits behind), still pending or not."""
        return [Edge(self.id, x, t, v) for (x, t), v in sorted(self._preds.items())]

    def _marker_edges(self, node: str, via: Edge | None) -> list[Edge]:
        """Rule III: read ``node``'s marker where ``via`` points and return its outgoing edges."""
        if via is None:
            return []
        try:
            st = read_version(self.store, via.table, via.version)
        except (NotFound, LvError):
            return []
        if not st.pending or st.txn != node or st.marker is None:
            return []  # resolved (or not its marker any more): it waits for nobody there
        return edges_from_json(node, st.marker.predecessors)

    def _break_cycles(self, new_edges: list[Edge]) -> None:
        """Before waiting behind ``new_edges``: if one closes a cycle, shift our markers (rule IV)."""
        for _ in range(self.max_shifts):
            cycle = closes_cycle(self.id, new_edges, self._marker_edges)
            if cycle is None:
                return
            tables = {t for t in shift_tables(self.id, cycle)
                      if t in self._tables and any(e.dst == self.id and e.table == t
                                                    and e.version == self._tables[t].marker_version for e in cycle)}
            if not tables:
                return  # the cycle runs through a marker of ours that no longer exists: already broken
            self._cycles.append(cycle)
            self.events.emit(ev.CycleFound(self.id, edges=tuple((e.src, e.dst, e.label) for e in cycle)))
            new_edges = self._shift(tables, "cycle")
        raise TransactionAborted(
            f"could not break a dependency cycle after {self.max_shifts} marker shifts. Help: retry the "
            "transaction; if it keeps happening, fewer concurrent transactions should touch these tables.",
            "deadlock", details={"cycles": len(self._cycles)})

    def _shift(self, tables: set[str], reason: str) -> list[Edge]:
        """Marker shift: free our markers in ``tables`` and claim new ones at later versions.

        Our reads keep their versions (repeatable reads); the versions between the old base and the
        new marker become predecessors to wait for and check at commit. Returns the new edges.
        """
        if len(self._shifts) >= self.max_shifts:
            raise TransactionAborted(
                f"gave up after {len(self._shifts)} marker shifts ({reason}). Help: retry the transaction.",
                "deadlock", details={"shifts": len(self._shifts)})
        new_edges: list[Edge] = []
        moved: dict[str, tuple[int, int]] = {}
        for t in sorted(tables):
            ts = self._tables[t]
            assert ts.marker_version is not None and ts.marker_etag is not None
            old = ts.marker_version
            with contextlib.suppress(PreconditionFailed):
                overwrite(self.store, t, old, ts.marker_etag, encode_freed(self.id, "shift"))
            self.events.emit(ev.MarkerFreed(self.id, table=t, version=old, reason="shift"))
            v, etag, attempts = place_marker(self.store, t, old + 1, self._marker_info())
            self.lh._logs.note_latest(t, v)
            for pv in range(old + 1, v):
                st = read_version(self.store, t, pv)
                if st.pending and st.txn and st.txn != self.id:
                    ts.pending[pv] = st.txn
                    e = Edge(self.id, st.txn, t, pv)
                    self._preds[(st.txn, t)] = pv
                    new_edges.append(e)
                    self.events.emit(ev.EdgeAdded(self.id, to_txn=st.txn, table=t, version=pv))
            ts.marker_version, ts.marker_etag, ts.logical = v, etag, True
            moved[t] = (old, v)
            self.events.emit(ev.MarkerPlaced(self.id, table=t, version=v, attempts=attempts, shift=True))
        self._shifts.append({"tables": {t: list(m) for t, m in moved.items()}, "reason": reason, "ts": time.time()})
        self.events.emit(ev.Shifted(self.id, moves=tuple((t, a, b) for t, (a, b) in moved.items()), reason=reason))
        return new_edges

    def _expose_predecessors(self) -> None:
        """Rule II: every marker we hold carries our current outgoing edges."""
        data = encode_marker(self._marker_info())

        def one(ts: TableState) -> None:
            assert ts.marker_version is not None and ts.marker_etag is not None
            try:
                ts.marker_etag = overwrite(self.store, ts.name, ts.marker_version, ts.marker_etag, data)
            except PreconditionFailed:
                pass  # lost (freed after our lease expired): found and repaired at commit

        held = [ts for t, ts in self._tables.items() if ts.marker_version is not None and t not in self._published
                and t not in self._freed]
        list(_POOL.map(one, held)) if len(held) > 1 else [one(ts) for ts in held]

    def dag(self) -> DagView:
        """The dependency DAG around this transaction, as data (for widgets)."""
        return DagView.around(self.id, self.state, self.out_edges(), self._cycles, self._shifts)

    def snapshot(self, table: str):
        """The snapshot this transaction reads ``table`` at (placing its marker on first access)."""
        with self._lock:
            self._check_active()
            return self._access(table).base

    # ------------------------------------------------------------------ operations (module #2)
    def _run(self, op: Operation, step: int, attempt: int) -> OpResult:
        ctx = OpContext(self, step, attempt)
        try:
            result = op.run(ctx)
            for t in set(result.adds) | set(result.removes):
                if t not in op.tables:
                    raise TransactionError(f"operation {op.name} changed table {t!r} it did not declare")
                if result.adds.get(t) or result.removes.get(t):
                    check_writable(self._tables[t].base.protocol, self._tables[t].base.metadata, table=t)
        except BaseException:
            self._delete_paths(op.tables, ctx)
            raise
        return result

    def _delete_paths(self, tables: tuple[str, ...], ctx: OpContext) -> None:
        prefix = f"part-{self.id}-{ctx.step:04d}-{ctx.attempt}-"
        for t in tables:
            for meta in list(self.store.list(f"{t}/")):
                if prefix in meta.key:
                    self.store.delete(meta.key)

    def execute(self, op: Operation) -> Any:
        """Run ``op`` inside this transaction and return its value."""
        with self._lock:
            self._check_active()
            if not self.markers and not self.iso:
                return self._execute_autocommit(op)
            for t in op.tables:
                self._access(t)
            step = len(self._ops)
            result = self._run(op, step, 0)
            claim = [t for t in op.tables if self.iso and self.markers and self._tables[t].marker_version is None
                     and (result.adds.get(t) or result.removes.get(t))]
            named = False
            if claim:
                try:
                    if any(result.adds.values()):  # name the staged files before claiming: a crash in between
                        self._write_sublog(_OpRecord(op, step, result, "physical", 0))  # leaves them to `lv recover`
                        named = True
                    for t in claim:
                        self._claim_write_marker(self._tables[t])
                except BaseException:
                    for t, adds in result.adds.items():  # not recorded in the transaction: delete them here
                        for a in adds:
                            self.store.delete(f"{t}/{a.path}")
                    if named:
                        self.store.delete(layout.sublog_key(self.id, step))
                        self._sublog_steps.discard(step)
                    raise
            logical = any(self._tables[t].logical for t in op.tables)
            mode = "logical" if logical and not op.blind else "physical"
            rec = _OpRecord(op, step, result, mode, 0)
            self._ops.append(rec)
            for t in op.tables:
                if self._tables[t].first_step is None:
                    self._tables[t].first_step = step
            if any(self._tables[t].marker_version is not None for t in op.tables) and not (named and mode == "physical"):
                self._write_sublog(rec)  # module #2 serves marker tables (LV[I] reads need none)
            crashpoint("data-staged")
            self.events.emit(ev.OperationDone(
                self.id, step=step, op=op.name, table=",".join(op.tables), sublog=mode,
                added=sum(len(v) for v in result.adds.values()),
                removed=sum(len(v) for v in result.removes.values())))
            return result.value

    def _write_sublog(self, rec: _OpRecord) -> None:
        r = rec.result
        entry = SublogEntry(
            step=rec.step, op=rec.op.name, mode=rec.mode, tables=rec.op.tables,
            reads={t: tuple(sorted(v)) for t, v in r.reads.items()},
            adds={t: tuple(a.path for a in v) for t, v in r.adds.items()},
            removes={t: tuple(x.path for x in v) for t, v in r.removes.items()},
            logical=rec.op.logical if rec.mode == "logical" else None,
            blind=rec.op.blind, exposed=rec.op.exposed, attempt=rec.attempt)
        write_entry(self.store, self.id, entry)
        self._sublog_steps.add(rec.step)

    def _footprints(self) -> list[OpFootprint]:
        out = []
        for rec in self._ops:
            if rec.op.blind:
                continue
            r = rec.result
            out.append(OpFootprint(
                step=rec.step,
                reads={t: frozenset(v) for t, v in r.reads.items()},
                removes={t: frozenset(x.path for x in v) for t, v in r.removes.items()},
                scans=frozenset(r.scans), may_match=dict(r.may_match)))
        return out

    # ------------------------------------------------------------------ data API (engine: lv_core.engine.api)
    def table(self, name: str) -> Any:
        """The table as this transaction sees it (snapshot + own writes) as a Spark DataFrame."""
        from lv_core.engine import api

        return api.txn_table(self, name)

    def insert(self, name: str, data: Any) -> int:
        """Append rows (Spark DataFrame, pyarrow.Table, pandas DataFrame, or list of dicts); returns the row count."""
        from lv_core.engine import api

        return api.txn_insert(self, name, data)

    def update(self, name: str, set: Mapping[str, str], where: str | None = None) -> int:  # noqa: A002
        """``UPDATE name SET k = expr, ... WHERE where`` (Spark SQL expressions); returns rows affected."""
        from lv_core.engine import api

        return api.txn_update(self, name, set, where)

    def delete(self, name: str, where: str | None = None) -> int:
        """``DELETE FROM name WHERE where``; returns rows deleted."""
        from lv_core.engine import api

        return api.txn_delete(self, name, where)

    def sql(self, statement: str) -> Any:
        """Run SQL (one statement or a ``;``-separated script) inside this transaction; returns the last
        statement's result: SELECT -> DataFrame, INSERT/UPDATE/DELETE/MERGE -> one-row DataFrame of row
        counts, SHOW/DESCRIBE -> DataFrame, CREATE TABLE -> None (see :mod:`lv_core.engine.sql`)."""
        from lv_core.engine.sql import txn_sql

        return txn_sql(self, statement)

    # ------------------------------------------------------------------ delta baseline
    def _execute_autocommit(self, op: Operation) -> Any:
        """Preset ``delta``: the operation commits alone at the next free version (plain Delta OCC)."""
        logs = self.lh._logs
        for t in op.tables:
            validate_table_name(t)
        self._tables = {t: TableState(t, logs.latest_snapshot(t, self.store)) for t in op.tables}
        for t, ts in self._tables.items():
            check_readable(ts.base.protocol, ts.base.metadata, table=t)
        self._ops = []
        self._stmt = getattr(self, "_stmt", -1) + 1
        result = self._run(op, self._stmt, 0)
        for t in op.tables:
            actions = self._net_actions(t, [result])
            if not actions:
                continue
            base = self._tables[t].base
            v = base.version + 1
            data = encode_commit([*actions, CommitInfo(lakevilla_commit_info(self.id, op.name.upper()))])
            while True:
                try:
                    self.store.put(layout.commit_key(t, v), data, mode=CREATE)
                    break
                except AlreadyExists:
                    st = read_version(self.store, t, v)
                    pc = PredecessorCommit(t, v, st.txn, decode_commit(st.raw))
                    self._ops = [_OpRecord(op, self._stmt, result, "physical", 0)]
                    c = first_conflict(self._footprints(), [pc])
                    self._ops = []
                    if c is not None:
                        for a in result.adds.get(t, ()):
                            self.store.delete(f"{t}/{a.path}")
                        raise TransactionAborted(
                            f"{op.name} on {t!r} conflicts with the concurrent commit at version {v} "
                            f"({c.why}); plain Delta aborts the statement. Help: run it again.",
                            "conflict", details={"table": t, "version": v})
                    v += 1
            logs.note_latest(t, v)
            self._autocommitted[t] = v
        return result.value

    # ------------------------------------------------------------------ commit
    def _net_actions(self, table: str, results: list[OpResult]) -> list[Action]:
        adds: dict[str, AddFile] = {}
        removes: dict[str, RemoveFile] = {}
        for r in results:
            for x in r.removes.get(table, ()):
                if x.path in adds:
                    del adds[x.path]  # added and removed within the transaction: never published
                else:
                    removes[x.path] = x
            for a in r.adds.get(table, ()):
                adds[a.path] = a
        return [*removes.values(), *adds.values()]

    def _internal_orphans(self) -> list[tuple[str, str]]:
        """Files this transaction added and later removed itself (deleted after commit)."""
        added: set[tuple[str, str]] = set()
        gone: list[tuple[str, str]] = []
        for rec in self._ops:
            for t, xs in rec.result.removes.items():
                for x in xs:
                    if (t, x.path) in added:
                        gone.append((t, x.path))
            for t, adds in rec.result.adds.items():
                added.update((t, a.path) for a in adds)
        return gone

    def _deadline_left(self, deadline: float) -> float:
        return deadline - time.monotonic()

    def _resolve_predecessors(self, ts: TableState, deadline: float) -> list[PredecessorCommit]:
        """Wait until every version between the base and the marker is resolved; return them."""
        out: list[PredecessorCommit] = []
        assert ts.marker_version is not None
        for v in sorted(set(ts.pending) | set(range(ts.base.version + 1, ts.marker_version))):
            waited_on: str | None = None
            delay = self.lh.poll_min_s
            wait_t0 = time.monotonic()
            next_check = wait_t0 + self.lh.cycle_check_s
            while True:
                st = read_version(self.store, ts.name, v)
                on_table, on = ts.name, st  # what we wait for: this version, or an unfinished part of it
                if self.iso and st.parts and st.txn != self.id:
                    part = unfinished_part(self.store, ts.name, st)
                    if part is not None:
                        on_table, on = part
                if not (on.pending and on.txn != self.id):
                    break
                if lease_expired(self.store, on.txn, on.marker):
                    try:
                        how = resolve_expired(self.store, on_table, on, by=self.id)
                        if how == "freed":
                            self.events.emit(ev.MarkerFreed(self.id, table=on_table, version=on.version,
                                                            reason="expired", by=self.id))
                    except PreconditionFailed:
                        pass
                    continue
                if waited_on is None:
                    waited_on = st.txn
                    self.waits += 1
                    self.events.emit(ev.Waiting(self.id, table=ts.name, version=v, on_txn=st.txn or "?"))
                    crashpoint("waiting")
                if self.ct and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.lh.cycle_check_s
                    self._check_while_waiting(ts, v, st.txn or "?", time.monotonic() - wait_t0)
                if self._deadline_left(deadline) <= 0:
                    raise TransactionAborted(
                        f"timed out after {self.timeout_s:g}s waiting for transaction {st.txn} "
                        f"(marker {ts.name}@{v}). Help: commit or roll back that transaction, or retry.",
                        "timeout", details={"table": ts.name, "version": v, "on_txn": st.txn})
                time.sleep(min(delay, max(0.0, self._deadline_left(deadline))))
                delay = min(delay * 1.5, self.lh.poll_max_s)
            if waited_on is not None:
                outcome = "committed" if st.kind == "commit" else "freed"
                self.events.emit(ev.WaitEnded(self.id, table=ts.name, version=v, on_txn=waited_on, outcome=outcome))
            actions = [] if st.kind == "freed" else [a for a in decode_commit(st.raw, version=v, table=ts.name)]
            out.append(PredecessorCommit(ts.name, v, st.txn, actions))
        return out

    def _redo_from(self, conflict: Conflict) -> None:
        step = conflict.step
        undone = self._ops[step:]
        old_values = {rec.step: rec.result.value for rec in undone if rec.op.exposed}
        for rec in reversed(undone):  # undo: compensations newest to oldest
            for t, adds in rec.result.adds.items():
                for a in adds:
                    if a.path not in self._published_paths.get(t, ()):  # LV[R] alone: published stays
                        self.store.delete(f"{t}/{a.path}")
        self._ops = self._ops[:step]
        self.redo_count += 1
        self.events.emit(ev.Redo(self.id, from_step=step, attempt=self.redo_count))
        for rec in undone:  # redo: oldest to newest on the new state
            result = self._run(rec.op, rec.step, self.redo_count)
            new = _OpRecord(rec.op, rec.step, result, "logical" if not rec.op.blind else rec.mode, self.redo_count)
            self._ops.append(new)
            self._write_sublog(new)
            if rec.step in old_values and not _same_value(old_values[rec.step], result.value):
                raise TransactionAborted(
                    f"a result this transaction already returned (step {rec.step}, {rec.op.name} on "
                    f"{','.join(rec.op.tables)}) was changed by transaction {conflict.txn} committed at "
                    f"{conflict.table}@{conflict.version}; it cannot be repaired by redo. Help: run the "
                    "transaction again.", "exposed_read",
                    details={"table": conflict.table, "version": conflict.version, "step": rec.step})

    def commit(self) -> CommitResult:
        """Commit (blocking up to ``timeout_s``); raises TransactionAborted when it cannot."""
        with self._lock:
            self._check_active()
            self.state = "committing"
            try:
                if self.iso:
                    versions, freed, state = isolation.commit_isolated(self, time.monotonic() + self.timeout_s)
                    self.gvl_version = state.version
                elif not self.markers:
                    versions, freed = dict(self._autocommitted), {}
                else:
                    versions, freed = self._commit_markers(time.monotonic() + self.timeout_s)
                crashpoint("committed")
            except TransactionAborted as e:
                self._abort(e.reason, e.rule)
                raise
            except BaseException as e:
                reason = f"commit failed: {e}" if isinstance(e, LvError) else f"commit failed: {type(e).__name__}: {e}"
                if self._decided:
                    self._end_undecidable(reason)
                    raise
                self._abort(reason, "crashed" if not isinstance(e, LvError) else "conflict")
                raise
            reads = {t: s.base.version for t, s in self._tables.items()} if (self.iso or self.markers) else {}
            return self._finish(versions, freed, reads)

    def _end_undecidable(self, reason: str) -> None:
        """The commit is decided (recorded) but could not be completed here: stop renewing the lease so
        that, once it runs out, the next transaction on these tables (or `lv recover`) rolls it forward.
        Nothing is deleted: the decided files are needed."""
        keeper().unregister(self.id)
        self.state = "unknown"
        self.events.emit(ev.Aborted(self.id, reason=f"{reason} (decided: completed by roll forward once the "
                                    "lease runs out)", rule="unknown"))

    def commit_async(self) -> "Future[CommitResult]":
        """Commit in a background thread; the future resolves to the CommitResult or the abort."""
        fut: Future[CommitResult] = Future()

        def run() -> None:
            try:
                fut.set_result(self.commit())
            except BaseException as e:  # noqa: BLE001 - delivered through the future
                fut.set_exception(e)

        threading.Thread(target=run, name=f"lv-commit-{self.id}", daemon=True).start()
        return fut

    def _check_while_waiting(self, ts: TableState, v: int, on_txn: str, waited_s: float) -> None:
        """While waiting behind ``on_txn`` at ``ts.name@v``: shift if a cycle shows up (rule IV), or
        pre-emptively after waiting too long; raises _Restart when markers moved."""
        if not self._shift_lock.acquire(blocking=False):
            return  # another table's waiter is shifting right now
        try:
            cycle = closes_cycle(self.id, [Edge(self.id, on_txn, ts.name, v)], self._marker_edges)
            tables = {t for t in shift_tables(self.id, cycle) if t in self._tables and t != ts.name} if cycle else set()
            if cycle and tables:
                self._cycles.append(cycle)
                self.events.emit(ev.CycleFound(self.id, edges=tuple((e.src, e.dst, e.label) for e in cycle)))
                self._shift(tables, "cycle")
                self._expose_predecessors()
                raise _Restart()
            if waited_s >= self._shift_after():
                others = {t for t, o in self._tables.items() if t != ts.name and o.marker_version is not None
                          and t not in self._published and t not in self._freed}
                if others and len(self._shifts) < self.max_shifts:
                    self._shift(others, "waited too long")
                    self._expose_predecessors()
                    raise _Restart()
        finally:
            self._shift_lock.release()

    def _blind_only(self, table: str) -> bool:
        """Every operation touching ``table`` is a blind append (no read, no remove there), and ops exist."""
        touching = [rec for rec in self._ops if table in rec.op.tables]
        return bool(touching) and all(rec.op.blind for rec in touching)

    def _resolve_all(self, group: list[str], deadline: float) -> list[PredecessorCommit]:
        """Wait for the predecessors of every table in ``group``, tables in parallel.

        Without LV[I], a table this transaction only blind-appended to cannot conflict with anything
        before it, so it does not wait there (no wait edge: fewer cycles across many tables). With
        LV[I] it must: a published global version may never gain content later."""
        if not self.iso:
            group = [t for t in group if not self._blind_only(t)]
        if len(group) == 1 or not self.ct:
            return [p for t in group for p in self._resolve_predecessors(self._tables[t], deadline)]
        futures = [_POOL.submit(self._resolve_predecessors, self._tables[t], deadline) for t in group]
        out: list[PredecessorCommit] = []
        first_error: BaseException | None = None
        for f in futures:
            try:
                out.extend(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised below after all finished
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return out

    def _shift_after(self) -> float:
        return max(self.lh.cycle_check_s * 2, min(self.lh.shift_after_s, self.timeout_s / 4))

    def _settle(self, deadline: float) -> None:
        """Resolve every marker table's predecessors and redo what they invalidated (no publishing)."""
        group = [t for t, ts in self._tables.items() if ts.marker_version is not None]
        self._settle_group(group, deadline, publish=False)

    def _commit_markers(self, deadline: float) -> tuple[dict[str, int], dict[str, int]]:
        """LV[CT]: all tables commit together (a decision record makes it all-or-nothing).
        LV[R] alone: each table commits on its own, as the paper's single-table atomic markers do."""
        groups = [list(self._tables)] if self.ct else [[t] for t in self._tables]
        for group in groups:
            self._settle_group(group, deadline, publish=True)
        return self._published, self._freed

    def _settle_group(self, group: list[str], deadline: float, *, publish: bool) -> None:
        redos = 0  # the retry bound counts redo rounds of this group (LV[R] alone settles table by table)
        while True:
            try:
                preds = self._resolve_all(group, deadline)
            except _Restart:
                continue
            conflict = first_conflict(self._footprints(), preds) if not self._decided else None
            waited = group if self.iso else [t for t in group if not self._blind_only(t)]
            for t in waited:  # blind-only tables not waited on keep their pending set: never cached as resolved
                ts = self._tables[t]
                ts.base = _rebase(ts.base, [p for p in preds if p.table == t])
                ts.pending = {}
                for (x, tt) in [k for k in self._preds if k[1] == t]:
                    del self._preds[(x, tt)]  # resolved: no longer an edge we wait on
            if conflict is not None:
                self.events.emit(ev.ConflictFound(self.id, table=conflict.table, version=conflict.version,
                                                  step=conflict.step, files=conflict.files))
                if self.iso and not self.policy.check_r1 and _in_global_log(preds, conflict):
                    # Snapshot isolation: the conflicting commit is ordered in the global log after our
                    # snapshot; a redo would mix the snapshot with newer state (first committer wins).
                    # (Commits outside the log have no such position: a redo onto them stays allowed.)
                    raise TransactionAborted(
                        f"{conflict.table}@{conflict.version} by {conflict.txn} changed what step {conflict.step} "
                        f"read before writing ({conflict.why}); under snapshot isolation the first committer wins "
                        "(R3: lost update). Help: retry the transaction.", "R3",
                        details={"table": conflict.table, "version": conflict.version})
                if redos >= self.retries:
                    raise TransactionAborted(
                        f"gave up after {self.redo_count} redo(s): {conflict.table}@{conflict.version} by "
                        f"{conflict.txn} keeps invalidating step {conflict.step} ({conflict.why}). "
                        "Help: retry the transaction, or raise its retry bound.", "conflict",
                        details={"table": conflict.table, "version": conflict.version})
                self._redo_from(conflict)
                redos += 1
                continue  # everything below the markers is resolved now: the next round finds nothing
            if not publish or not self._publish(group):
                break

    def _publish(self, group: list[str]) -> list[str]:
        """Overwrite the markers of ``group`` with their actions (read-only ones: freed).

        Returns the tables whose marker was lost (and re-claimed)."""
        results = [rec.result for rec in self._ops]
        plan: dict[str, bytes] = {}
        writes: dict[str, list[Action]] = {}
        for t in group:
            actions = self._net_actions(t, results)
            if actions:
                writes[t] = actions
        extra: dict[str, Any] = {"preset": self.preset, "tables": sorted(writes), "redo": self.redo_count}
        if len(writes) > 1:  # every part's version: LV[I] publishes none of them before all are committed
            extra["at"] = {t: self._published.get(t, self._tables[t].marker_version) for t in sorted(writes)}
        commits = {t: encode_commit([*actions, CommitInfo(lakevilla_commit_info(self.id, "LAKEVILLA COMMIT", extra))])
                   for t, actions in writes.items()}
        for t in group:
            if t in self._published or t in self._freed:
                continue
            plan[t] = commits[t] if t in writes else encode_freed(self.id, "read-only")
        at = {t: self._published.get(t, self._tables[t].marker_version) for t in writes}
        if len(writes) > 1 and at != self._decision_at:  # first decision, or markers moved since (lost, re-claimed)
            decision = {"txn": self.id, "decided": time.time(), "tables": {
                t: {"version": at[t], "commit": commits[t].decode()} for t in writes}}
            self._write_decision(json.dumps(decision).encode())
            self._decision_at = at
            self._decided = True
            crashpoint("decision-written")
        lost: list[str] = []
        guard = threading.Lock()

        def one(t: str, data: bytes) -> None:
            ts = self._tables[t]
            assert ts.marker_version is not None and ts.marker_etag is not None
            if t in writes and self._checkpoint_covers(ts):
                # A (foreign) checkpoint at or after our marker froze it as an empty commit: readers
                # starting from that checkpoint would never see our actions there. Move the marker.
                with contextlib.suppress(PreconditionFailed):
                    overwrite(self.store, t, ts.marker_version, ts.marker_etag, encode_freed(self.id, "checkpoint"))
                self.events.emit(ev.MarkerLost(self.id, table=t, version=ts.marker_version))
                self._replace_marker(ts)
                with guard:
                    lost.append(t)
                return
            if t in writes:
                self._attempted.add(t)
            st = self._overwrite_marker(ts, data)
            if st is not None:
                if st.kind == "commit" and st.txn == self.id:  # rolled forward by a recoverer
                    with guard:
                        self._mark_published(t, ts.marker_version, writes.get(t, []))
                    return
                self.events.emit(ev.MarkerLost(self.id, table=t, version=ts.marker_version))
                self._replace_marker(ts)
                with guard:
                    lost.append(t)
                return
            if t in writes:
                with guard:
                    self._mark_published(t, ts.marker_version, writes[t])
                    first = len(self._published) == 1
                if len(writes) > 1 and first:
                    crashpoint("between-markers")
            else:
                with guard:
                    self._freed[t] = ts.marker_version
                self.events.emit(ev.MarkerFreed(self.id, table=t, version=ts.marker_version, reason="read-only"))

        # Per-table overwrites run in parallel (bounded pool): commit latency grows slowly with tables.
        items = sorted(plan.items())
        if len(items) > 1:
            for f in [_POOL.submit(one, t, d) for t, d in items]:
                f.result()
        else:
            for t, d in items:
                one(t, d)
        return lost

    def _checkpoint_covers(self, ts: TableState) -> bool:
        """True when the table's last checkpoint is at or after our marker (1 GET)."""
        lc = DeltaLog(self.store, ts.name).read_last_checkpoint()
        try:
            return lc is not None and int(lc.get("version", -1)) >= (ts.marker_version or 0)
        except (TypeError, ValueError):
            return False

    def _write_decision(self, data: bytes) -> None:
        """PUT the commit decision; after an error whose outcome is unknown (a lost response), GET it
        back: if our bytes are there the decision stands, otherwise the error is raised (not decided;
        an abort then frees markers, and recovery never rolls a decision forward past a freed marker)."""
        key = layout.decision_key(self.id)
        self._decision_tried = True
        try:
            self.store.put(key, data, mode=OVERWRITE)
        except LvError as e:
            try:
                landed = self.store.get(key).data == data
            except LvError:
                raise e from None
            if not landed:
                raise

    def _overwrite_marker(self, ts: TableState, data: bytes) -> VersionState | None:
        """Overwrite our marker at ``ts.marker_version`` with ``data`` (if-match on the etag we hold).

        Returns None once written. When the store refuses (the version changed), returns what the
        version is now. After an error whose outcome is unknown (the write may have landed and only
        the response got lost) the version is read back: our bytes there mean written; our marker
        unchanged means it did not land, so it is written once more. Raises when nothing can be learnt.
        """
        assert ts.marker_version is not None and ts.marker_etag is not None
        try:
            ts.marker_etag = overwrite(self.store, ts.name, ts.marker_version, ts.marker_etag, data)
            return None
        except PreconditionFailed:
            return read_version(self.store, ts.name, ts.marker_version)
        except LvError as e:
            try:
                st = read_version(self.store, ts.name, ts.marker_version)
            except LvError:
                raise e from None
        if st.raw == data:
            ts.marker_etag = st.etag
            return None
        if not (st.pending and st.txn == self.id):
            return st
        ts.marker_etag = overwrite(self.store, ts.name, ts.marker_version, st.etag, data)
        return None

    def _mark_published(self, table: str, version: int, actions: list[Action]) -> None:
        self._published[table] = version
        self._published_paths[table] = {a.path for a in actions if isinstance(a, AddFile)}

    def _replace_marker(self, ts: TableState) -> None:
        """Claim a new marker after losing one; the versions in between become predecessors."""
        self._lease_expires = write_lease(self.store, self.id, self.lease_s)
        info = MarkerInfo(txn=self.id, created=time.time(), lease_expires=self._lease_expires,
                          client=layout.client_label())
        assert ts.marker_version is not None
        v, etag, attempts = place_marker(self.store, ts.name, ts.marker_version + 1, info)
        ts.marker_version, ts.marker_etag, ts.logical = v, etag, True
        self.lh._logs.note_latest(ts.name, v)
        self.events.emit(ev.MarkerPlaced(self.id, table=ts.name, version=v, attempts=attempts))

    def _unpublished_adds(self) -> list[str]:
        """Keys of every data file this transaction staged that no published commit of it references."""
        keep = {(t, p) for t, paths in self._published_paths.items() for p in paths}
        return [f"{t}/{a.path}" for rec in self._ops for t, adds in rec.result.adds.items() for a in adds
                if (t, a.path) not in keep]

    def _cleanup(self) -> None:
        """Delete what the transaction no longer needs: staged files no published commit references,
        the sublog, the decision; the lease last. Runs after every marker was replaced, so a crash here
        leaves only leftovers that `lv recover` removes. Deletes run in parallel (bounded pool)."""
        keeper().unregister(self.id)
        keys = self._unpublished_adds()
        keys += [layout.sublog_key(self.id, step) for step in sorted(self._sublog_steps)]
        if self._decision_tried:
            keys.append(layout.decision_key(self.id))
        if len(keys) > 1:
            list(_POOL.map(self.store.delete, keys))
        else:
            for k in keys:
                self.store.delete(k)
        if self._lease_expires:
            self.store.delete(layout.lease_key(self.id))

    def _finish(self, versions: dict[str, int], freed: dict[str, int], read_versions: dict[str, int]) -> CommitResult:
        """Everything is published: the transaction is committed whatever happens below. A failed
        clean-up leaves leftovers for `lv recover`, it does not turn the commit into an error."""
        elapsed = time.monotonic() - self._t0
        if self.markers or self.iso:
            try:
                self._cleanup()
            except LvError as e:
                keeper().unregister(self.id)
                _log.warning("transaction %s committed; its clean-up failed (lv recover removes the "
                             "leftovers): %s", self.id, e)
            for t, v in versions.items():
                if self._tables[t].pending:
                    continue  # published past unresolved markers (blind append): its snapshot is not final yet
                with contextlib.suppress(Exception):  # a cache: the next read refreshes it
                    self.lh._after_commit(t, v, self._tables[t].base,
                                          self._net_actions(t, [r.result for r in self._ops]))
        self.state = "committed"
        self.events.emit(ev.Requests(self.id, counts=self.requests()))
        self.events.emit(ev.Committed(self.id, versions=dict(versions), redo_count=self.redo_count, elapsed_s=elapsed))
        return CommitResult(txn=self.id, versions=dict(versions), read_versions=read_versions, freed=dict(freed),
                            redo_count=self.redo_count, waits=self.waits, elapsed_s=elapsed,
                            gvl_version=self.gvl_version, validation=dict(self.validation),
                            requests=self.requests())

    # ------------------------------------------------------------------ abort / rollback
    def _abort(self, reason: str, rule: str) -> None:
        """Free every marker not published and delete what no published commit references.

        A marker write whose outcome cannot be learnt leaves its table "unknown": then nothing is
        deleted and the lease is left to run out (the next transaction there resolves the marker,
        `lv recover` the files). A commit found to have landed (a lost response) is kept: the
        transaction then ends "unknown", never with its committed files deleted."""
        unknown: list[str] = []
        landed: list[str] = []
        for t, ts in self._tables.items():
            if ts.marker_version is None or ts.marker_etag is None or t in self._published or t in self._freed:
                continue
            try:
                st = self._overwrite_marker(ts, encode_freed(self.id, rule))
            except LvError:
                unknown.append(t)
                continue
            if st is None:
                self._freed[t] = ts.marker_version
                self.events.emit(ev.MarkerFreed(self.id, table=t, version=ts.marker_version, reason=rule))
            elif st.kind == "commit" and st.txn == self.id:  # our commit landed after all
                self._mark_published(t, ts.marker_version, decode_commit(st.raw, version=st.version, table=t))
                landed.append(t)
        if unknown:
            keeper().unregister(self.id)
        else:
            try:
                self._cleanup()
            except LvError:
                keeper().unregister(self.id)  # leftovers: `lv recover` removes them
        undecided = landed or any(t in self._attempted for t in unknown)
        self.state = "unknown" if undecided else "aborted"
        if self._published and not landed:
            reason += f" (committed before the abort, as LV[R] alone commits table by table: " \
                      f"{', '.join(f'{t}@{v}' for t, v in sorted(self._published.items()))})"
        self.events.emit(ev.Requests(self.id, counts=self.requests()))
        self.events.emit(ev.Aborted(self.id, reason=reason, rule=rule if not undecided else "unknown"))

    def rollback(self) -> None:
        """Undo everything: free markers, delete staged files and the sublog."""
        with self._lock:
            if self.state in ("aborted", "committed"):
                return
            if not self.markers and self._autocommitted:
                # Plain Delta: statements already committed cannot be undone (the baseline's weakness).
                self.state = "aborted"
                self.events.emit(ev.Aborted(self.id, reason="rollback (statements already committed stay)",
                                            rule="rollback"))
                return
            self._abort("rolled back by the user", "rollback")

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.state == "active":
                self.commit()
        else:
            self.rollback()
