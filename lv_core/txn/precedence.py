"""First updater wins, across markers: an operation gives way to a transaction queued behind it.

Markers order transactions per table by their first write, not per row. When a transaction queued
behind ours (its marker above ours) already rewrote a file that our operation now rewrites, and a
result it returned came from a file we rewrote, one of the two must abort: after our commit it could
not be redone (``exposed_read``). PostgreSQL blocks the later updater on the row lock and aborts it
(``could not serialize access due to concurrent update``); we do the same instead of letting the
earlier updater fail at its commit. The queued transaction tells what it did in its marker's
footprint (:class:`~lv_core.protocol.markers.Footprint`). Checked only under policies with
file-level R1 (``serializable``, ``write_serializable``), for an operation that rewrites files of a
table whose marker we already hold: one GET per marker object above ours (usually one, not found).
"""

from __future__ import annotations

from lv_core.errors import NotFound
from lv_core.protocol.aborts import aborted
from lv_core.protocol.conflicts import FirstUpdater, first_updater
from lv_core.protocol.layout import marker_key
from lv_core.protocol.markers import classify
from lv_core.txn.core import TxnCore, removed_files
from lv_core.txn.ops import Operation, OpResult

__all__ = ["give_way"]

def _queued_behind(core: TxnCore, table: str, start: int, now: set[str],
                   ours: dict[str, set[str]]) -> FirstUpdater | None:
    """The first transaction queued behind our marker ``start`` on ``table`` we must give way to."""
    for v in range(start + 1, start + 1 + core.settings.tuning.precedence_probes):
        try:
            got = core.store.get(marker_key(table, v))
        except NotFound:
            return None
        st = classify(v, got.data, got.etag, filled=False)
        fp = st.marker.footprint if st.pending and st.marker is not None else None
        if fp is None or st.txn == core.id:
            continue
        hit = first_updater(table, now, ours, fp.reads, fp.removes, st.txn or "?", v)
        if hit is not None:
            return hit
    return None


def give_way(core: TxnCore, op: Operation, result: OpResult, step: int) -> None:
    """Abort (rule ``conflict``) when ``op``, about to be recorded at ``step``, rewrites files that a
    transaction queued behind ours changed first and whose returned results depend on our changes.

    Raises:
        TransactionAborted: ``first_updater``.
    """
    if not (core.iso and core.markers and core.policy.r1_files) or op.blind:
        return
    held = [t for t in op.tables if core.book.tables[t].marker_version is not None and result.removes.get(t)]
    if not held:
        return
    ours = removed_files([rec.result for rec in core.book.ops] + [result])
    for t in held:
        marker = core.book.tables[t].marker_version
        assert marker is not None
        hit = _queued_behind(core, t, marker, {r.path for r in result.removes[t]}, ours)
        if hit is not None:
            files = ", ".join(hit.files[:3]) + (", ..." if len(hit.files) > 3 else "")
            raise aborted("first_updater", {"table": t, "txn": hit.txn, "version": hit.version,
                                            "files": list(hit.files), "read": list(hit.doomed_by)},
                          step=step, op=op.name, table=t, on_txn=hit.txn, version=hit.version, files=files)
