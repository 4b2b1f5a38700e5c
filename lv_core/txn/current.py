"""LV[I] reads at the cost of plain Delta (issue 38): a table read at a version its log has not moved past.

A plain Delta read finds the table's latest version with one HEAD of the next log file and reads the
data. An LV[I] transaction reads every table at the version one global version names. It used to GET
the global log's head at its first access, and a read-only transaction GET the head again at commit
and read the next log version of each table (freshness: a commit the log does not know yet): four
round trips for a point read where plain Delta makes two. Two facts make most of that unnecessary:

- *Global versions name only versions already in the log, and never go back.* A global version is
  published after every table commit it names landed (plans, enrollment and catch-up name versions
  that exist), and names each table at a version at least the one the version before named.
- So if the head ``g`` this process last saw names table ``t`` at ``v``, and a HEAD of ``t``'s log
  version ``v + 1`` (made after ``g`` was known) finds nothing at time ``T``, then every global version
  published before ``T`` names ``t`` at exactly ``v`` (at least ``v``: it is ``>= g``; at most ``v``:
  nothing above ``v`` existed). In particular the newest one ``g*`` does: reading ``t`` at ``v`` is reading
  it at the newest global version, as fresh as a read of the head at ``T`` would have made it.

:func:`first_head` uses this at the transaction's first table access: the HEAD replaces the head GET
(the cached head becomes the transaction's head; one request, as plain Delta). When the table has
moved, the head is read as before. A table whose last such look found it moved gets both requests at
once (one round trip), since a busy table's cached head is usually stale. The table's log up to ``v``
is read beside the look and the head (:func:`_warm`): whichever head is chosen names the table at
``v`` or later, so the access reads those versions anyway, one round trip later.

:func:`lv_core.txn.readonly.commit_read_only` serves a read-only transaction at one global version (``serializable``):
every table it read is confirmed to have no log version past its read version, either at first access
(above) or now, by one HEAD per table in parallel. Then it commits with no further request:

- *Serializable:* it read the state of one global version (each table at the version its head names),
  and placing it right after that version reproduces every read (docs/PROTOCOL.md, "Why the relaxed
  rules stay serializable", point 4): nothing here depends on the commit-time look.
- *Fresh:* the commit-time validation it replaces checks only commits above the log's version of each
  table that the log does not know yet. When nothing at all exists above the read version at the
  look, that validation finds nothing either (it can only pass): the look is the same check made with
  a stronger condition. A commit that lands after the look ran concurrently with the transaction and is
  ordered after it, as with the validation made a moment earlier.

Otherwise (a table moved, a marker, a write, another policy) the transaction validates as before.

:func:`catch_up` serves a write statement (UPDATE, DELETE, MERGE, OPTIMIZE) of a transaction with
LV[I] and markers on a table whose log moved past the version its head names through commits made
outside the global log (plain Delta writers, presets without LV[I]). Its marker lands above those
commits whatever it read, and settling certifies (or redoes) the statement on the state just below
the marker; so the statement reads that state at once, the newest version of such commits, and the
commit finds nothing in between to redo (docs/PROTOCOL.md, "Why the relaxed rules stay
serializable", point 2, and "Special cases"). Under LV[I] alone (no markers) the table's read version
becomes that version, so validation judges it from there instead of aborting for commits it read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from lv_core import concurrency
from lv_core import events as ev
from lv_core.concurrency import Pool, submit
from lv_core.delta.features import check_readable
from lv_core.delta.log import DeltaLog
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.errors import LvError, NotFound
from lv_core.protocol.conflicts import PredecessorCommit, first_conflict
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.markers import VersionState, read_log_version
from lv_core.storage.base import ObjectStore
from lv_core.txn.core import TxnCore
from lv_core.txn.ops import Operation
from lv_core.txn.waiting import predecessor

__all__ = ["REWRITES", "CaughtUp", "catch_up", "first_head", "is_latest", "settle", "speculate"]

#: Operations that read the table they write (their first table) before writing it.
REWRITES = frozenset({"update", "delete", "merge", "optimize"})


def is_latest(store: ObjectStore, table: str, version: int) -> bool:
    """Whether the table's Delta log holds no version after ``version`` (1 HEAD; the log has no gaps)."""
    try:
        store.head(DeltaLog(store, table).commit_key(version + 1))
    except NotFound:
        return True
    return False


def first_head(core: TxnCore, table: str) -> GvlState:
    """The head the transaction reads at, chosen at its first table access (``table``).

    The head this process last saw, when it names ``table`` at a version the table's log has not moved
    past (1 HEAD); ``table`` then counts as confirmed (:attr:`TxnCore.confirmed`). Else the global log's
    head, read as before (and at the same time as the HEAD when the table moved the last time). Either
    way the table's log up to the version the cached head names is read beside (:func:`_warm`).
    """
    cached = core.services.glog.known_state()
    v = cached.table_version(table) if cached is not None else None
    if cached is None or v is None:
        return core.services.glog.head()  # unknown to the log (enrolled next)
    with _log_read_beside(core, table, v):
        return _choose(core, table, cached, v)


def _choose(core: TxnCore, table: str, cached: GvlState, v: int) -> GvlState:
    """:func:`first_head`'s choice for a table the cached head names at ``v``."""
    glog, logs = core.services.glog, core.services.logs
    known = logs.known_reserved(table)  # a version (or a marker's claim, ours too) past v: it moved
    if known is not None and known > v:
        return glog.head()  # known to have moved: no look
    if logs.moved(table):
        fresh = submit(Pool.REQUESTS, glog.head)
        latest = is_latest(core.store, table, v)
        head = fresh.result()
        logs.note_moved(table, not latest)
        if not latest:
            return head
        core.confirmed.add(table)
        # A newer head that names the table at the same version is as good, and fresher for other tables.
        return head if head.table_version(table) == v else cached
    if is_latest(core.store, table, v):
        core.confirmed.add(table)
        return cached
    logs.note_moved(table, True)
    return glog.head()


@contextlib.contextmanager
def _log_read_beside(core: TxnCore, table: str, v: int) -> Iterator[None]:
    """Read ``table``'s log up to ``v`` (the version a head this process saw names it at) into the process's
    cache while the block chooses the head (:func:`_warm`), and let that read end before leaving."""
    warm = _warm(core, table, v)
    try:
        yield
    finally:
        _wait(warm)


def _warm(core: TxnCore, table: str, v: int) -> Future[object] | None:
    """Start reading ``table``'s resolved log up to ``v`` into the cache, when a snapshot below ``v`` is cached
    (none cached: the access reads from a checkpoint; at or past ``v``: nothing to read; nor when this thread may
    not wait on the pool). ``v`` is the version a head this process saw names: whichever head the transaction
    reads at names the table there or later (global versions never go back), so its access reads these versions
    anyway, one round trip later."""
    logs = core.services.logs
    have = logs.resolved_version(table)
    # (nothing cached: the access reads the table from its checkpoint at the head's version; a read up to ``v``
    # could not start from a checkpoint past ``v`` and would replay the log from version 0)
    if have is None or have >= v or not concurrency.may_wait(Pool.TASKS):
        return None
    return submit(Pool.TASKS, logs.resolved_view, table, v, core.store)


def _wait(warm: Future[object] | None) -> None:
    """Let the read :func:`_warm` started end (what it failed on, the access meets and reports itself)."""
    if warm is not None:
        try:
            warm.result()
        except Exception:  # noqa: BLE001 - a cache fill: the access reads again and raises
            pass


def speculate(core: TxnCore, op: Operation) -> Future[GvlState | None] | None:
    """Start the look of :func:`first_head` and let ``op`` run at the same time (one round trip fewer).

    Only for the transaction's first table access by a one-table operation, on a table the cached head
    names and that did not move the last time: the transaction's head becomes the cached head at once,
    and the look (is the table's log still at the version that head names?) runs beside the operation.
    :func:`settle` then keeps the result (the same as running after the look) or takes it back. The
    look's answer is None (not moved) or, when the table moved, the global log's head, read as soon as
    the look found out (:func:`_look`), still beside the operation: settling needs it for the rerun.
    """
    if not core.iso or core.book.head is not None or core.book.tables or len(op.tables) != 1:
        return None
    table = op.tables[0]
    glog, logs = core.services.glog, core.services.logs
    cached = glog.known_state()
    v = cached.table_version(table) if cached is not None else None
    known = logs.known_reserved(table)  # a version (or a marker's claim, ours too) past v: it moved
    if (cached is None or v is None or (known is not None and known > v) or logs.moved(table)
            or not concurrency.may_wait(Pool.TASKS)):  # (the look is a compound step: a TASKS task)
        return None
    look = submit(Pool.TASKS, _look, core, table, v)
    core.book.head = cached
    core.looking.add(table)
    return look


def _look(core: TxnCore, table: str, v: int) -> GvlState | None:
    """None when ``table``'s log holds no version after ``v``; else the global log's head, read at once
    (1 HEAD; then the head's GETs). Any head read after the transaction began serves its rerun, as in
    :func:`first_head`; reading it here rather than after the operation only saves the wait."""
    if is_latest(core.store, table, v):
        return None
    return core.services.glog.head()


def settle(core: TxnCore, op: Operation, look: Future[GvlState | None]) -> bool:
    """Whether the operation that ran beside :func:`speculate`'s look may stand. True: the table's log
    had no version after the one read, so the operation ran on what it would have run on after the look
    (the table is confirmed). False: the table moved; the transaction forgets the table and takes the
    global log's head the look read (the caller deletes what the operation staged and runs it again on
    that head)."""
    table = op.tables[0]
    core.looking.discard(table)
    moved = look.result()
    if moved is None:
        core.confirmed.add(table)
        return True
    core.services.logs.note_moved(table, True)
    core.book.tables.pop(table, None)
    # known to be stale: the head the look read, no second look. (Nothing runs beside taking it, so the log
    # is not read ahead here: the rerun's access reads the versions it needs.)
    core.book.head = moved
    return False


@dataclass(frozen=True)
class CaughtUp:
    """A table :func:`catch_up` moved to a newer base: the statement must write it (its marker is then
    claimed), else the move is undone."""

    table: str
    before: Snapshot  # the base it had (restored when the statement fails)
    read_version: int | None  # and its read version

    def undo(self, core: TxnCore) -> None:
        """Read the table where it was read before (the statement failed or wrote nothing there)."""
        ts = core.book.tables.get(self.table)
        if ts is not None and ts.marker_version is None:
            ts.base, ts.read_version, ts.tail = self.before, self.read_version, None


def catch_up(core: TxnCore, op: Operation) -> CaughtUp | None:
    """Before a write statement runs: read the table it rewrites at the newest of the commits made
    outside the global log above the version the transaction's head names; returns what it moved, or
    None when the table is read where it was (the normal path makes no request here).

    Only for a transaction with LV[I], a table without a marker yet (its marker, claimed at this first
    write, will lie above those commits: they are predecessors that settling certifies or redoes the
    statement over; LV[I] alone: validation judges the table from its new read version, R1 and
    ``foreign_lost_update`` past it, R3 against a validated commit since), and only when this process
    knows the table moved (the look of
    :func:`first_head` found a version past the head's, or it knows a later version or marker claim,
    e.g. of a commit it made since the table was confirmed); one whose look is under way is read where
    it is (the look decides). The log is probed from the newest version known (1 HEAD, and 1 LIST when
    it moved) and the versions above the read version are read (in parallel, up to
    ``Tuning.read_ahead``; the marker's claim reads them anyway, from ``TxnCore.logged``). The
    catch-up stops below the first version validated into the global log (or by a plan being written)
    and below a part of a multi-table commit made outside it, and is not made at all when one of those
    commits changed what an earlier operation of the transaction read (today's check at commit then
    decides, redo or ``exposed_read``). A statement that then writes nothing to the table (no marker
    will hold it, no global version will name it past its read version) is run again at the version read
    before (:func:`lv_core.txn.execute.execute`): with markers the transaction is then always in a state
    the path without catch-up (run at the read version, redone at commit on the version below the
    marker) can leave it in.
    """
    table = op.tables[0] if op.name in REWRITES and op.tables and not op.blind else None
    if table is None or not core.iso:
        return None
    ts = core.book.tables.get(table)
    if ts is None or ts.marker_version is not None or ts.read_version is None or ts.pending or table in core.looking:
        return None
    logs, r = core.services.logs, ts.base.version
    known = logs.known_reserved(table)
    if not logs.moved(table) and (known is None or known <= r):
        return None
    latest = DeltaLog(core.store, table).latest_version_by_probe(max(r, logs.known_latest(table) or r))
    logs.note_latest(table, latest)
    if latest == r:
        ts.tail = r  # not moved after all: the probe is the marker claim's look at the log
        return None
    versions = list(range(r + 1, min(latest, r + core.settings.tuning.read_ahead) + 1))
    found = concurrency.gather(Pool.REQUESTS, lambda v: _logged(core, table, v), versions,
                               limit=core.settings.tuning.read_ahead_parallel)
    preds: list[PredecessorCommit] = []
    for st in found:
        if st is None or st.parts:
            break
        pc = predecessor(table, st)
        if any("gvl" in lv for lv in pc.lakevilla):
            break  # validated into the global log (or being so): not ours to move past here
        preds.append(pc)
    if not preds or first_conflict(core.book.footprints(), preds) is not None:
        return None
    before, read_version = ts.base, ts.read_version
    after = replay(ts.base, [(p.version, p.actions) for p in preds])
    try:
        check_readable(after.protocol, after.metadata, table=table)
    except LvError:
        return None  # a writer outside the log made it unreadable to us: the commit finds out, as before
    ts.base = after
    if not core.markers:  # LV[I] alone: validation judges the table from the version it now reads
        ts.read_version = after.version
    ts.tail = latest  # the probe found nothing after it: the marker's claim needs no look of its own there
    core.events.emit(ev.SnapshotRead(core.id, table=table, version=ts.base.version, files=len(ts.base.files)))
    return CaughtUp(table, before, read_version)


def _logged(core: TxnCore, table: str, version: int) -> VersionState | None:
    """A log version (cached for the transaction: a Delta file is written once)."""
    st = core.logged.get((table, version))
    if st is None:
        st = read_log_version(core.store, table, version)
        if st is not None:
            core.logged[(table, version)] = st
    return st
