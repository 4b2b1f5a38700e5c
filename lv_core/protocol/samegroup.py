"""Same-table group commit (LV[I]; docs/PROTOCOL.md, "Same-table groups", with why R1-R3 stay exact): which
queued commits of one table a holder may write after its own entry at ``top``, in marker order, in the same
global version (:func:`chain`): each is certified as its own settling would judge it
(:func:`~lv_core.protocol.conflicts.first_conflict` against every version it did not read). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lv_core.delta.actions import decode_commit
from lv_core.engine.skipping import FileFilter
from lv_core.protocol.conflicts import OpFootprint, PredecessorCommit, first_conflict
from lv_core.protocol.vqueue import Request

__all__ = ["Candidate", "Link", "candidate", "chain", "decode_footprints", "encode_footprints", "unsettled"]


def encode_footprints(ops: Sequence[OpFootprint]) -> list[dict[str, Any]] | None:
    """``ops`` as JSON, or None when a scan predicate is not a :class:`FileFilter` ("owner only")."""
    out = []
    for op in ops:
        match = {}
        for t, fn in op.may_match.items():
            if not isinstance(fn, FileFilter):
                return None
            match[t] = fn.spec()
        out.append({"step": op.step, "reads": {t: sorted(v) for t, v in op.reads.items()},
                    "removes": {t: sorted(v) for t, v in op.removes.items()}, "scans": sorted(op.scans),
                    "match": match})
    return out


def decode_footprints(data: Any) -> list[OpFootprint]:
    """What :func:`encode_footprints` wrote (raises ValueError, KeyError, TypeError when malformed)."""
    return [OpFootprint(step=int(o["step"]),
                        reads={str(t): frozenset(map(str, v)) for t, v in dict(o["reads"]).items()},
                        removes={str(t): frozenset(map(str, v)) for t, v in dict(o["removes"]).items()},
                        scans=frozenset(map(str, o["scans"])),
                        may_match={str(t): FileFilter.from_spec(s) for t, s in dict(o["match"]).items()})
            for o in list(data)]


def unsettled(read: int, inside: Sequence[int], footprints: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The ``unsettled`` field of a request queued before its predecessors resolved: the version its
    operations read, the pending versions at or below it that it read as empty, and its footprints."""
    return {"read": read, "inside": sorted(inside), "footprints": footprints}


@dataclass(frozen=True)
class Candidate:
    """A queued single-table request as the chain sees it."""

    txn: str
    table: str
    marker: int
    read: int  # the version its operations read
    inside: tuple[int, ...]  # pending versions <= read, read as empty
    footprints: tuple[OpFootprint, ...]
    commit: PredecessorCommit  # its own commit, as a predecessor of the members after it


def candidate(req: Request) -> Candidate | str:
    """``req`` as a chain candidate, or why it cannot be one (then left to the other rules)."""
    if len(req.accesses) != 1 or len(req.commits) != 1 or not req.accesses[0].written:
        return "not one table"
    t = req.accesses[0].table
    m, _etag = req.markers[t]
    # (settled: its operations were redone on every version below its marker)
    un = req.unsettled or unsettled(m - 1, (), [])
    if un.get("footprints") is None:
        return "owner only"
    if req.unsettled is None and req.accesses[0].read_version not in (None, m - 1):
        return "settled elsewhere"
    try:
        ops = tuple(decode_footprints(un["footprints"]))
        read, inside = int(un["read"]), tuple(int(v) for v in un["inside"])
        actions = decode_commit(req.commits[t].actions, version=m, table=t)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return f"malformed ({e})"
    except Exception as e:  # noqa: BLE001 - e.g. a bad schema in a predicate: the owner judges itself
        return f"malformed ({type(e).__name__})"
    if not read < m or any(v > read for v in inside):
        return "malformed (versions)"
    return Candidate(req.txn, t, m, read, inside, ops, PredecessorCommit(t, m, req.txn, actions))


def needs(c: Candidate, top: int) -> set[int]:
    """The versions below ``top`` (the holder's entry) whose commits certifying ``c`` reads."""
    return {v for v in (*range(c.read + 1, top), *c.inside) if v < top}


@dataclass(frozen=True)
class Link:
    """The chain's verdict on one candidate: joins (``why`` None) or is left to its owner (why)."""

    candidate: Candidate
    why: str | None = None


def chain(top: PredecessorCommit, candidates: Sequence[Candidate],
          log: Mapping[int, PredecessorCommit | None]) -> list[Link]:
    """Each candidate on ``top``'s table in marker order: whether it joins after ``top`` (the holder's entry).
    ``log``: the resolved versions below ``top.version`` (None: not resolved). Once one is left, so are the
    later ones (a redo only their owner's session can run)."""
    planned: dict[int, PredecessorCommit] = {top.version: top}
    nxt, stop = top.version + 1, ""
    out = []
    for c in sorted((c for c in candidates if c.table == top.table), key=lambda c: c.marker):
        if c.marker <= top.version:  # (a stale request, its marker resolved below: not after top, stops nothing)
            out.append(Link(c, f"marker {c.marker} is below the holder's entry ({top.version})"))
            continue
        why = stop or _judge(c, nxt, planned, log)
        if why is None:
            planned[c.marker] = c.commit
            nxt += 1
        else:
            stop = stop or f"after {c.txn}@{c.marker}: {why}"
        out.append(Link(c, why))
    return out


def _judge(c: Candidate, nxt: int, planned: Mapping[int, PredecessorCommit],
           log: Mapping[int, PredecessorCommit | None]) -> str | None:
    if c.marker != nxt:
        return f"marker {c.marker} is not next ({nxt})"
    preds = []
    for v in sorted({*range(c.read + 1, c.marker), *c.inside}):
        p = planned.get(v) if v in planned else log.get(v)
        if p is None:
            return f"version {v} unknown"
        preds.append(p)
    hit = first_conflict(c.footprints, preds)
    return None if hit is None else f"conflicts with {hit.table}@{hit.version}: {hit.why}"
