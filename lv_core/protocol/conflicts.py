"""File-granular conflict detection between a transaction's operations and predecessor commits.

Pure functions: no I/O. A predecessor commit conflicts with operation k on table t when
- it removed a file that operation k read or removed (the data k depended on changed), or
- it added files and operation k scanned table t with a predicate those files may match
  (a phantom: in the serial order the predecessor comes first, so k must see those rows), or
- it changed the table's metadata (schema/protocol) and k touched t at all.
Blind appends (write-only, no reads of t) never conflict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from lv_core.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from lv_core.protocol.markers import KEY


@dataclass(frozen=True)
class OpFootprint:
    """What one operation did to each table it touched."""

    step: int
    reads: Mapping[str, frozenset[str]] = field(default_factory=dict)  # table -> files read
    removes: Mapping[str, frozenset[str]] = field(default_factory=dict)  # table -> files removed
    scans: frozenset[str] = frozenset()  # tables scanned with a predicate (phantom-sensitive)
    # table -> predicate over a predecessor's added file: True if it may hold rows the op reads
    may_match: Mapping[str, Callable[[AddFile], bool]] = field(default_factory=dict)

    def touches(self, table: str) -> bool:
        return table in self.reads or table in self.removes or table in self.scans


@dataclass(frozen=True)
class PredecessorCommit:
    """One resolved predecessor version of a table: its data-changing actions."""

    table: str
    version: int
    txn: str | None
    actions: Sequence[Action]

    @property
    def added(self) -> list[AddFile]:
        return [a for a in self.actions if isinstance(a, AddFile) and a.data_change]

    @property
    def removed(self) -> set[str]:
        """Every file it removed, compaction (``dataChange: false``) included: an operation that read or
        rewrote such a file must be redone on the compacted files, or its rewrite would duplicate rows."""
        return {a.path for a in self.actions if isinstance(a, RemoveFile)}

    @property
    def changes_metadata(self) -> bool:
        return any(isinstance(a, (Metadata, Protocol)) for a in self.actions)

    @property
    def lakevilla(self) -> list[dict]:
        """The LakeVilla fields of its commitInfo (none for a commit made without LakeVilla)."""
        return [a.payload[KEY] for a in self.actions
                if isinstance(a, CommitInfo) and isinstance(a.payload.get(KEY), dict)]


@dataclass(frozen=True)
class Conflict:
    step: int
    table: str
    version: int
    txn: str | None
    files: tuple[str, ...]
    why: str


def _conflict_for(op: OpFootprint, pc: PredecessorCommit) -> Conflict | None:
    t = pc.table
    if not op.touches(t):
        return None
    if pc.changes_metadata:
        return Conflict(op.step, t, pc.version, pc.txn, (), "the table's schema or protocol changed")
    removed = pc.removed
    hit = sorted(removed & (set(op.reads.get(t, ())) | set(op.removes.get(t, ()))))
    if hit:
        return Conflict(op.step, t, pc.version, pc.txn, tuple(hit), "files it read or rewrote were changed")
    if t in op.scans:
        match = op.may_match.get(t)
        added = [a.path for a in pc.added if match is None or match(a)]
        if added:
            return Conflict(op.step, t, pc.version, pc.txn, tuple(sorted(added)), "new rows may match what it read")
    return None


def first_conflict(ops: Iterable[OpFootprint], predecessors: Iterable[PredecessorCommit]) -> Conflict | None:
    """The earliest operation (by step) that a predecessor commit invalidates, or None."""
    preds = sorted(predecessors, key=lambda p: (p.table, p.version))
    for op in sorted(ops, key=lambda o: o.step):
        for pc in preds:
            c = _conflict_for(op, pc)
            if c is not None:
                return c
    return None


@dataclass(frozen=True)
class FirstUpdater:
    """A later transaction queued behind ours that changed first what our operation now rewrites, and
    whose results already depend on data we changed (see :func:`first_updater`)."""

    txn: str
    table: str
    version: int  # its marker
    files: tuple[str, ...]  # the files both rewrote
    doomed_by: tuple[str, ...]  # files it read that we rewrote


def first_updater(table: str, now_removed: Iterable[str], ours_removed: Mapping[str, Iterable[str]],
                  their_reads: Mapping[str, Iterable[str]], their_removes: Mapping[str, Iterable[str]],
                  txn: str, version: int) -> FirstUpdater | None:
    """Should our operation give way to a transaction queued behind us (pure)?

    It does when the queued transaction already rewrote a file our operation rewrites on ``table``
    (it updated those rows first) and a result it returned was read from a file we rewrote (it can no
    longer be redone after us: it would abort at its commit). One of the two must abort; like
    PostgreSQL (first updater wins), the later updater does. Otherwise nothing: the queued
    transaction redoes its work after our commit, or we never touched what it did."""
    both = sorted(set(now_removed) & set(their_removes.get(table, ())))
    if not both:
        return None
    doomed = sorted(f"{t}/{p}" for t, paths in their_reads.items() for p in set(paths) & set(ours_removed.get(t, ())))
    if not doomed:
        return None
    return FirstUpdater(txn, table, version, tuple(both), tuple(doomed))
