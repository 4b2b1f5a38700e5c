"""Hidden versions: probing table logs beyond the global version log (I/O side of #4.2).

Writers that ignore the global log (plain Delta, LV[R]-only transactions) and pending or freed
markers of LakeVilla transactions occupy Delta versions the log does not know. At validation a
transaction probes each table's log above the log version (GET ``l + 1``, ``l + 2``, ... until one
is missing, classifying each as commit / pending marker / freed marker) and hands what it found to
the pure :func:`lv_core.protocol.validation.derive`. No LIST is used.

Tables are probed only when a rule can depend on what lies beyond the log version: written
tables always, read-only tables only when R1 applies to them. Tables the log does not know are
always compatible: read-only ones are not probed, written ones are probed from their read version
(to find the next free version).
"""

from __future__ import annotations

import dataclasses
import functools
from concurrent.futures import Future, wait
from typing import Iterable, Mapping, Sequence

from lv_core import concurrency
from lv_core.delta.actions import decode_commit
from lv_core.delta.log import DeltaLog
from lv_core.errors import NotFound
from lv_core.protocol.conflicts import OpFootprint, PredecessorCommit, first_conflict
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.markers import VersionState, read_log_version, read_version, unfinished_part
from lv_core.protocol.validation import Change, LogTail, OneSnapshotRead, Policy, TableAccess, TableInputs, derive
from lv_core.storage.base import ObjectStore

# Pools (lv_core.concurrency): a probe (:func:`probe_tail`) waits on the read of the version after a
# transaction's own marker, a leaf request on REQUESTS; so probes run on TASKS, both the early ones
# (:func:`probe_early`) and :func:`collect`'s. A table's rule inputs are derived from an early probe
# as its continuation (:func:`lv_core.concurrency.then`): no task waits on another TASKS future.


def probe_tail(store: ObjectStore, table: str, start: int, *, own_txn: str | None = None,
               own_marker: int | None = None, markers: bool = True) -> LogTail:
    """GET and classify every version above ``start`` until one is missing (a part of an unfinished
    multi-table commit outside the global log counts as a pending marker).

    Cost: ``d + 1`` GETs where ``d`` is the number of versions above ``start``.
    A version written by ``own_txn`` is classified "own" (neither hidden nor foreign). At
    ``own_marker`` (the transaction's own marker) only the log is read: its marker object is ours.
    Without ``markers`` the probe ends at the log's tail (markers reserve versions only past it): a
    table only read, or written behind its own marker, needs no marker above the tail.

    Raises:
        DeltaLogError: a version is not a valid commit file.
        StorageError: the store failed.
    """
    kinds: list[str] = []
    v = start + 1
    ahead: dict[int, Future[VersionState | None]] = {}
    while True:
        if v == own_marker:
            if not markers:  # the version after ours is read at the same time (one round trip for both)
                ahead[v + 1] = concurrency.submit(concurrency.Pool.REQUESTS, read_log_version, store, table, v + 1)
            logged = read_log_version(store, table, v)
            if logged is None:
                kinds.append("own")
                v += 1
                continue
        if not markers:
            pending = ahead.pop(v, None)
            found = pending.result() if pending is not None else read_log_version(store, table, v)
            if found is None:
                return LogTail(start, tuple(kinds))
            st = found
        else:
            try:
                st = read_version(store, table, v, fill=True)  # a given-up marker's version enters the log
            except NotFound:
                return LogTail(start, tuple(kinds))
        if own_txn is not None and st.txn == own_txn:
            kinds.append("own")
        elif st.parts and unfinished_part(store, table, st) is not None:
            kinds.append("marker")  # part of a multi-table commit not finished elsewhere: still pending
        else:
            kinds.append(st.kind)
        v += 1


def _tail_start(access: TableAccess, l: int | None, store: ObjectStore) -> int | None:
    """Where to probe from, or None when no probe is needed (decided by the caller)."""
    if access.marker is not None:  # from the marker's own version: a writer that ignores markers may take it
        return max(access.marker - 1, l) if l is not None else access.marker - 1
    if l is not None:
        return l
    if access.r is not None:
        return access.r
    return DeltaLog(store, access.table).latest_version_by_probe(access.hint)


def probe_early(store: ObjectStore, accesses: Iterable[TableAccess], *,
                own_txn: str | None = None) -> dict[str, tuple[int, Future[LogTail]]]:
    """Start probing, in the background, every written table with a marker from just below the
    marker: where :func:`collect` starts its probe unless the global log names a version of the
    table at or past the marker (a writer that ignores markers took it); such a probe is redone.
    Lets a validator read the global log head and the tables' tails in one round trip.
    Returns table -> (probe start, future)."""
    out: dict[str, tuple[int, Future[LogTail]]] = {}
    for a in accesses:
        if a.written and a.marker is not None:
            start = a.marker - 1
            out[a.table] = (start, concurrency.submit(concurrency.Pool.TASKS, probe_tail, store, a.table, start,
                                                      own_txn=own_txn, own_marker=a.marker, markers=False))
    return out


def changes_since(store: ObjectStore, inp: TableInputs, footprints: Sequence[OpFootprint], *,
                  own_txn: str | None = None, ordered_before: int | None = None) -> tuple[Change, ...]:
    """The versions in ``(r, h]`` of ``inp``'s table that changed what ``footprints`` read there
    (file-level R1): a removed file it read or rewrote, an added file its predicate may match, a
    schema/protocol change (:func:`lv_core.protocol.conflicts.first_conflict`, as redo uses it), or
    a pending marker (content unknown). Freed markers and the transaction's own versions are skipped,
    and so, for a read-only transaction read at one global version (``ordered_before``: the head it is
    validated against), are commits a plan wrote for a global version above that head, not published yet
    (their ``lakevilla.gvl``): that version orders them after the reader.

    Cost: one GET per version in ``(r, h]`` (none when ``r >= h``), in parallel.
    """
    assert inp.r is not None and inp.h is not None
    ops = [f for f in footprints if f.touches(inp.table)]
    out: list[Change] = []
    versions = range(inp.r + 1, inp.h + 1)  # (read in parallel: one round trip, not one per version)
    states = concurrency.gather_or_inline(concurrency.Pool.REQUESTS, lambda v: read_version(store, inp.table, v),
                                          versions, limit=8)
    for v, st in zip(versions, states, strict=True):
        if own_txn is not None and st.txn == own_txn:
            continue
        if st.pending or (st.parts and unfinished_part(store, inp.table, st) is not None):
            out.append(Change(v, st.txn, "pending"))
            continue
        if st.kind != "commit":
            continue
        pc = PredecessorCommit(inp.table, v, st.txn, decode_commit(st.raw, version=v, table=inp.table))
        if ordered_before is not None and _publishing_after(pc, ordered_before):
            continue
        c = first_conflict(ops, [pc])
        if c is not None:
            out.append(Change(v, st.txn, c.why, c.files))
    return tuple(out)


def _publishing_after(pc: PredecessorCommit, version: int) -> bool:
    """Whether ``pc`` is a table commit of a plan whose global version, above ``version``, will publish it."""
    return any(isinstance(g := lv.get("gvl"), int) and not isinstance(g, bool) and g > version
               for lv in pc.lakevilla if lv.get("kind") == "commit")


def _ordered_before(access: TableAccess) -> int | None:
    """The global version a one-snapshot reader is ordered before (:class:`OneSnapshotRead`), else None."""
    return access.ordered_before if isinstance(access, OneSnapshotRead) else None


def needs_tail(access: TableAccess, l: int | None, policy: Policy, txn_writes: bool) -> bool:
    """Whether validating ``access`` needs its log probed (pure)."""
    if l is None:
        return access.written and access.marker is None
    return access.written or (access.read and policy.r1_applies(txn_writes))


def collect(
    store: ObjectStore,
    gvl: GvlState,
    accesses: Iterable[TableAccess],
    policy: Policy,
    *,
    own_txn: str | None = None,
    parallel: int = 8,
    footprints: Sequence[OpFootprint] | None = None,
    early: Mapping[str, tuple[int, Future[LogTail]]] | None = None,
) -> list[TableInputs]:
    """The rule inputs of every table, with as few requests as possible (no LIST).

    Per table, with ``l`` = ``gvl``'s version of it and ``d`` = versions found above the probe start:

    - written, no marker, in the log: ``d + 1`` GETs from ``l``;
    - written, with marker, in the log: ``d + 1`` GETs from ``max(marker, l)`` (versions below the
      marker are resolved before validation and are not read again);
    - read-only, in the log: ``d + 1`` GETs from ``l`` when R1 applies, else nothing;
    - not in the log: nothing, except written without marker: ``d + 1`` GETs from its read
      version (or from ``hint`` / the latest version found by HEAD probes when it has none).

    With ``policy.r1_files`` and ``footprints`` (what each operation read), a read table whose
    ``r < h - slack`` also gets :attr:`TableInputs.changes` (:func:`changes_since`: one GET per
    version in ``(r, h]``), so R1 judges what was read, not version numbers.

    Tables are probed concurrently (up to ``parallel`` at once, on TASKS); a probe :func:`probe_early`
    started from the same version is used instead of probing again (the table's inputs are derived
    as its continuation). Call while holding the validation lock
    with ``gvl`` read under it (a read-only transaction validates without it).

    Raises:
        ValueError: an access is inconsistent (read without read version).
        TableNotFound: a table unknown to the log, without read version or hint, does not exist.
        DeltaLogError, StorageError: reading a table's log failed.
    """
    items = list(accesses)
    txn_writes = any(a.written for a in items)

    def start_of(access: TableAccess) -> int | None:
        """Where ``access``'s table is probed from (None: not probed)."""
        l = gvl.table_version(access.table)
        return _tail_start(access, l, store) if needs_tail(access, l, policy, txn_writes) else None

    def finish(access: TableAccess, tail: LogTail | None) -> TableInputs:
        l = gvl.table_version(access.table)
        if tail is None and access.written and not needs_tail(access, l, policy, txn_writes):
            assert access.marker is not None  # a written table the log does not know, with a marker: compatible
            tail = LogTail(access.marker)
        inp = derive(access, l, tail)
        if (policy.r1_files and footprints is not None and inp.read and inp.r is not None and inp.h is not None
                and inp.l is not None and policy.r1_applies(txn_writes) and inp.r < inp.h - policy.slack):
            inp = dataclasses.replace(inp, changes=changes_since(store, inp, footprints, own_txn=own_txn,
                                                                 ordered_before=_ordered_before(access)))
        return inp

    def one(access: TableAccess) -> TableInputs:
        start = start_of(access)
        tail = None if start is None else probe_tail(store, access.table, start, own_txn=own_txn,
                                                     own_marker=access.marker,
                                                     markers=access.written and access.marker is None)
        return finish(access, tail)

    def reused(access: TableAccess) -> Future[LogTail] | None:
        """The early probe of ``access``'s table when it started where this probe would."""
        ahead = (early or {}).get(access.table)
        return ahead[1] if ahead is not None and needs_tail(access, gvl.table_version(access.table), policy,
                                                             txn_writes) and ahead[0] == start_of(access) else None

    if not early and (parallel <= 1 or len(items) <= 1):
        return [one(a) for a in items]
    # The tables with an early probe go on from it as soon as it ends; the others are probed now.
    continued = {i: concurrency.then(concurrency.Pool.TASKS, f, functools.partial(finish, a))
                 for i, a in enumerate(items) if (f := reused(a)) is not None}
    rest = [a for i, a in enumerate(items) if i not in continued]
    try:
        probed = iter(concurrency.gather(concurrency.Pool.TASKS, one, rest, limit=max(1, parallel)))
    finally:
        wait(continued.values())  # none left running behind the caller, even after an error
    return [continued[i].result() if i in continued else next(probed) for i in range(len(items))]


__all__ = ["changes_since", "collect", "needs_tail", "probe_early", "probe_tail"]
