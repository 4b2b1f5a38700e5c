"""Temporary views of pinned table versions, reused across SQL statements (issue 38: the fixed cost
of a read query).

Binding a table inline (``spark.sql(text, t=frame)``, :mod:`lv_core.engine.sql_bind`) makes Spark
resolve the table's Parquet relation again (file index, schema) each time the query is analysed:
when ``txn.sql`` runs and again when the result is collected, plus one schema round trip per table.
A temporary view holds the analysed relation on the server, so a query naming it costs what plain
``spark.sql`` over views costs (TPC-DS Q5 at SF1: about 0.5 s less per query).

Why a view can never serve another version than the one the transaction pinned: its name is a digest
of everything the frame is built from (the store location, the table, its protocol and metadata, and
per data file its path, size, partition values and deletion vector). Delta never rewrites a data
file or a deletion vector in place (new content gets a new path), so one name always means the same
rows; a newer version of the table has other files, hence another name. Views are created once and
never replaced, so a DataFrame a SELECT returned keeps reading exactly its rows after later
statements and after the commit. A view is dropped only when nothing can use it any more: no live
DataFrame built on it and no statement binding it (:meth:`TableViews.hold`), and only beyond
:data:`KEEP_IDLE` idle views (the least recently used first).

A version becomes a view the second time a statement reads it (:meth:`TableViews.wanted`): a table
that changes between every read costs what it did without views, and a version read again costs no
resolution from then on.

The views live in the Spark session (one registry per session, shared by the lakehouses using it),
and only the views of committed versions read on the ``direct`` path are made (see
:func:`pinned_view`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from lv_core.delta.actions import AddFile
from lv_core.delta.snapshot import Snapshot
from lv_core.engine.spark_schema import spark_errors
from lv_core.errors import LvError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["KEEP_IDLE", "PREFIX", "SEEN", "TableViews", "pinned_view", "view_key", "views_for"]

#: Idle views (no DataFrame or statement uses them) kept for reuse per Spark session.
KEEP_IDLE = 64
#: Versions read once remembered per Spark session (a second read makes the view).
SEEN = 4096
#: Every view name starts with this (and nothing else of the product's does).
PREFIX = "lv_pinned_"


def view_key(location: str, snapshot: Snapshot, files: Sequence[AddFile]) -> str:
    """The view name for ``files`` of ``snapshot``'s table at ``location`` (see the module docstring:
    equal names mean equal rows)."""
    body = {
        "location": location,
        "table": snapshot.table,
        "protocol": snapshot.protocol.to_json(),
        "metadata": snapshot.metadata.to_json(),
        "files": sorted([f.path, f.size, sorted(f.partition_values.items(), key=lambda kv: kv[0]),
                         dict(f.extra)] for f in files),
    }
    text = json.dumps(body, sort_keys=True, default=str, separators=(",", ":"))
    return PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(eq=False)
class _View:
    """One view of the session and its live holders (a new entry when the view is made again)."""

    name: str
    users: int = 0


class TableViews:
    """The views of one Spark session: which exist, who uses them, which to drop."""

    def __init__(self, spark: Any, keep_idle: int = KEEP_IDLE) -> None:
        self._spark = spark
        self._keep_idle = keep_idle
        self._lock = threading.RLock()  # creations and drops one at a time; RLock: a finalizer may run inside
        self._views: dict[str, _View] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()  # views without holders, least recently used first
        self._seen: OrderedDict[str, None] = OrderedDict()  # versions read once (no view yet), oldest first
        self.created = 0  #: views made (for tests and the benchmarks)
        self.dropped = 0  #: views dropped

    def __contains__(self, name: str) -> bool:
        return name in self._views

    def idle(self) -> list[str]:
        """The views no statement or DataFrame uses, least recently used first."""
        with self._lock:
            return list(self._idle)

    def wanted(self, name: str) -> bool:
        """Whether a statement should read through view ``name``: it exists, or its version is read a
        second time. A version read once binds inline, as without views: a table that changes between
        every read (a write-heavy workload) gets no view to make and drop, only one round trip per
        read as before; a version read again is made a view (one round trip) and then costs none."""
        with self._lock:
            if name in self._views:
                return True
            if name in self._seen:
                del self._seen[name]
                return True
            self._seen[name] = None
            while len(self._seen) > SEEN:
                self._seen.popitem(last=False)
            return False

    def use(self, owner: object, name: str, build: Callable[[], "DataFrame"], what: str) -> bool:
        """Hold view ``name`` while ``owner`` lives, making it from ``build()`` first unless it exists;
        returns whether it was made. Making it analyses the frame on the server: a missing file fails
        here, as an LvError."""
        with self._lock:
            v = self._views.get(name)
            made = v is None
            if v is None:
                with spark_errors(what):
                    build().createOrReplaceTempView(name)
                v = self._views[name] = _View(name)
                self.created += 1
            self._take(v)
            if made:
                self._drop_surplus()
        weakref.finalize(owner, self._release, (v,))
        return made

    def hold(self, owner: object, names: Iterable[str]) -> None:
        """Keep the views ``names`` while ``owner`` lives (a DataFrame's plan: every DataFrame derived
        from a result holds its plan, so the view outlives all of them)."""
        with self._lock:
            held = tuple(self._take(v) for n in names if (v := self._views.get(n)) is not None)
        if held:
            weakref.finalize(owner, self._release, held)

    def forget(self, names: Iterable[str]) -> None:
        """The session lost these views (dropped behind our back): make them again when next needed."""
        with self._lock:
            for n in names:
                self._views.pop(n, None)
                self._idle.pop(n, None)

    def _take(self, v: _View) -> _View:
        v.users += 1
        self._idle.pop(v.name, None)
        return v

    def _release(self, held: tuple[_View, ...]) -> None:
        with self._lock:
            for v in held:
                v.users -= 1
                if v.users == 0 and self._views.get(v.name) is v:  # not a view forgotten and made again
                    self._idle[v.name] = None

    def _drop_surplus(self) -> None:
        """Drop the least recently used idle views beyond ``keep_idle`` (under the lock)."""
        while len(self._idle) > self._keep_idle:
            name, _ = self._idle.popitem(last=False)
            del self._views[name]
            try:
                with spark_errors("dropping a view"):
                    self._spark.catalog.dropTempView(name)
                self.dropped += 1
            except LvError:  # an undropped view costs only server memory
                pass


_registry: "weakref.WeakKeyDictionary[Any, TableViews]" = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def views_for(spark: Any) -> TableViews:
    """The registry of ``spark``'s session (one per session object: temporary views are per session)."""
    with _registry_lock:
        got = _registry.get(spark)
        if got is None:
            got = _registry[spark] = TableViews(spark)
        return got


def pinned_view(engine: Any, snapshot: Snapshot, files: Mapping[str, AddFile], owner: object) -> str | None:
    """The name of a view holding exactly ``files`` of ``snapshot`` (made now if needed), held while
    ``owner`` lives; or None when no view is used and the caller binds the table inline: the files
    are not exactly the committed version's (the transaction's own writes are staged, and vanish on
    rollback), the data path is not ``direct`` (or the engine's ``pinned_views`` is off), or a
    partition column is a TIMESTAMP (its values are cast with the session time zone when the view
    is made, and the zone may change)."""
    table = snapshot.table
    if len(files) != len(snapshot.files) or any((g := snapshot.files.get(p)) is not f and g != f
                                                for p, f in files.items()):
        return None
    if not files or not engine.pinned_views or engine.ensure_path(table) != "direct":
        return None
    parts = {p.lower() for p in snapshot.partition_columns}
    if any(f.type == "timestamp" for f in snapshot.schema if f.name.lower() in parts):
        return None
    ordered = sorted(files.values(), key=lambda f: f.path)
    name = view_key(engine.url(table), snapshot, ordered)
    views = views_for(engine.spark)
    if not views.wanted(name):
        return None
    if not views.use(owner, name, lambda: engine.read(table, snapshot, ordered, analyse=False),  # the view analyses
                     f"reading {table!r}"):
        engine.scans.append((table, tuple(f.path for f in ordered)))  # read() records it when made
    return name
