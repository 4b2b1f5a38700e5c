"""Commit stages 2 and 3 without LV[I]: prepare (what each marker's version becomes, and the decision
record when several tables commit together) and publish (write each marker's version into the Delta
log once, in parallel; a read-only table's version gets an empty commit).

``commit_markers`` runs settle -> prepare -> publish per group (LV[CT]: all tables in one group, made
all-or-nothing by the decision record; LV[R] alone: each table on its own, as the paper's
single-table atomic markers) until no marker was lost, and returns :class:`Published`.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from lv_core import concurrency
from lv_core import events as ev
from lv_core.concurrency import Pool
from lv_core.delta.actions import Action, encode_commit
from lv_core.protocol import layout
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.ict import info_lines, with_info
from lv_core.protocol.markers import KEY, encode_freed, lakevilla_commit_info
from lv_core.storage.readback import put_or_confirm
from lv_core.testing import crashpoint
from lv_core.txn.access import replace_marker, write_marker_version
from lv_core.txn.core import TxnCore
from lv_core.txn.fence import reassert_markers, silent_too_long
from lv_core.txn.settle import Settled, settle_group
from lv_core.txn.state import Decision, DecisionKind
from lv_core.txn.waiting import exposed_markers

__all__ = ["Prepared", "Published", "commit_markers", "prepare", "publish"]


@dataclass(frozen=True)
class Prepared:
    """What each marker of a settled group becomes: ``plan`` table -> commit bytes (or a freed entry
    for read-only tables), or what makes them (a part carrying its siblings is assembled by the thread
    that writes it); ``writes``: the actions of the tables it changes."""

    group: tuple[str, ...]
    writes: dict[str, list[Action]]
    plan: dict[str, bytes | Callable[[], bytes]]


@dataclass(frozen=True)
class Published:
    """Everything is published: table -> version of its commit, read-only markers freed, and (LV[I])
    the global version that holds the commit."""

    versions: dict[str, int]
    freed: dict[str, int] = field(default_factory=dict)
    gvl: GvlState | None = None


def _with_siblings(core: TxnCore, extra: dict[str, Any], bodies: dict[str, bytes], parts: dict[str, bytes],
                   token: str) -> dict[str, Callable[[], bytes]] | None:
    """Each part carrying the other parts' actions (``lakevilla.siblingActions``: table -> its encoded
    actions; their commitInfo is the part's own without these fields, ``lakevilla.siblingsIct`` naming
    the tables with in-commit timestamps), so that any part in the log is the decision
    (``lv_core.protocol.recovery`` rolls the others forward from it, finding them through the markers
    the edges object names); None when that cannot be: the parts are too big together
    (``Tuning.embed_max``), or the edges object does not name every written table's marker. ``parts``:
    each table's commit with ``token`` in place of its siblings."""
    if sum(map(len, bodies.values())) > core.settings.tuning.embed_max:
        return None
    exposed = exposed_markers(core, core.settings.timeout_s)
    at = extra["at"]
    if exposed is None or any(exposed.get(t) != v for t, v in at.items()):
        return None
    # Each sibling's actions are escaped into JSON once, not once per part: the placeholder in every
    # part is replaced by its ``{"other": "<actions>", ...}`` (the bytes json.dumps makes of that dict),
    # so the work grows with the parts' total size, not with its square. Each part is assembled by the
    # thread that writes it: the first writes start while the other parts are still being put together.
    entry = {t: f"{json.dumps(t, ensure_ascii=False)}:{json.dumps(b.decode(), ensure_ascii=False)}"
             for t, b in bodies.items()}
    names = sorted(bodies)
    placeholder = json.dumps(token).encode()

    def assemble(t: str) -> bytes:
        return parts[t].replace(placeholder, ("{" + ",".join(entry[o] for o in names if o != t) + "}").encode(), 1)

    return {t: functools.partial(assemble, t) for t in parts}


def prepare(core: TxnCore, settled: Settled) -> Prepared:
    """Encode each table's commit; with several written tables, make the commit decided before any
    part is written: each part carries the others when they are small (:func:`_with_siblings`, no
    extra round trip), else the decision is recorded first (once, and again when a marker moved
    since). From then on the commit is only ever rolled forward."""
    book = core.book
    writes = book.writes(list(settled.group))
    extra: dict[str, Any] = {"preset": core.preset, "tables": sorted(writes), "redo": book.redo_count}
    at = {t: book.published.get(t, book.tables[t].marker_version) for t in sorted(writes)}
    if len(writes) > 1:  # every part's version: LV[I] publishes none of them before all are committed
        extra["at"] = at
    info = lakevilla_commit_info(core.id, "LAKEVILLA COMMIT", extra)
    infos = [info]
    embed = len(writes) > 1 and book.decision is None and not book.published
    token = f"lv-siblings-{uuid.uuid4().hex}" if embed else ""
    ict = {t: core.ict(t) for t in writes}
    if embed:  # the part: this commitInfo and the siblings' actions (a placeholder until assembled)
        lv = {**info[KEY], "siblingActions": token}
        if with_ict := sorted(t for t, on in ict.items() if on):
            lv["siblingsIct"] = with_ict
        infos.append({**info, KEY: lv})
    lines = {on: info_lines(infos, on) for on in set(ict.values())}  # the same for every table
    bodies = {t: encode_commit(actions) for t, actions in writes.items()}  # each table's actions, encoded once
    commits = {t: with_info(bodies[t], lines[ict[t]][0], ict[t]) for t in writes}
    made: Mapping[str, bytes | Callable[[], bytes]] = commits
    if embed:
        embedded = _with_siblings(core, extra, bodies, {t: with_info(bodies[t], lines[ict[t]][1], ict[t])
                                                        for t in writes}, token)
        if embedded is not None:
            made = embedded
            book.decision = Decision(DecisionKind.PARTS, at)  # type: ignore[arg-type]
    plan = {t: made[t] if t in writes else encode_freed(core.id, "read-only", ict=core.ict(t))
            for t in settled.group if t not in book.published and t not in book.freed}
    if len(writes) > 1 and (book.decision is None or dict(book.decision.at) != at):
        decision = {"txn": core.id, "decided": time.time(), "tables": {
            t: {"version": at[t], "commit": commits[t].decode()} for t in writes}}
        _write_decision(core, json.dumps(decision).encode())
        book.decision = Decision(DecisionKind.RECORD, at)  # type: ignore[arg-type]
        crashpoint("decision-written")
    return Prepared(settled.group, writes, plan)


def _write_decision(core: TxnCore, data: bytes) -> None:
    """PUT the commit decision, read back after a lost response (our bytes there: it stands). Else the
    error is raised: not decided; an abort then frees markers, and recovery never rolls a decision
    forward past a freed marker."""
    core.book.decision_written = True  # (read by clean-up, which deletes it, after an error too)
    put_or_confirm(core.store, layout.decision_key(core.id), data)


def publish(core: TxnCore, prepared: Prepared) -> list[str]:
    """Write the versions of the group's markers into the log with their plan; returns the tables
    whose marker was lost (its version taken; re-claimed at a later version: settle and publish those
    again).

    A group with both read-only and written tables frees its read-only markers first, then writes its
    parts: the written parts are the commit's decision, so every read must be known to be protected
    *before* the first part lands. Written in parallel, a paused client could find a read-only marker
    lost after a part was published, and then abort a transaction whose write others already read
    (G1a, found by the schedule explorer, ``tests/unit/test_schedule_explorer.py``). If a written part
    is lost after the read-only markers were freed and nothing was published, those read-only tables
    are claimed again too: from the free on, nothing protected what was read there."""
    book = core.book
    writes = prepared.writes
    guard = threading.Lock()

    def one(t: str, data: bytes | Callable[[], bytes]) -> str | None:
        """Write one table's version; the table's name when its marker was lost."""
        ts = book.tables[t]
        assert ts.marker_version is not None and ts.marker_etag is not None
        if callable(data):
            data = data()
        if t in writes:
            book.attempted.add(t)
        st = write_marker_version(core, ts, data)
        if st is not None:
            if st.kind == "commit" and st.txn == core.id:  # rolled forward by a recoverer
                with guard:
                    book.mark_published(t, ts.marker_version, writes.get(t, []))
                return None
            # Lost, read-only or not: whoever freed or took the version did not wait for us, so what we
            # read there may be stale. A new marker makes the versions in between predecessors, checked
            # against our reads when the group settles again (docs/PROTOCOL.md, "Special cases").
            return t
        if t in writes:
            with guard:
                book.mark_published(t, ts.marker_version, writes[t])
                first = len(book.published) == 1
            if len(writes) > 1 and first:
                crashpoint("between-markers")
        else:
            with guard:
                book.freed[t] = ts.marker_version
            core.events.emit(ev.MarkerFreed(core.id, table=t, version=ts.marker_version, reason="read-only"))
        return None

    def round_of(items: list[tuple[str, bytes | Callable[[], bytes]]]) -> list[str]:
        # In parallel (leaf requests: the REQUESTS pool); all of them end, even after one failed: no
        # write of ours is in flight once we return. (A test pausing at "between-markers" pauses the
        # thread of the first part written; the other parts' writes go on as they would.)
        return [t for t in concurrency.gather(Pool.REQUESTS, lambda item: one(*item), items) if t is not None]

    plan = sorted(prepared.plan.items())
    reads = [(t, d) for t, d in plan if t not in writes]
    parts = [(t, d) for t, d in plan if t in writes]
    again: list[str] = []  # read-only tables freed this round, claimed again
    if reads and parts:
        lost = round_of(reads)
        if not lost:
            lost = round_of(parts)
            if lost and not set(writes) & set(book.published):
                again = [t for t, _ in reads if book.freed.pop(t, None) is not None]
    else:
        lost = round_of(plan)
    for t in lost + again:
        ts = book.tables[t]
        assert ts.marker_version is not None
        if t in lost:
            core.events.emit(ev.MarkerLost(core.id, table=t, version=ts.marker_version))
        replace_marker(core, ts)
    return lost + again


def commit_markers(core: TxnCore, deadline: float) -> Published:
    """LV[R]/LV[CT] commit: settle -> prepare -> publish for every group until no marker was lost."""
    book = core.book
    groups = [list(book.tables)] if core.ct else [[t] for t, ts in book.tables.items() if ts.marker_version is not None]
    for group in groups:
        redos = 0
        while True:
            settled = settle_group(core, group, deadline, redos)
            redos = settled.redos
            if silent_too_long(core):  # we may have looked dead: are our markers still ours? (fence.py)
                lost = reassert_markers(core, list(settled.group))
                for t in lost:
                    ts = book.tables[t]
                    assert ts.marker_version is not None
                    core.events.emit(ev.MarkerLost(core.id, table=t, version=ts.marker_version))
                    replace_marker(core, ts)
                if lost:
                    continue
            if not publish(core, prepare(core, settled)):
                break
    return Published(dict(book.published), dict(book.freed))
