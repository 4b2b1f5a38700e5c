"""Every reason a transaction aborts outside R1-R3's own verdicts, in one table (pure).

R1-R3 themselves are judged and explained by :mod:`lv_core.protocol.validation`; this table holds
the other aborts: each entry names the rule code users see (``TransactionAborted.rule``), the
sentence (filled from named fields) and the "Help:" line saying what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lv_core.errors import TransactionAborted

__all__ = ["ABORTS", "AbortRule", "aborted"]


@dataclass(frozen=True)
class AbortRule:
    """One kind of abort: its rule code, the sentence template and what to do."""

    rule: str
    text: str
    help: str


ABORTS: dict[str, AbortRule] = {
    # LV[R]: waiting and redo
    "timeout": AbortRule("timeout", "timed out after {timeout:g}s waiting for transaction {on_txn} "
                         "(marker {table}@{version}).",
                         "commit or roll back that transaction, or retry."),
    "redo_exhausted": AbortRule("conflict", "gave up after {redos} redo(s): {table}@{version} by {on_txn} keeps "
                                "invalidating step {step} ({why}).",
                                "retry the transaction, or raise its retry bound."),
    "exposed_read": AbortRule("exposed_read", "a result this transaction already returned (step {step}, {op} on "
                              "{tables}) was changed by transaction {on_txn} committed at {table}@{version}; it "
                              "cannot be repaired by redo.", "run the transaction again."),
    "first_updater": AbortRule("conflict", "step {step} ({op}) rewrites rows of {table!r} ({files}) that transaction "
                               "{on_txn}, queued behind this one (marker {table}@{version}), changed first, and "
                               "that transaction already returned data this one changed: one of the two must "
                               "abort, and the later updater does (first updater wins, as in PostgreSQL).",
                               "retry the transaction once that one finished."),
    # LV[CT]: cycles and shifts
    "cycle_unbroken": AbortRule("deadlock", "could not break a dependency cycle after {shifts} marker shifts.",
                                "retry the transaction; if it keeps happening, fewer concurrent transactions "
                                "should touch these tables."),
    "shifts_exhausted": AbortRule("deadlock", "gave up after {shifts} marker shifts ({reason}).",
                                  "retry the transaction."),
    # preset delta: plain Delta optimistic concurrency
    "delta_conflict": AbortRule("conflict", "{op} on {table!r} conflicts with the concurrent commit at version "
                                "{version} ({why}); plain Delta aborts the statement.", "run it again."),
    # LV[I] beyond the validation verdicts
    "si_first_committer": AbortRule("R3", "{table}@{version} by {on_txn} changed what step {step} read before "
                                    "writing ({why}); under snapshot isolation the first committer wins (R3: "
                                    "lost update).", "retry the transaction."),
    "pending_above": AbortRule("R2", "{table}@{first} is held by a running LakeVilla transaction whose changes are "
                               "not known yet (R2: the version this write needs, {needs}, was taken and the next "
                               "free one lies above that transaction).", "retry once it finished."),
    "pending_taken": AbortRule("R2", "{table}@{first} is held by a running LakeVilla transaction whose changes are "
                               "not known yet (R2: the version this write needs is taken).",
                               "retry once it finished."),
    "foreign_lost_update": AbortRule("R3", "{table}@{version} was written by a writer that ignores the global log "
                                     "and {why} (R3: lost update).", "retry the transaction."),
    "part_missing": AbortRule("R2", "{what} (R2: the global version this commit would publish must hold that "
                              "multi-table commit whole).", "retry once it finished."),
}


def aborted(kind: str, details: dict[str, Any] | None = None, **fields: Any) -> TransactionAborted:
    """The :class:`TransactionAborted` for abort ``kind`` of :data:`ABORTS`, its sentence filled from ``fields``."""
    r = ABORTS[kind]
    return TransactionAborted(f"{r.text.format(**fields)} Help: {r.help}", r.rule, details=details)
