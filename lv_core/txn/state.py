"""A transaction's bookkeeping: one state object with public fields (no I/O here).

:class:`Bookkeeping` holds everything a transaction learnt and did: the tables it holds
(:class:`TableState`), the operations it ran (:class:`OpRecord`), its dependency edges, and how far
its commit got (which tables were attempted, published or freed, and the recorded decision). The
lifecycle class (:class:`~lv_core.txn.transaction.Transaction`) and the stage modules read and
write it; pure questions about it (the transaction's view of a table, its net actions, its
footprints) are methods here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from lv_core.delta.actions import Action, AddCDCFile, AddFile, RemoveFile
from lv_core.delta.snapshot import Snapshot
from lv_core.protocol.conflicts import OpFootprint
from lv_core.protocol.dag import Edge
from lv_core.protocol.gvl import GvlState
from lv_core.txn.ops import Operation, OpResult

__all__ = ["Bookkeeping", "Decision", "OpRecord", "TableState", "net_actions"]


@dataclass
class TableState:
    """What a transaction holds on one table."""

    name: str
    base: Snapshot  # the snapshot its operations build on
    marker_version: int | None = None
    marker_etag: str | None = None
    logical: bool = False  # switched to logical sublogs (sticky)
    pending: dict[int, str] = field(default_factory=dict)  # preceding pending markers: version -> txn
    first_step: int | None = None
    read_version: int | None = None  # LV[I]: the global log's version of the table it reads at
    #: LV[I]: a version after which a probe found the log empty, made after ``base`` was read
    #: (:func:`lv_core.txn.current.catch_up`); None: none known
    tail: int | None = None


@dataclass
class OpRecord:
    """One executed operation: its result, sublog mode and attempt (0, then one per redo)."""

    op: Operation
    step: int
    result: OpResult
    mode: str
    attempt: int


class DecisionKind(Enum):
    """Where a commit decision is recorded."""

    RECORD = "record"  # LV[CT]: the decision object names every part
    PARTS = "parts"  # LV[CT]: every part carries the others, so the first part written decides
    PLAN = "plan"  # LV[I]: the plan is recorded in the validation key


@dataclass(frozen=True)
class Decision:
    """A recorded commit decision: from here on the commit is rolled forward, never undone; ``at``:
    table -> version of its part."""

    kind: DecisionKind
    at: Mapping[str, int]


def net_actions(table: str, results: list[OpResult]) -> list[Action]:
    """The removes and adds ``results`` make on ``table`` (files added and removed again cancel out), and
    the change data files (``cdc``) of a change data feed table.

    Change data files: once a commit has one, readers take that commit's changes from its change files
    only, so every operation on such a table writes files for all its changes (an INSERT's rows as
    ``insert``). Those of INSERTs alone are *implied* by the adds: kept only if another operation wrote
    change files for the table (else the commit has none, and readers derive inserts from the adds).
    The engine never rewrites a file staged by the same transaction on such a table, so each change
    file describes rows of the base version or rows this commit adds, exactly once.
    """
    adds: dict[str, AddFile] = {}
    removes: dict[str, RemoveFile] = {}
    cdc: list[AddCDCFile] = []
    cdc_needed = False
    for r in results:
        own = r.cdc.get(table, ())
        cdc.extend(own)
        cdc_needed = cdc_needed or (bool(own) and table not in r.cdc_implied)
        for x in r.removes.get(table, ()):
            if x.path in adds:
                del adds[x.path]  # added and removed within the transaction: never published
            else:
                removes[x.path] = x
        for a in r.adds.get(table, ()):
            adds[a.path] = a
    return [*removes.values(), *adds.values(), *(cdc if cdc_needed else ())]


@dataclass
class Bookkeeping:
    """Everything a transaction knows and did, as public fields."""

    tables: dict[str, TableState] = field(default_factory=dict)
    ops: list[OpRecord] = field(default_factory=list)
    #: the operation whose markers are being claimed (run, not recorded yet): markers written
    #: meanwhile include it in their footprint
    claiming: tuple[Operation, OpResult] | None = None
    sublog_steps: set[int] = field(default_factory=set)
    autocommitted: dict[str, int] = field(default_factory=dict)  # preset delta: table -> last version
    statements: int = 0  # preset delta: statements run (each one commits alone)
    lease_expires: float = 0.0  # 0: no lease written yet
    preds: dict[tuple[str, str], int] = field(default_factory=dict)  # (txn, table) -> marker version waited on
    cycles: list[list[Edge]] = field(default_factory=list)
    shifts: list[dict[str, Any]] = field(default_factory=list)
    head: GvlState | None = None  # LV[I]: the global log head it reads at (read once)
    redo_count: int = 0
    waits: int = 0
    # commit progress
    #: kept here, not handed on: settling redoes a decided commit to completion, and a crash after it ends
    #: the transaction "unknown" (rolled forward), never with its files deleted (transaction.commit)
    decision: Decision | None = None
    decision_written: bool = False  # the decision object was PUT (or tried): clean-up deletes it
    edges_written: bool = False  # the edges object (LV[CT]) was PUT (or tried): clean-up deletes it
    exposed_holds: dict[str, int] | None = None  # the markers the last edges object that landed names
    exposing: dict[str, int] | None = None  # the markers the edges object being written names
    edges_dirty: bool = False  # a background edges write is wanted (markers placed since the last one)
    edges_writer: bool = False  # a background edges write is running
    attempted: set[str] = field(default_factory=set)  # tables whose commit write was sent (outcome may be unknown)
    published: dict[str, int] = field(default_factory=dict)
    published_paths: dict[str, set[str]] = field(default_factory=dict)
    freed: dict[str, int] = field(default_factory=dict)

    def view_files(self, table: str, upto_step: int | None = None) -> dict[str, AddFile]:
        """Live data files of ``table`` as the transaction sees it (before step ``upto_step``)."""
        files = dict(self.tables[table].base.files)
        for rec in self.ops:
            if upto_step is not None and rec.step >= upto_step:
                break
            for r in rec.result.removes.get(table, ()):
                files.pop(r.path, None)
            for a in rec.result.adds.get(table, ()):
                files[a.path] = a
        return files

    def view_changes(self, table: str, upto_step: int | None = None) -> list[AddCDCFile]:
        """Change data files the transaction wrote for ``table`` (before step ``upto_step``)."""
        return [c for rec in self.ops if upto_step is None or rec.step < upto_step
                for c in rec.result.cdc.get(table, ())]

    def results(self) -> list[OpResult]:
        return [rec.result for rec in self.ops]

    def writes(self, tables: list[str] | None = None) -> dict[str, list[Action]]:
        """Table -> net actions, for the tables (of ``tables``) it changes."""
        touching: dict[str, list[OpResult]] = {}  # one pass: each table's net actions read only its results
        for r in self.results():
            for t in {*r.adds, *r.removes, *r.cdc}:
                touching.setdefault(t, []).append(r)
        return {t: a for t in (self.tables if tables is None else tables)
                if (a := net_actions(t, touching.get(t, [])))}

    def footprints(self) -> list[OpFootprint]:
        """What each non-blind operation read, removed and scanned (for conflict checks)."""
        out = []
        for rec in self.ops:
            if rec.op.blind:
                continue
            r = rec.result
            out.append(OpFootprint(
                step=rec.step,
                reads={t: frozenset(v) for t, v in r.reads.items()},
                removes={t: frozenset(x.path for x in v) for t, v in r.removes.items()},
                scans=frozenset(r.scans), may_match=dict(r.may_match)))
        return out

    def blind_only(self, table: str) -> bool:
        """Every operation touching ``table`` is a blind append (no read, no remove there), and ops exist."""
        touching = [rec for rec in self.ops if table in rec.op.tables]
        return bool(touching) and all(rec.op.blind for rec in touching)

    def held(self) -> list[TableState]:
        """Tables whose marker the transaction still holds (not published, not freed)."""
        return [ts for t, ts in self.tables.items()
                if ts.marker_version is not None and t not in self.published and t not in self.freed]

    def has_markers(self) -> bool:
        return any(ts.marker_version is not None for ts in self.tables.values())

    def mark_published(self, table: str, version: int, actions: list[Action]) -> None:
        self.published[table] = version
        self.published_paths[table] = {a.path for a in actions if isinstance(a, (AddFile, AddCDCFile))}

    def unpublished_adds(self) -> list[str]:
        """Keys of every data file (and change data file) staged that no published commit of the transaction
        references."""
        keep = {(t, p) for t, paths in self.published_paths.items() for p in paths}
        return [f"{t}/{p}" for rec in self.ops for t, paths in rec.result.staged().items() for p in paths
                if (t, p) not in keep]

    def read_versions(self) -> dict[str, int]:
        return {t: s.base.version for t, s in self.tables.items()}
