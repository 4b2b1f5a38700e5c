"""Module #1 for one transaction: first access of a table, and the markers it places and replaces.

With LV[R]+LV[CT] the first access put-if-absents a marker (beside the log) at the next free version
``m`` and reads the snapshot at ``m-1`` (pending markers of others read as empty; they are
predecessors). The marker's version is later written to the Delta log exactly once: with the commit,
or with an empty commit once the marker was given up. With LV[I]
a table is read at its global-log version and gets its marker when first written; LV[R] alone (no
LV[CT]) reads the latest snapshot and does the same. With neither (preset ``delta``) the latest
snapshot is read.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future

from lv_core import events as ev
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.features import check_readable
from lv_core.delta.table import validate_table_name
from lv_core.errors import LvError, PreconditionFailed
from lv_core.protocol import clock, layout
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.lease import keeper, write_lease
from lv_core.protocol.markers import (
    MarkerInfo,
    VersionState,
    encode_freed,
    place_marker,
    read_version,
    read_versions,
    same_commit,
    update_marker,
    write_version,
)
from lv_core.storage.readback import Unanswered, write_or_read_back
from lv_core.testing import crashpoint
from lv_core.txn import waiting
from lv_core.txn.core import TxnCore
from lv_core.txn.current import first_head
from lv_core.txn.enroll import enroll
from lv_core.txn.state import TableState

__all__ = ["access", "claim_write_marker", "free_own_marker", "head", "read_version_of", "replace_marker",
           "write_marker_version"]


def head(core: TxnCore, table: str | None = None) -> GvlState:
    """LV[I]: the global log head this transaction reads at (chosen once, at its first table access:
    :func:`lv_core.txn.current.first_head`, which may confirm ``table`` as not moved past it)."""
    if core.book.head is None:
        core.book.head = first_head(core, table) if table is not None else core.services.glog.head()
    return core.book.head


def read_version_of(core: TxnCore, table: str) -> int:
    """LV[I]: the version ``table`` is read at: the one the transaction's global-log head names; a table
    the head does not name is enrolled in the global log first (:mod:`lv_core.txn.enroll`: reading it at
    its own latest version would mix states)."""
    state = head(core, table)
    known = state.table_version(table)
    if known is not None:
        return known
    validate_table_name(table)
    latest = core.services.logs.latest_snapshot(table, core.store)  # exists, and is readable: else nothing is written
    check_readable(latest.protocol, latest.metadata, table=table)
    return enroll(core, table, state)


def access(core: TxnCore, name: str) -> TableState:
    """The transaction's state of ``name``, reading it (and placing its marker) on first access."""
    book = core.book
    ts = book.tables.get(name)
    if ts is not None:
        return ts
    logs = core.services.logs
    validate_table_name(name)
    if core.iso:
        r = read_version_of(core, name)
        # Pending markers at or below r (possible only for a table the global log does not know
        # yet) read as empty; they are predecessors a marker on this table must wait for.
        try:
            base, pending = logs.resolved_view(name, r, core.store)
        except VersionNotFound as e:  # a version no holder can have named: another client wrote the head
            raise core.services.glog.refuse_missing(head(core), e) from None
        check_readable(base.protocol, base.metadata, table=name)
        ts = TableState(name, base, read_version=r, pending={v: x for v, x in pending.items() if x != core.id})
        book.tables[name] = ts
    elif not core.markers or core.claims_at_write:  # the baseline, or LV[R] alone (marker at the first write)
        ts = TableState(name, logs.latest_snapshot(name, core.store))
        check_readable(ts.base.protocol, ts.base.metadata, table=name)
        book.tables[name] = ts
    else:
        v, etag = _place(core, name, logs.cached_hint(name, core.store) + 1)
        crashpoint("marker-placed")
        seen: dict[int, VersionState] = {}
        try:
            base, pending = logs.resolved_view(name, v - 1, core.store, seen=seen)
            check_readable(base.protocol, base.metadata, table=name)
        except BaseException:
            _free_quietly(core, name, v, etag, "error")
            raise
        pending = {pv: x for pv, x in pending.items() if x != core.id}
        ts = TableState(name, base, v, etag, logical=bool(pending), pending=pending)
        book.tables[name] = ts
        waiting.add_edges(core, ts, seen={(name, pv): st for pv, st in seen.items()})
        waiting.expose_for_commit(core, placed=name)  # a multi-table commit may then skip its decision record
    core.events.emit(ev.SnapshotRead(core.id, table=name, version=ts.base.version, files=len(ts.base.files)))
    return ts


def _place(core: TxnCore, name: str, start: int, check_log: bool = True,
           above: Future[int] | None = None) -> tuple[int, str]:
    """Put-if-absent a marker at the first free version >= ``start`` (writing the lease first); ``above``:
    the highest claim listed beforehand (:func:`highest_claim`), tried just above it when that is higher."""
    if core.book.lease_expires == 0.0:
        core.book.lease_expires = keeper().register(core.store, core.id, core.settings.lease_s)
    logs = core.services.logs
    jumped = False  # (past claims this process did not know of: a race avoided, still contended)
    with contextlib.suppress(Exception):  # (a failed LIST: the claim lists again if it loses)
        if above is not None and (top := above.result()) >= start:
            start, check_log, jumped = top + 1, True, True  # (check_log: the caller did not see the log there)
    v, etag, attempts = place_marker(core.store, name, start, core.marker_info(), check_log=check_log,
                                     contended=logs.claims_contended(name, core.settings.tuning.contended_s))
    logs.note_claim(name, attempts, jumped=jumped)
    logs.note_claimed(name, v)
    core.events.emit(ev.MarkerPlaced(core.id, table=name, version=v, attempts=attempts))
    return v, etag


def _free_quietly(core: TxnCore, table: str, version: int, etag: str, reason: str) -> None:
    """Free a marker not recorded in the transaction yet (an error right after placing it)."""
    try:
        update_marker(core.store, table, version, etag, encode_freed(core.id, reason))
        core.events.emit(ev.MarkerFreed(core.id, table=table, version=version, reason=reason))
    except LvError:
        pass  # expires by lease; any reader frees it then


def claim_write_marker(core: TxnCore, ts: TableState) -> None:
    """LV[I] with markers, or LV[R] alone: a table read without a marker gets one when first written
    (the operation that writes it is ``core.book.claiming``, not recorded yet).

    Versions between the read version and the marker are predecessors, checked at commit."""
    v, etag = place_write_marker(core, ts)
    record_write_marker(core, ts, v, etag)


def place_write_marker(core: TxnCore, ts: TableState, above: Future[int] | None = None) -> tuple[int, str]:
    """The placement part of :func:`claim_write_marker` (only requests: it may run while the operation
    that writes the table is still running, see :func:`lv_core.txn.execute.execute`); ``above``: as
    :func:`_place`'s."""
    start = core.services.logs.cached_hint(ts.name, core.store) + 1
    # LV[R] alone read the log's end at its first access, and so did LV[I] on a confirmed table (a HEAD
    # found no version after the one read: lv_core/txn/current.py): no second look at the same version.
    # A writer that ignores markers taking it since is found by the commit's PUT-create all the same
    # (LV[R]: a lost marker, re-claimed; LV[I]: the plan cannot write there, and validates the usual way).
    # A look still under way (lv_core/txn/current.speculate) is the same HEAD: when it finds the table
    # moved, a marker at this unchecked version is given up (lv_core/txn/execute.EarlyMarkers).
    # A write statement's catch-up (lv_core/txn/current.catch_up) probed the log past its new base too.
    looked = not core.iso or ts.name in core.confirmed or ts.name in core.looking or ts.tail == ts.base.version
    return _place(core, ts.name, start, check_log=not looked or start != ts.base.version + 1, above=above)


def free_placed(core: TxnCore, table: str, version: int, etag: str) -> None:
    """Give up a marker :func:`place_write_marker` placed that is not recorded (its write did not happen)."""
    _free_quietly(core, table, version, etag, "unused")


def record_write_marker(core: TxnCore, ts: TableState, v: int, etag: str,
                        ahead: Future[dict[int, VersionState]] | None = None) -> None:
    """The rest of :func:`claim_write_marker`: the marker is the table's; versions below it are
    predecessors (on the transaction's thread). ``ahead``: some of them, read beside the claim (:func:`read_below`)."""
    crashpoint("marker-placed")
    ts.marker_version, ts.marker_etag = v, etag
    between = _unread(core, ts, v)
    got: dict[int, VersionState] = {}
    with contextlib.suppress(Exception):  # (a failed read ahead: read here)
        got = dict(ahead.result()) if ahead is not None else {}
    rest = [pv for pv in between if pv not in got]
    got.update(zip(rest, _read_between(core, ts, rest), strict=True))
    for pv, st in ((pv, got[pv]) for pv in between):
        if st.filled:  # a log file is final: settling takes it from here instead of reading it again
            core.logged[(ts.name, pv)] = st
        elif st.pending and st.txn and st.txn != core.id:
            ts.pending[pv] = st.txn
    ts.logical = v - 1 > ts.base.version
    waiting.add_edges(core, ts)


def read_below(core: TxnCore, ts: TableState, above: Future[int]) -> dict[int, VersionState]:
    """The versions between ``ts``'s base and the highest claim ``above`` lists, as :func:`record_write_marker`
    reads them for a marker claimed just above it: read beside that claim, they spare the recording its round
    trip. Read before the claim is as good as after: a log file is final, and a marker only goes from pending
    to freed or committed, which waiting finds out (:func:`~lv_core.protocol.markers.read_versions`)."""
    between = _unread(core, ts, above.result() + 1)
    return dict(zip(between, _read_between(core, ts, between), strict=True))


def _unread(core: TxnCore, ts: TableState, below: int) -> list[int]:
    """The versions after ``ts``'s base and below ``below`` whose log file the transaction has not read (a log
    file is final)."""
    return [pv for pv in range(ts.base.version + 1, below) if (ts.name, pv) not in core.logged]


def _read_between(core: TxnCore, ts: TableState, versions: list[int]) -> list[VersionState]:
    """Each version's log file and marker object at once: one round trip in all."""
    known = core.services.logs.known_latest(ts.name)
    return read_versions(core.store, ts.name, versions,
                         logged=range(ts.base.version + 1, known + 1) if known is not None else ())


def replace_marker(core: TxnCore, ts: TableState) -> None:
    """Claim a new marker after losing one (past the log's tail: the version was taken by a writer
    that ignores markers); the versions in between become predecessors."""
    sent = time.monotonic()
    core.book.lease_expires = write_lease(core.store, core.id, core.settings.lease_s)
    keeper().wrote(core.id, sent)
    info = MarkerInfo(txn=core.id, created=clock.wall(), lease_expires=core.book.lease_expires,
                      client=layout.client_label(), name=core.name or "")
    assert ts.marker_version is not None
    start = max(ts.marker_version, core.services.logs.latest_hint(ts.name, core.store)) + 1
    v, etag, attempts = place_marker(core.store, ts.name, start, info)
    ts.marker_version, ts.marker_etag, ts.logical = v, etag, True
    core.services.logs.note_claimed(ts.name, v)
    core.events.emit(ev.MarkerPlaced(core.id, table=ts.name, version=v, attempts=attempts))


def write_marker_version(core: TxnCore, ts: TableState, data: bytes) -> VersionState | None:
    """Write our marker's version into the Delta log (once, put-if-absent) with ``data``.

    Returns None once written. When the version is already in the log, returns what it is (our own
    commit rolled forward by a recoverer, an empty commit written after our lease ran out, or a
    writer that ignores markers). After an error whose outcome is unknown (the write may have
    landed and only the response got lost) the version is read back: our bytes there mean written;
    nothing there means it did not land, so it is written once more. Raises when nothing can be learnt.
    """
    v = ts.marker_version
    assert v is not None
    try:
        got = write_or_read_back(lambda: write_version(core.store, ts.name, v, data),
                                 lambda: read_version(core.store, ts.name, v))
    except PreconditionFailed:
        return read_version(core.store, ts.name, v)
    if not isinstance(got, Unanswered):
        return None
    st = got.found
    if st.filled:
        return None if same_commit(st.raw, data) else st
    try:
        write_version(core.store, ts.name, v, data)
        return None
    except PreconditionFailed:
        now = read_version(core.store, ts.name, v)
        return None if same_commit(now.raw, data) else now


def free_own_marker(core: TxnCore, ts: TableState, reason: str) -> VersionState | None:
    """Give up our marker (its object says freed; the log takes the version later, as an empty commit).

    Returns None once freed; else what the version is now: our commit when it reached the log (a
    write whose response got lost, or a roll forward), or a version taken or freed by someone else.
    After an error whose outcome is unknown the marker is read back (raises when nothing can be learnt).
    """
    assert ts.marker_version is not None and ts.marker_etag is not None
    if ts.name in core.book.attempted:  # a commit write was sent: the log decides, look there first
        st = read_version(core.store, ts.name, ts.marker_version)
        if st.filled:
            return st
    data = encode_freed(core.id, reason, ict=core.ict(ts.name))
    if not ts.pending and ts.base.version == ts.marker_version - 1:
        # Every version below is in the log: write the empty commit there at once (waiters see it
        # with one GET of the log; put-if-absent decides against a commit of ours that landed).
        return write_marker_version(core, ts, data)
    v, etag = ts.marker_version, ts.marker_etag
    try:
        got = write_or_read_back(lambda: update_marker(core.store, ts.name, v, etag, data),
                                 lambda: read_version(core.store, ts.name, v))
    except PreconditionFailed:
        return read_version(core.store, ts.name, v)
    if not isinstance(got, Unanswered):
        ts.marker_etag = got
        return None
    st = got.found
    if not st.filled and st.raw == data:
        ts.marker_etag = st.etag
        return None
    if not (st.pending and st.txn == core.id):
        return st
    ts.marker_etag = update_marker(core.store, ts.name, ts.marker_version, st.etag, data)
    return None
