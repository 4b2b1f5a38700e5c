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
once (one round trip), since a busy table's cached head is usually stale.

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
"""

from __future__ import annotations

from concurrent.futures import Future

from lv_core.concurrency import Pool, submit
from lv_core.delta.log import DeltaLog
from lv_core.errors import NotFound
from lv_core.protocol.gvl import GvlState
from lv_core.storage.base import ObjectStore
from lv_core.txn.core import TxnCore
from lv_core.txn.ops import Operation

__all__ = ["first_head", "is_latest", "settle", "speculate"]


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
    head, read as before (and at the same time as the HEAD when the table moved the last time).
    """
    glog, logs = core.services.glog, core.services.logs
    cached = glog.known_state()
    v = cached.table_version(table) if cached is not None else None
    known = logs.known_reserved(table)  # a version (or a marker's claim, ours too) past v: it moved
    if cached is None or v is None or (known is not None and known > v):
        return glog.head()  # unknown to the log (enrolled next), or known to have moved: no look
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


def speculate(core: TxnCore, op: Operation) -> Future[bool] | None:
    """Start the look of :func:`first_head` and let ``op`` run at the same time (one round trip fewer).

    Only for the transaction's first table access by a one-table operation, on a table the cached head
    names and that did not move the last time: the transaction's head becomes the cached head at once,
    and the look (is the table's log still at the version that head names?) runs beside the operation.
    :func:`settle` then keeps the result (the same as running after the look) or takes it back.
    """
    if not core.iso or core.book.head is not None or core.book.tables or len(op.tables) != 1:
        return None
    table = op.tables[0]
    glog, logs = core.services.glog, core.services.logs
    cached = glog.known_state()
    v = cached.table_version(table) if cached is not None else None
    known = logs.known_reserved(table)  # a version (or a marker's claim, ours too) past v: it moved
    if cached is None or v is None or (known is not None and known > v) or logs.moved(table):
        return None
    look = submit(Pool.REQUESTS, is_latest, core.store, table, v)
    core.book.head = cached
    core.looking.add(table)
    return look


def settle(core: TxnCore, op: Operation, look: Future[bool]) -> bool:
    """Whether the operation that ran beside :func:`speculate`'s look may stand. True: the table's log
    had no version after the one read, so the operation ran on what it would have run on after the look
    (the table is confirmed). False: the table moved; the transaction forgets the table and reads the
    global log's head (the caller deletes what the operation staged and runs it again on that head)."""
    table = op.tables[0]
    core.looking.discard(table)
    if look.result():
        core.confirmed.add(table)
        return True
    core.services.logs.note_moved(table, True)
    core.book.tables.pop(table, None)
    core.book.head = core.services.glog.head()  # known to be stale: read the head, no second look
    return False
