"""The last stage: finishing a published commit (clean-up, caches, the result), aborting (free the
markers, delete what nothing references), or ending undecidable (decided, completion left to roll
forward)."""

from __future__ import annotations

import contextlib
import logging
import time

from lv_core import events as ev
from lv_core.delta.actions import decode_commit
from lv_core.errors import LvError
from lv_core.protocol import layout
from lv_core.protocol.lease import keeper
from lv_core.txn import cleaner
from lv_core.txn.access import free_own_marker
from lv_core.txn.core import TxnCore
from lv_core.txn.publish import Published
from lv_core.txn.result import CommitResult
from lv_core.txn.waiting import exposed_markers

__all__ = ["abort", "end_undecidable", "finish"]

log = logging.getLogger("lv_core.txn")


def _cleanup(core: TxnCore) -> None:
    """Delete what the transaction no longer needs: staged files no published commit references,
    the sublog, the decision; the lease last. Runs after every marker was replaced, in the background
    (:mod:`lv_core.txn.cleaner`: nothing waits for these deletes), so a crash leaves only leftovers
    that `lv recover` removes."""
    book = core.book
    if book.edges_writer:  # an edges object write in flight: it would land after its delete
        exposed_markers(core, 5.0)
    lease_written = keeper().unregister(core.id)
    keys = book.unpublished_adds()
    keys += [layout.sublog_key(core.id, step) for step in sorted(book.sublog_steps)]
    if book.decision_written:
        keys.append(layout.decision_key(core.id))
    if book.edges_written:
        keys.append(layout.edges_key(core.id))
    last = layout.lease_key(core.id) if lease_written else None
    if keys or last:
        cleaner.submit(core.store, core.id, keys, last)


def finish(core: TxnCore, published: Published, read_versions: dict[str, int]) -> CommitResult:
    """Everything is published: the transaction is committed whatever happens below. A failed
    clean-up leaves leftovers for `lv recover`, it does not turn the commit into an error."""
    book = core.book
    elapsed = time.monotonic() - core.t0
    requests = core.requests()  # the commit path's requests (the clean-up runs in the background)
    if core.markers or core.iso:
        try:
            _cleanup(core)
        except LvError as e:
            keeper().unregister(core.id)
            log.warning("transaction %s committed; its clean-up failed (lv recover removes the "
                        "leftovers): %s", core.id, e)
        nets = book.writes(list(published.versions))
        for t, v in published.versions.items():
            if book.tables[t].pending:
                continue  # published past unresolved markers (blind append): its snapshot is not final yet
            with contextlib.suppress(Exception):  # a cache: the next read refreshes it
                core.services.after_commit(t, v, book.tables[t].base, nets.get(t, []))
    if published.gvl is not None:
        core.gvl_version = published.gvl.version
    core.state = "committed"
    core.events.emit(ev.Requests(core.id, counts=requests))
    core.events.emit(ev.Committed(core.id, versions=dict(published.versions), redo_count=book.redo_count,
                                  elapsed_s=elapsed))
    return CommitResult(txn=core.id, versions=dict(published.versions), read_versions=read_versions,
                        freed=dict(published.freed), redo_count=book.redo_count, waits=book.waits,
                        elapsed_s=elapsed, gvl_version=core.gvl_version, validation=dict(core.validation),
                        requests=requests)


def end_undecidable(core: TxnCore, reason: str) -> None:
    """The commit is decided (recorded) but could not be completed here: stop renewing the lease so
    that, once it runs out, the next transaction on these tables (or `lv recover`) rolls it forward.
    Nothing is deleted: the decided files are needed."""
    keeper().unregister(core.id)
    core.state = "unknown"
    core.events.emit(ev.Aborted(core.id, reason=f"{reason} (decided: completed by roll forward once the "
                                "lease runs out)", rule="unknown"))


def abort(core: TxnCore, reason: str, rule: str) -> None:
    """Free every marker not published and delete what no published commit references; the state
    ends ``"aborted"``, or ``"unknown"`` when a commit write's outcome cannot be learnt.

    A marker write whose outcome cannot be learnt leaves its table "unknown": then nothing is
    deleted and the lease is left to run out (the next transaction there resolves the marker,
    `lv recover` the files). A commit found to have landed (a lost response) is kept: the
    transaction then ends "unknown", never with its committed files deleted."""
    book = core.book
    unknown: list[str] = []
    landed: list[str] = []
    for ts in book.held():
        try:
            st = free_own_marker(core, ts, rule)
        except LvError:
            unknown.append(ts.name)
            continue
        assert ts.marker_version is not None
        if st is None:
            book.freed[ts.name] = ts.marker_version
            core.events.emit(ev.MarkerFreed(core.id, table=ts.name, version=ts.marker_version, reason=rule))
        elif st.kind == "commit" and st.txn == core.id:  # our commit landed after all
            book.mark_published(ts.name, ts.marker_version, decode_commit(st.raw, version=st.version, table=ts.name))
            landed.append(ts.name)
    requests = core.requests()
    if unknown:
        keeper().unregister(core.id)
    else:
        try:
            _cleanup(core)
        except LvError:
            keeper().unregister(core.id)  # leftovers: `lv recover` removes them
    undecided = bool(landed) or any(t in book.attempted for t in unknown)
    core.state = "unknown" if undecided else "aborted"
    if book.published and not landed:
        reason += (" (committed before the abort, as LV[R] alone commits table by table: "
                   f"{', '.join(f'{t}@{v}' for t, v in sorted(book.published.items()))})")
    core.events.emit(ev.Requests(core.id, counts=requests))
    core.events.emit(ev.Aborted(core.id, reason=reason, rule=rule if not undecided else "unknown"))
