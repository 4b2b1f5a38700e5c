"""LV[I]: a read-only ``serializable`` transaction whose every table is confirmed unmoved commits without
validation (issue 38; the argument is in :mod:`lv_core.txn.current` and docs/PROTOCOL.md, "Why the relaxed
rules stay serializable", point 4); and what validating one read at one global version may skip
(:func:`one_global_version`, :func:`from_log_version`)."""

from __future__ import annotations

import dataclasses

from lv_core import events as ev
from lv_core.concurrency import Pool, submit
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.validation import OneSnapshotRead, RuleCheck, TableAccess, TableVerdict, ValidationOutcome
from lv_core.txn.core import TxnCore
from lv_core.txn.current import is_latest
from lv_core.txn.publish import Published

__all__ = ["commit_read_only", "from_log_version", "one_global_version"]


def commit_read_only(core: TxnCore) -> Published | None:
    """Commit a read-only ``serializable`` transaction at one global version without validation when
    every table it read has no log version past its read version (see :mod:`lv_core.txn.current`); None
    when it must validate as usual (then nothing was decided; at most one HEAD per table was made)."""
    book = core.book
    head = book.head
    if (head is None or not core.policy.snapshot_read_only or book.has_markers()
            or book.writes() or not one_global_version(core)):
        return None
    tables = {t: ts.read_version for t, ts in book.tables.items()}
    if any(v is None for v in tables.values()):
        return None
    unconfirmed = [t for t in tables if t not in core.confirmed]
    futures = [(t, submit(Pool.REQUESTS, is_latest, core.store, t, tables[t])) for t in unconfirmed]
    if not all(f.result() for _, f in futures):
        return None
    verdicts = {}
    for t, v in tables.items():
        assert v is not None
        read = any(t in rec.result.reads or t in rec.result.scans for rec in book.ops)
        why = "read-only transaction at one global version; no log version after its read (current.py)"
        verdicts[t] = TableVerdict(t, v, v, None, head.table_version(t), 0,
                                   {"R1": RuleCheck(False, True, why), "R2": RuleCheck(False, True, "not written"),
                                    "R3": RuleCheck(False, True, "not written")},
                                   read=read)
    outcome = ValidationOutcome(verdicts, core.policy)
    data = outcome.to_json()
    core.validation = data
    core.events.emit(ev.Validated(core.id, compatible=True, gvl_version=None, tables=data["tables"],
                                  failed_rule=None))
    return Published({}, {}, head)


def one_global_version(core: TxnCore) -> bool:
    """Whether every table the transaction holds was read at the version its one global-log head
    names (no marker anywhere; tables the log did not know are outside LV[I]'s isolation and are
    always compatible, so they do not count)."""
    head = core.book.head
    if head is None:
        return not core.book.tables
    for t, ts in core.book.tables.items():
        if ts.marker_version is not None:
            return False
        known = head.table_version(t)
        if known is not None and ts.read_version != known:
            return False
    return True


def from_log_version(a: TableAccess, state: GvlState) -> TableAccess:
    """``a`` as if read at the log's current version of its table (a one-snapshot reader's R1 looks
    only past it), ordered before ``state``'s successors (commits a plan wrote for a global version
    above ``state`` do not count: :attr:`TableAccess.ordered_before`); unchanged for a table the log
    does not know."""
    known = state.table_version(a.table)
    if known is None or a.read_version is None:
        return a
    return OneSnapshotRead(**{**dataclasses.asdict(a), "read_version": max(known, a.read_version),
                              "ordered_before": state.version})
