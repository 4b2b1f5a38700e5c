"""Module #3 for one transaction: its dependency edges, cycle checks and marker shifts, and waiting
for the markers before its own to resolve (freeing expired ones on the way).

Rules (paper section 4): expose the predecessors in the transaction's edges object (II), read the
edges objects of those waited on (III), and shift when new edges close cycles (every table where they
enter us in one shift) or a wait lasts too long (IV).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping

from lv_core import concurrency
from lv_core import events as ev
from lv_core.delta.actions import decode_commit
from lv_core.errors import NotFound, PreconditionFailed
from lv_core.protocol.aborts import aborted
from lv_core.protocol.conflicts import PredecessorCommit
from lv_core.protocol.dag import Edge, closes_cycle, edges_from_json, shift_tables
from lv_core.protocol.edges import TxnEdges, read_edges, write_edges
from lv_core.protocol.markers import (
    VersionState,
    encode_freed,
    fill_version,
    place_marker,
    read_log_version,
    read_version,
    unfinished_part,
    update_marker,
)
from lv_core.protocol.recovery import resolve_expired
from lv_core.testing import crashpoint
from lv_core.txn.core import TxnCore, out_edges
from lv_core.txn.state import TableState

__all__ = ["Restart", "add_edges", "expose_for_commit", "expose_later", "expose_predecessors", "exposed_markers",
           "predecessor", "resolve_all", "shift", "written_tables"]

log = logging.getLogger("lv_core.txn")



class Restart(Exception):
    """Markers moved while waiting (a shift): recompute what to wait for."""


def add_edges(core: TxnCore, ts: TableState, seen: Mapping[tuple[str, int], VersionState] | None = None) -> None:
    """LV[CT]: the pending markers before ours are new outgoing edges (rules II and IV). ``seen``:
    marker states (table, version) just read by the caller, used by the first cycle search."""
    book = core.book
    if not core.ct:
        return
    new = [Edge(core.id, x, ts.name, pv) for pv, x in sorted(ts.pending.items())
           if x and (x, ts.name) not in book.preds]
    for e in new:
        book.preds[(e.dst, e.table)] = e.version
        core.events.emit(ev.EdgeAdded(core.id, to_txn=e.dst, table=e.table, version=e.version))
    if single_marker_edges(core):
        return  # one marker: no cycle needs our search nor our edges object (single_marker_edges)
    if new:
        _break_cycles(core, new, seen or {})
    if new or (book.preds and not book.edges_written):  # (edges kept back while we held one marker)
        expose_predecessors(core)


def single_marker_edges(core: TxnCore) -> bool:
    """True while the transaction holds a marker in one table only: then it neither looks for cycles
    nor exposes its edges (issue 38; docs/PROTOCOL.md, "Special cases").

    Every cycle through a transaction T that holds one marker (table ``t``, version ``m``) enters T
    from some X holding ``t`` above ``m`` and leaves it to some Y holding ``t`` below ``m`` (T's only
    edges are in ``t``). Y's marker was pending since before T claimed, and X claimed after T, so X's
    own edges name Y (``X -> Y`` at ``t``): the cycle without T exists too, and whoever closed it
    finds it without T's edges (by induction every one-marker node on a cycle can be skipped; a
    cycle of one-marker nodes only lies in one table, where edges go strictly down: none). A shift
    breaking that shorter cycle breaks ours as well (it inverts an edge shared by both, or ``X -> Y``
    by moving Y above X, and then above T). The search is progress, not isolation: what commits is
    decided by the markers, settling and validation, never by it."""
    return len(core.book.held()) <= 1


def _marker_edges(core: TxnCore, node: str, via: Edge | None, seen: Mapping[tuple[str, int], VersionState],
                  known: dict[str, TxnEdges | None]) -> list[Edge]:
    """Rule III: ``node``'s outgoing edges as seen from its marker at ``via`` (its edges object, read
    once per search into ``known``). A marker state in ``seen`` (read just before) that shows ``node``
    no longer pending there means it waits for nobody there; a marker written before edges objects
    existed carries its edges itself."""
    if via is None:
        return []
    legacy: list[Edge] = []
    st = seen.get((via.table, via.version))
    if st is not None:
        if not st.pending or st.txn != node or st.marker is None:
            return []  # resolved (or not its marker any more)
        legacy = edges_from_json(node, st.marker.predecessors)
    if node not in known:
        known[node] = read_edges(core.store, node)
    got = known[node]
    out = got.from_marker(via.table, via.version) if got is not None else []
    return out + [e for e in legacy if e not in out]


def _cycles_through(core: TxnCore, new_edges: list[Edge], seen: Mapping[tuple[str, int], VersionState] | None = None,
                    *, first_only: bool = False) -> list[list[Edge]]:
    """The live cycles ``new_edges`` close, one per table where they enter us (empty: none).

    All of them, not only the first, so that one marker shift breaks them all: a transaction that
    overtook us after we placed markers in m tables waits behind us in each of them, and a shift of
    one table per cycle found used up ``max_shifts`` before m shifts (benchmarks/multitable at 0 ms:
    ``deadlock`` aborts, since blind appends wait at commit and a stale edge into us no longer hides
    the rest). Each next search leaves out the edges into us in the tables found so far (the shift
    inverts them), so there are at most as many searches as tables held; the edges objects read are
    kept for the next search.

    Edges objects outlive what they say (issue 38: waiters shifted for dead ones again and again,
    until ``max_shifts`` aborted them as deadlocked): one names our marker from before a shift until
    its owner rewrites it (an edge into us counts only at a marker we hold now), and an ended
    transaction's is deleted in the background after its markers were freed. So before a cycle is
    reported, every edge on it into another transaction is checked against the marker it points at
    (2 GETs each, only when a cycle was found; ``seen`` states count): an edge to a marker no longer
    pending is dropped and the search runs again without it."""
    seen = seen or {}
    known = _edges_ahead(core, {e.dst for e in new_edges if not (
        (st := seen.get((e.table, e.version))) is not None and (not st.pending or st.txn != e.dst))})
    held = {t: ts.marker_version for t, ts in core.book.tables.items() if ts.marker_version is not None}
    live: dict[Edge, bool] = {}
    entered: set[str] = set()  # tables where a cycle found enters us
    cycles: list[list[Edge]] = []

    def out(node: str, via: Edge | None) -> list[Edge]:
        return [e for e in _marker_edges(core, node, via, seen, known)
                if live.get(e, True)
                and (e.dst != core.id or (held.get(e.table) == e.version and e.table not in entered))]

    while True:
        cycle = closes_cycle(core.id, [e for e in new_edges if live.get(e, True)], out)
        if cycle is None:
            return cycles
        for e in cycle:
            if e.dst != core.id and e not in live:
                live[e] = _pending_at(core, e, seen)
        if not all(live.get(e, True) for e in cycle):
            continue
        cycles.append(cycle)
        into = shift_tables(core.id, cycle) - entered
        if first_only or not into:
            return cycles
        entered |= into


def _edges_ahead(core: TxnCore, first: set[str], depth: int = 8) -> dict[str, TxnEdges | None]:
    """The edges objects of the transactions ``first`` and of those their edges reach (up to ``depth``
    steps, as the cycle search goes), one level at a time, each level's objects read in parallel: the
    search then reads nothing itself (it used to read them one after another, 1 round trip each)."""
    known: dict[str, TxnEdges | None] = {}
    level = sorted(first - {core.id})
    for _ in range(depth):
        if not level:
            break
        known.update(zip(level, concurrency.gather(concurrency.Pool.REQUESTS, lambda x: read_edges(core.store, x),
                                                   level), strict=True))
        level = sorted({e.dst for x in level if (got := known[x]) is not None for e in got.edges} - set(known)
                       - {core.id})
    return known


def _pending_at(core: TxnCore, e: Edge, seen: Mapping[tuple[str, int], VersionState]) -> bool:
    """Is ``e.dst``'s marker at ``e.table@e.version`` still pending (so that ``e.src`` waits for it)?"""
    st = seen.get((e.table, e.version))
    if st is None:
        try:
            st = read_version(core.store, e.table, e.version)
        except NotFound:
            return False
    return st.pending and st.txn == e.dst


def _note_cycle(core: TxnCore, cycle: list[Edge]) -> None:
    core.book.cycles.append(cycle)
    core.events.emit(ev.CycleFound(core.id, edges=tuple((e.src, e.dst, e.label) for e in cycle)))


def _break_cycles(core: TxnCore, new_edges: list[Edge], seen: Mapping[tuple[str, int], VersionState]) -> None:
    """Before waiting behind ``new_edges``: if they close cycles, shift our markers where the cycles
    enter us, all in one shift (rule IV)."""
    tables_held = core.book.tables
    for _ in range(core.settings.max_shifts):
        cycles = _cycles_through(core, new_edges, seen)
        seen = {}  # after a shift, markers are read afresh
        tables = {t for c in cycles for t in shift_tables(core.id, c)
                  if t in tables_held and any(e.dst == core.id and e.table == t
                                              and e.version == tables_held[t].marker_version for e in c)}
        if not tables:
            return  # no cycle, or one through a marker of ours that no longer exists: already broken
        for c in cycles:
            _note_cycle(core, c)
        new_edges = shift(core, tables, "cycle")
    raise aborted("cycle_unbroken", {"cycles": len(core.book.cycles)}, shifts=core.settings.max_shifts)


def shift(core: TxnCore, tables: set[str], reason: str) -> list[Edge]:
    """Marker shift: free our markers in ``tables`` and claim new ones at later versions.

    Our reads keep their versions (repeatable reads); the versions between the old base and the
    new marker become predecessors to wait for and check at commit. Returns the new edges.

    Every table's marker moves at once (tables in parallel, each reading the versions in between
    after placing): a transaction placing markers meanwhile, in the order we placed ours, could
    otherwise queue behind our new marker in one table and ahead of it in the next, a cycle that
    needs another shift (benchmarks/multitable at 0 ms: newcomers kept a shifting transaction chasing them until
    ``max_shifts`` aborted it).
    """
    book = core.book
    if len(book.shifts) >= core.settings.max_shifts:
        raise aborted("shifts_exhausted", {"shifts": len(book.shifts)}, shifts=len(book.shifts), reason=reason)

    got: dict[str, tuple[int, int, int]] = {}  # table -> (old version, new version, attempts)
    between: dict[str, dict[int, str]] = {}  # table -> pending markers of others below the new one

    def move(t: str) -> None:
        ts = book.tables[t]
        assert ts.marker_version is not None and ts.marker_etag is not None
        old = ts.marker_version
        with contextlib.suppress(PreconditionFailed):
            update_marker(core.store, t, old, ts.marker_etag, encode_freed(core.id, "shift"))
        v, etag, attempts = place_marker(core.store, t, old + 1, core.marker_info())
        ts.marker_version, ts.marker_etag, ts.logical = v, etag, True  # ours, even if another table fails
        got[t] = (old, v, attempts)
        found = {}
        for pv in range(old + 1, v):
            st = read_version(core.store, t, pv)
            if st.pending and st.txn and st.txn != core.id:
                found[pv] = st.txn
        between[t] = found

    order = sorted(tables)
    if concurrency.may_wait(concurrency.Pool.TASKS):
        concurrency.gather(concurrency.Pool.TASKS, move, order)
    else:  # a TASKS (or REQUESTS) task may not wait on TASKS: one table after another
        for t in order:
            move(t)
    new_edges: list[Edge] = []
    moved: dict[str, tuple[int, int]] = {}
    for t in order:
        ts = book.tables[t]
        old, v, attempts = got[t]
        core.events.emit(ev.MarkerFreed(core.id, table=t, version=old, reason="shift"))
        core.services.logs.note_claimed(t, v)
        for pv, x in sorted(between[t].items()):
            ts.pending[pv] = x
            book.preds[(x, t)] = pv
            new_edges.append(Edge(core.id, x, t, pv))
            core.events.emit(ev.EdgeAdded(core.id, to_txn=x, table=t, version=pv))
        moved[t] = (old, v)
        core.events.emit(ev.MarkerPlaced(core.id, table=t, version=v, attempts=attempts, shift=True))
    book.shifts.append({"tables": {t: list(m) for t, m in moved.items()}, "reason": reason, "ts": time.time()})
    core.events.emit(ev.Shifted(core.id, moves=tuple((t, a, b) for t, (a, b) in moved.items()), reason=reason))
    return new_edges


def expose_predecessors(core: TxnCore) -> None:
    """Rule II: our current outgoing edges, and the markers we hold, in our edges object (one PUT,
    whatever the number of tables held; :mod:`lv_core.protocol.edges`). One PUT at a time: the last
    one landed names the latest state."""
    with core.edges_write:
        book = core.book
        holds = {ts.name: ts.marker_version for ts in book.held() if ts.marker_version is not None}
        book.edges_written = True  # tried: clean-up deletes it
        book.exposed_holds, book.exposing = None, holds
        try:
            write_edges(core.store, core.id, out_edges(core.id, book), holds)
            book.exposed_holds = holds
        finally:
            book.exposing = None


def expose_later(core: TxnCore) -> None:
    """LV[CT] outside the global log, after a marker placement: expose the markers held in the
    background (a recoverer finds the parts of a multi-table commit through them, see
    :func:`lv_core.txn.publish.prepare`). Writes coalesce: one runs at a time, with the latest state."""
    with core.edges_cv:
        core.book.edges_dirty = True
        if core.book.edges_writer:
            return
        core.book.edges_writer = True
    concurrency.submit(concurrency.Pool.TASKS, _expose_loop, core)  # PUTs only, one at a time


def written_tables(core: TxnCore) -> set[str]:
    """Tables the transaction's recorded operations changed."""
    return {t for rec in core.book.ops for t in (*rec.result.adds, *rec.result.removes)
            if rec.result.adds.get(t) or rec.result.removes.get(t)}


def expose_for_commit(core: TxnCore, placed: str | None = None) -> None:
    """LV[CT] outside the global log: keep the edges object naming the markers a multi-table commit
    will write at (:func:`expose_later`). After placing a marker on ``placed`` once something is
    written (the write that follows overlaps the PUT), and after an operation when two or more
    tables are written and one of their markers is not named yet. Read-only transactions write none."""
    if core.iso or not core.ct:
        return
    book = core.book
    if book.edges_dirty:
        return  # a write with the latest state is coming
    written = written_tables(core)
    exposed = book.exposing or book.exposed_holds or {}  # what the write in flight, else the last one, names
    if placed is not None:
        if written and exposed.get(placed) != book.tables[placed].marker_version:
            expose_later(core)
    elif len(written) > 1 and any(exposed.get(t) != book.tables[t].marker_version for t in written):
        expose_later(core)


def _expose_loop(core: TxnCore) -> None:
    book = core.book
    while True:
        with core.edges_cv:
            if not book.edges_dirty:
                book.edges_writer = False
                core.edges_cv.notify_all()
                return
            book.edges_dirty = False
        try:
            expose_predecessors(core)
        except Exception as e:  # best effort: without it the commit records a decision first
            log.debug("transaction %s: exposing its markers failed: %s", core.id, e)


def exposed_markers(core: TxnCore, timeout_s: float) -> dict[str, int] | None:
    """The markers our edges object names once background writes ended (None: unknown, or still
    writing after ``timeout_s``)."""
    with core.edges_cv:
        if not core.edges_cv.wait_for(lambda: not core.book.edges_writer, timeout=timeout_s):
            return None
    with core.edges_write:
        return core.book.exposed_holds


def _check_while_waiting(core: TxnCore, ts: TableState, v: int, on_txn: str, waited_s: float) -> None:
    """While waiting behind ``on_txn`` at ``ts.name@v``: shift if a cycle shows up (rule IV), or
    pre-emptively after waiting too long; raises Restart when markers moved."""
    if single_marker_edges(core):
        return  # no other table to shift, and no cycle needs our search (single_marker_edges)
    if not core.shift_lock.acquire(blocking=False):
        return  # another table's waiter is shifting right now
    try:
        book = core.book
        cycles = _cycles_through(core, [Edge(core.id, on_txn, ts.name, v)])
        tables = {t for c in cycles for t in shift_tables(core.id, c) if t in book.tables and t != ts.name}
        if tables:
            for c in cycles:
                _note_cycle(core, c)
            shift(core, tables, "cycle")
            expose_predecessors(core)
            raise Restart()
        if waited_s >= core.settings.shift_after():
            others = {o.name for o in book.held() if o.name != ts.name}
            if others and len(book.shifts) < core.settings.max_shifts:
                shift(core, others, "waited too long")
                expose_predecessors(core)
                raise Restart()
    finally:
        core.shift_lock.release()


def _poll(core: TxnCore, ts: TableState, v: int, last: VersionState | None, polls: int) -> VersionState:
    """What version ``v`` is now. While it is a pending marker (known from the last poll, or from the
    snapshot read at first access), only the log is read (1 GET); the marker object (edges, given up?)
    every fourth round."""
    owner = last.txn if last is not None and last.pending else (ts.pending.get(v) if last is None else None)
    if owner and polls % 4:
        logged = read_log_version(core.store, ts.name, v)
        if logged is not None:
            return logged
        if last is not None:
            return last
        return VersionState(v, "marker", "", txn=owner, filled=False)  # known pending at access
    return read_version(core.store, ts.name, v)


def _resolve_predecessors(core: TxnCore, ts: TableState, deadline: float) -> list[PredecessorCommit]:
    """Wait until every version between the base and the marker is in the Delta log; return them.

    Versions are taken in order, so when one is reached every version below it is in the log: a
    given-up marker's version is then written as an empty commit here (the log never has a gap)."""
    out: list[PredecessorCommit] = []
    s = core.settings
    assert ts.marker_version is not None
    versions = sorted(set(ts.pending) | set(range(ts.base.version + 1, ts.marker_version)))
    logged, missed = _read_ahead(core, ts.name, versions, first=_landed_lead(ts, versions))
    for i, v in enumerate(versions):
        got = logged.get(v)
        if got is not None and not (core.iso and got.parts and got.txn != core.id):  # in the log: final
            # (LV[I] waits for the other parts of a multi-table commit outside the global log: below)
            out.append(predecessor(ts.name, got))
            continue
        waited_on: str | None = None
        backoff = concurrency.Backoff(s.poll_min_s, max(s.poll_min_s, s.poll_max_s), factor=1.5)
        wait_t0 = time.monotonic()
        next_check = wait_t0 + s.cycle_check_s
        next_lease = wait_t0  # the owner's lease: at once, then every lease_check()
        st: VersionState | None = None
        polls = 0
        if v == missed:  # the log was read for it just now: its first poll comes after a pause
            backoff.sleep(deadline)
        while True:
            polls += 1
            st = _poll(core, ts, v, st, polls)
            if st.kind == "freed" and not st.filled:
                st = fill_version(core.store, ts.name, v, st) or st
            on_table, on = ts.name, st  # what we wait for: this version, or an unfinished part of it
            if core.iso and st.parts and st.txn != core.id:
                part = unfinished_part(core.store, ts.name, st)
                if part is not None:
                    on_table, on = part
            if not (on.pending and on.txn != core.id):
                break
            # (a state known only from the snapshot, without the marker's bookkeeping, is read whole first)
            look = on.marker is not None and time.monotonic() >= next_lease
            if look:
                next_lease = time.monotonic() + s.lease_check()
            if look and on.marker is not None and core.services.leases.expired(
                    core.store, on.txn or "", on.marker, on.etag, f"{on_table}@{on.version}"):
                try:
                    if resolve_expired(core.store, on_table, on, by=core.id,
                                       below_known=on_table == ts.name) == "freed":
                        core.events.emit(ev.MarkerFreed(core.id, table=on_table, version=on.version,
                                                        reason="expired", by=core.id))
                except PreconditionFailed:
                    pass
                st = None  # read it whole again
                next_lease = time.monotonic()
                continue
            if waited_on is None:
                waited_on = st.txn
                core.book.waits += 1
                core.events.emit(ev.Waiting(core.id, table=ts.name, version=v, on_txn=st.txn or "?"))
                crashpoint("waiting")
            if core.ct and time.monotonic() >= next_check:
                next_check = time.monotonic() + s.cycle_check_s
                _check_while_waiting(core, ts, v, st.txn or "?", time.monotonic() - wait_t0)
            left = deadline - time.monotonic()
            if left <= 0:
                raise aborted("timeout", {"table": ts.name, "version": v, "on_txn": st.txn},
                              timeout=s.timeout_s, on_txn=st.txn, table=ts.name, version=v)
            backoff.sleep(deadline)
        if waited_on is not None:
            outcome = "committed" if st.kind == "commit" else "freed"
            core.events.emit(ev.WaitEnded(core.id, table=ts.name, version=v, on_txn=waited_on, outcome=outcome))
        if st.filled:
            core.logged[(ts.name, v)] = st
        out.append(predecessor(ts.name, st))
        if polls > 1:  # time passed: the versions above may have landed meanwhile
            rest = versions[i + 1:]
            # a commit validated into a global version lands with the rest of its plan (a same-table group:
            # the versions after it, written one after another): read those at once, not one, two, four...
            grouped = any("gvl" in lv for lv in out[-1].lakevilla)
            logged, missed = _read_ahead(core, ts.name, rest, first=len(rest) if grouped else _landed_lead(ts, rest))
    return out


def predecessor(table: str, st: VersionState) -> PredecessorCommit:
    """A resolved version below our marker as a predecessor (a freed one changes nothing)."""
    actions = [] if st.kind == "freed" else decode_commit(st.raw, version=st.version, table=table)
    return PredecessorCommit(table, st.version, st.txn, actions)


def _landed_lead(ts: TableState, versions: list[int]) -> int:
    """How many of ``versions``, from the first, were not pending when last looked at (at least 1):
    those are most likely in the log now, the first one known pending most likely not."""
    return max(1, next((k for k, v in enumerate(versions) if v in ts.pending), len(versions)))


def _read_ahead(core: TxnCore, table: str, versions: list[int],
                first: int | None = None) -> tuple[dict[int, VersionState], int | None]:
    """The versions among the first ``read_ahead`` of ``versions`` that the log holds (their Delta
    files read in parallel, in windows: the first of ``first`` versions, default
    ``read_ahead_parallel``, each next one twice as large up to that), and the version found missing
    (None: none was). Stops at the first one missing: the log has no gaps, so nothing above it is
    there either; so a window is read only when the one before was all there.

    The first window holds the versions not pending when last looked at (:func:`_landed_lead`):
    predecessors committed since the snapshot are read in one round trip, and a version known pending
    next costs one GET, not ``read_ahead`` (issue 38: read after every wait, mostly misses)."""
    tuning, cache = core.settings.tuning, core.logged
    ahead = versions[:tuning.read_ahead] if len(versions) >= 2 else []
    out: dict[int, VersionState] = {}
    size, i = min(first or tuning.read_ahead_parallel, tuning.read_ahead_parallel), 0
    while i < len(ahead):
        if (table, ahead[i]) in cache:  # read before this wait restarted
            out[ahead[i]] = cache[(table, ahead[i])]
            i += 1
            continue
        window = [v for v in ahead[i:i + size] if (table, v) not in cache]
        found = concurrency.gather(concurrency.Pool.REQUESTS, lambda v: read_log_version(core.store, table, v),
                                   window, limit=tuning.read_ahead_parallel)
        for v, st in zip(window, found, strict=True):
            if st is None:
                return out, v
            out[v] = cache[(table, v)] = st
        for v in ahead[i:i + size]:
            out.setdefault(v, cache[(table, v)])
        i, size = i + size, min(size * 2, tuning.read_ahead_parallel)
    return out, None


def resolve_all(core: TxnCore, group: list[str], deadline: float) -> list[PredecessorCommit]:
    """Wait for the predecessors of every table in ``group``, tables in parallel.

    A table the transaction only blind-appended to waits too, although nothing before it can
    conflict with a blind append: the Delta log can hold no version above one still pending."""
    book = core.book
    # A table whose marker sits right above its base with nothing pending has no predecessor: nothing
    # to read or wait for (the common case of an uncontended commit; no thread for it).
    waiting = [t for t in group if book.tables[t].pending
               or book.tables[t].marker_version != book.tables[t].base.version + 1]
    if len(waiting) <= 1 or not core.ct:
        return [p for t in waiting for p in _resolve_predecessors(core, book.tables[t], deadline)]
    # Tables in parallel on WAITS: these wait for other transactions (possibly of this process, whose
    # commits need REQUESTS and TASKS), and read ahead with requests.
    found = concurrency.gather(concurrency.Pool.WAITS, lambda t: _resolve_predecessors(core, book.tables[t], deadline),
                               waiting)
    return [p for preds in found for p in preds]
