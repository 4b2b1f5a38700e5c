"""Group commit's holder side for requests queued behind its own entries on the same table (docs/PROTOCOL.md,
"Same-table groups"): reading them ahead (:func:`look_behind`), adding those that may follow its entries
(:func:`serve_same`; the decision: :func:`lv_core.protocol.samegroup.chain`). Also :class:`Group` and
:func:`markers_live`, which every group member needs."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from lv_core import concurrency
from lv_core.concurrency import Pool
from lv_core.delta.actions import decode_commit
from lv_core.errors import LvError, NotFound
from lv_core.protocol import samegroup as sg
from lv_core.protocol.commitplan import OVERWRITE_MARKER, PlannedCommit
from lv_core.protocol.conflicts import PredecessorCommit
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.layout import marker_key
from lv_core.protocol.markers import VersionState, classify, read_version
from lv_core.protocol.vqueue import Request, pending
from lv_core.storage.base import GetResult, ObjectStore

__all__ = ["Behind", "Group", "live_until", "look_behind", "markers_live", "prepare", "serve_same"]

log = logging.getLogger("lv_core.txn.group")  # (benchmarks.group_trace counts the "left to owner" records)


@dataclass
class Group:
    """Queued transactions a holder commits with its own: their plan entries, their tables and
    validation outcome (the lock record's and plan's ``group``), and read-only tables to add."""

    plan: list[PlannedCommit] = field(default_factory=list)
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    additions: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)  # the members' requests


def markers_live(store: ObjectStore, req: Request) -> bool:
    """Every marker of the request is still its owner's, unchanged, within its lease: recovery (which waits a
    lease and a grace period) has not removed what the commit references. Cost: 1 GET per marker."""
    return live_until(store, req) > time.time()


def live_until(store: ObjectStore, req: Request) -> float:
    """Until when (epoch seconds) the request's markers are live as :func:`markers_live` judges them: the
    earliest lease expiry when each is still its owner's and unchanged, else 0. Read ahead, it is judged against
    the clock when used. Cost: 1 GET per marker."""
    return _live(req, functools.partial(_marker, store))


def _marker(store: ObjectStore, table: str, version: int) -> GetResult | None:
    try:
        return store.get(marker_key(table, version))
    except NotFound:
        return None


def _live(req: Request, read: Callable[[str, int], GetResult | None]) -> float:
    until = float("inf")
    for t, (v, etag) in req.markers.items():
        res = read(t, v)
        if res is None:
            return 0.0
        st = classify(v, res.data, res.etag, filled=False)
        if st.kind != "marker" or st.txn != req.txn or res.etag != etag or st.marker is None:
            return 0.0
        until = min(until, st.marker.lease_expires)
    return until


@dataclass
class Behind:
    """Requests queued on a holder's tables (by txn), those that are chain candidates, until when their markers
    are live (:func:`live_until`, being read) and the resolved versions below the holder's entries they did not
    read."""

    reqs: dict[str, Request]
    cands: list[sg.Candidate]
    live: dict[str, Future[float]]
    log: dict[tuple[str, int], PredecessorCommit | None]


def _resolved(store: ObjectStore, known: Mapping[tuple[str, int], VersionState], table: str,
              v: int) -> PredecessorCommit | None:
    """Version ``v`` of ``table`` as a resolved predecessor, or None (1 GET unless ``known``)."""
    st = known.get((table, v))
    if st is None:
        try:
            st = read_version(store, table, v)
        except (NotFound, LvError):
            return None
    if st.kind == "freed":
        return PredecessorCommit(table, v, st.txn, [])
    return PredecessorCommit(table, v, st.txn, decode_commit(st.raw, version=v, table=table)) \
        if st.kind == "commit" else None


def prepare(store: ObjectStore, reqs: list[Request], tops: Mapping[str, int],
            known: Mapping[tuple[str, int], VersionState],
            markers: Mapping[tuple[str, int], Future[GetResult | None]] | None = None) -> Behind:
    """:class:`Behind` for ``reqs``, below ``tops`` (table -> the version of the holder's entry there); a
    candidate whose markers are all in ``markers`` (being read) is judged on those. Cost: 1 GET per other
    candidate's marker and per version needed not ``known`` (in parallel)."""
    cands = [c for r in reqs if isinstance(c := sg.candidate(r), sg.Candidate) and c.table in tops
             and c.marker > tops[c.table]]  # (a stale request, below the entry: nothing to read for it)
    byid = {r.txn: r for r in reqs}
    ahead = markers or {}
    live = {c.txn: concurrency.submit(Pool.REQUESTS, live_until, store, byid[c.txn]) for c in cands
            if not all((t, v) in ahead for t, (v, _etag) in byid[c.txn].markers.items())}
    need = sorted({(c.table, v) for c in cands for v in sg.needs(c, tops[c.table])})
    got = concurrency.gather(Pool.REQUESTS, lambda tv: _resolved(store, known, *tv), need)
    for c in cands:  # (the markers read ahead are judged once the reads above are under way)
        if c.txn not in live:
            live[c.txn] = _judged(store, byid[c.txn], ahead)
    return Behind(byid, cands, live, dict(zip(need, got, strict=True)))


def _judged(store: ObjectStore, req: Request, ahead: Mapping[tuple[str, int], Future[GetResult | None]]
            ) -> Future[float]:
    """:func:`live_until` of ``req`` on its markers read ahead (read again when such a read failed)."""
    with contextlib.suppress(Exception):
        return concurrency.done(_live(req, lambda t, v: ahead[(t, v)].result()))
    return concurrency.submit(Pool.REQUESTS, live_until, store, req)


def look_behind(store: ObjectStore, own: str, tops: Mapping[str, int],
                known: Mapping[tuple[str, int], VersionState]) -> Behind:
    """The requests queued on the tables of ``tops`` alone, prepared (:func:`prepare`). Once the LIST tells how
    many there are (``n``), the markers right above each top (versions ``top + 1`` to ``top + n``) are read
    beside the requests: claims are contiguous, so that is where the markers of requests queued behind the
    holder are, and judging them takes no round trip after the requests'. A marker read before its request
    is as good as one read after: either is judged on the etag the request names and on its lease against the
    clock when the chain is made, and no owner rewrites a marker its queued request names except after
    withdrawing the request under the key (:meth:`lv_core.txn.group.Waiter.retract`, which voids the claim the
    look is for); a redo replaces the request at the same marker. So the marker cannot change between the two
    reads in a way the later read alone would have caught and the claim would not. Cost: 1 LIST + 1 GET per
    such request and per guessed marker, then :func:`prepare`'s for the markers not guessed."""
    ahead: dict[tuple[str, int], Future[GetResult | None]] = {}

    def guess(n: int) -> None:
        for t, top in tops.items():
            for v in range(top + 1, top + 1 + n):
                ahead[(t, v)] = concurrency.submit(Pool.REQUESTS, _marker, store, t, v)

    return prepare(store, pending(store, skip=own, only=tops, listed=guess), tops, known, ahead)


def serve_same(store: ObjectStore, state: GvlState, txn: str, own: Sequence[PlannedCommit], behind: Behind,
               group: Group) -> None:
    """Add to ``group`` the requests of ``behind`` that may follow the holder ``txn``'s entries ``own`` in the
    global version after ``state`` (:func:`sg.chain`, live markers). Cost: what ``behind`` did not read."""
    taken = {t for g in group.members.values() for t in g["tables"]}  # (a settled member's table: not twice)
    for e in own:
        mine = [c for c in behind.cands if c.table == e.table and c.marker > e.version]  # (not stale ones)
        if e.blind or not mine or e.table in taken:
            continue
        need = sorted(set().union(*(sg.needs(c, e.version) for c in mine)))
        missing = [v for v in need if (e.table, v) not in behind.log]
        behind.log.update(zip(((e.table, v) for v in missing), concurrency.gather(
            Pool.REQUESTS, functools.partial(_resolved, store, {}, e.table), missing), strict=True))
        top = PredecessorCommit(e.table, e.version, txn, decode_commit(e.data, version=e.version, table=e.table))
        for link in sg.chain(top, mine, {v: behind.log[(e.table, v)] for v in need}):
            c, req = link.candidate, behind.reqs[link.candidate.txn]
            if link.why is not None or not _live_now(behind.live[c.txn]):
                log.debug("left to owner: %s (%s)", link.why or "markers not live", req.txn)
                break
            _join(group, state, req, c, top)


def _live_now(until: Future[float]) -> bool:
    """Whether the markers judged by ``until`` (:func:`live_until`) are live now. A read that failed (the
    store, a malformed marker) counts as not live: the member is left to its owner, and the holder's own
    commit goes on (as :func:`lv_core.txn.group._check` does for requests on other tables)."""
    try:
        return until.result() > time.time()
    except (LvError, ValueError) as e:
        log.info("leaving a queued request to its owner: its markers could not be read: %s", e)
        return False


def _join(group: Group, state: GvlState, req: Request, c: sg.Candidate, top: PredecessorCommit) -> None:
    """Add ``c`` (certified after ``top``) to ``group``: its commit at its marker, named by table and version."""
    data = req.commits[c.table].data(state.version + 1)
    group.plan.append(PlannedCommit(c.table, c.marker, data, OVERWRITE_MARKER, req.markers[c.table][1]))
    group.members[c.txn] = {"tables": [c.table], "at": {c.table: c.marker}, "validation": {
        "compatible": True, "rule": None, "tables": {c.table: {
            "r": c.read, "w": c.marker, "h": c.marker - 1, "l": state.table_version(c.table),
            "after": f"{top.txn}@{top.version}"}}}}
    group.keys.append(req.key)
