"""Module #4.1: the global version log (LV[I]).

The log is a chain of immutable objects, one per global version ``n``::

    _lakevilla/gvl/<n:020d>.json   {"version": n, "tables": {table: Delta version}, "txn": ..., "ts": ...}
    _lakevilla/gvl/_latest         a copy of some recent version (overwritten; may lag, never leads)

``tables`` maps every table the log knows to its latest *validated* Delta version. A new global
version is published by put-if-absent of ``n + 1`` (only the holder of the validation lock does
so), so the log can never fork and has no holes. Readers find the head without LIST: GET the
``_latest`` hint, then probe ``n + 1, n + 2, ...``. No log at all is global version -1 with no
tables. A table the log does not know yet is enrolled (named at its latest version, under the
validation key) before an LV[I] transaction reads it: :mod:`lv_core.txn.enroll`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from lv_core import concurrency
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.log import DeltaLog
from lv_core.delta.table import validate_table_name
from lv_core.errors import AlreadyExists, LvError, NotFound, StorageError
from lv_core.protocol.layout import LV_ROOT, commit_key
from lv_core.storage.base import CREATE, OVERWRITE, ObjectStore

log = logging.getLogger(__name__)

GVL_PREFIX = f"{LV_ROOT}/gvl/"
#: The head hint: overwritten after each publish, may lag behind the real head, never leads it.
GVL_LATEST_KEY = f"{GVL_PREFIX}_latest"
#: Probes done one by one (GET) before switching to a galloping search (HEAD) when far behind.
#: The default number of global versions read one by one before galloping (:meth:`GlobalLog.head`).
LINEAR_PROBES = 4
_CACHE_SIZE = 64
#: At most this many changed tables of an object found at the next global version are looked up in their
#: logs (HEADs in parallel) when telling a foreign object from another holder's version (:meth:`GlobalLog.publish`).
FOREIGN_CHECKS = 32


def move_out(key: str) -> str:
    """The advice for an object another client put into the global version log (LakeVilla never removes one:
    an unconditional DELETE could remove a real version published meanwhile)."""
    return f"move {key} out of the warehouse (keep a copy) while no LakeVilla transaction commits, then retry"


def _lacks(table: str, version: int, latest: int | None = None) -> str:
    return (f"it names table {table!r} at version {version}, but the table's log has no version {version}"
            + (f" (its latest is {latest})" if latest is not None else ""))


def gvl_key(version: int) -> str:
    """``_lakevilla/gvl/<version:020d>.json``."""
    if version < 0:
        raise ValueError(f"negative global version {version}")
    return f"{GVL_PREFIX}{version:020d}.json"


class GlobalLogError(LvError):
    """The global version log is malformed or was used inconsistently."""


class GlobalVersionNotFound(GlobalLogError):
    """The requested global version does not exist (yet)."""


class GlobalLogConflict(GlobalLogError):
    """Publishing ``n + 1`` found it already published by another transaction.

    Only possible when validation's mutual exclusion was broken (e.g. a holder kept writing after
    its lock lease ran out and was taken over); nothing of the caller's publish happened.
    """


class ForeignGlobalVersion(GlobalLogError):
    """An object in the global version log that no LakeVilla holder wrote (malformed, another version's
    number, no transaction, going back on the version below, or naming table versions the tables' logs
    do not hold): another client put it there. Raised by a publish that finds it at ``n + 1`` (nothing of
    the publish happened) and by a read of it (with the advice to move it out: ``advise``).

    Attributes:
        version: the global version whose object is foreign.
        key: its object key.
        problems: what is wrong with it, one sentence each.
    """

    def __init__(self, version: int, problems: list[str], *, advise: bool = False) -> None:
        self.version, self.key, self.problems = version, gvl_key(version), problems
        advice = (f". Help: LakeVilla writes each global version once, whole, and never changes it, so another "
                  f"client wrote this object; if it is the newest, {move_out(self.key)}") if advise else ""
        super().__init__(f"global version {version} ({self.key}) was not written by LakeVilla: "
                         f"{'; '.join(problems)}{advice}")


@dataclass(frozen=True)
class GvlState:
    """One global version: every known table's latest validated Delta version.

    Attributes:
        version: the global version number; -1 when no log exists yet.
        tables: table -> Delta version.
        txn: the transaction that published it (None for version -1).
        ts: publish time (seconds since the epoch; 0.0 for version -1).
        group: the other transactions ``txn`` validated and committed with its own (group commit):
            txn -> ``{"versions": {table: version}}``, or ``{"rule": ..., "reason": ...}`` when its
            recorded plan broke while being written (see :mod:`lv_core.txn.group`).
    """

    version: int
    tables: Mapping[str, int] = field(default_factory=dict)
    txn: str | None = None
    ts: float = 0.0
    group: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def table_version(self, table: str) -> int | None:
        """The Delta version of ``table`` in this global version, or None if the log does not know it."""
        return self.tables.get(table)

    def to_json(self) -> dict[str, Any]:
        out = {"version": self.version, "tables": dict(sorted(self.tables.items())), "txn": self.txn, "ts": self.ts}
        if self.group:
            out["group"] = {t: dict(g) for t, g in sorted(self.group.items())}
        return out

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, *, expect_version: int | None = None) -> "GvlState":
        """Parse a global version object.

        Raises:
            GlobalLogError: not JSON, wrong shape, or not the version its key says.
        """
        try:
            body = json.loads(data)
            version = int(body["version"])
            tables = {str(t): int(v) for t, v in dict(body.get("tables") or {}).items()}
            txn = body.get("txn")
            ts = float(body.get("ts") or 0.0)
            group = {str(t): dict(g) for t, g in dict(body.get("group") or {}).items()}
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise GlobalLogError(f"malformed global version object ({e})") from None
        if expect_version is not None and version != expect_version:
            raise GlobalLogError(f"global version object {expect_version} says it is version {version}")
        return cls(version, tables, txn if isinstance(txn, str) else None, ts, group)


EMPTY = GvlState(-1)


class GlobalLog:
    """Reader and publisher of the global version log in ``store``. Thread-safe.

    One instance per lakehouse: it remembers the newest head it has seen (probing resumes from
    there) and caches immutable versions for :meth:`at`.
    """

    def __init__(self, store: ObjectStore, defer: Callable[[str, Callable[[], object]], None] | None = None,
                 *, linear_probes: int = LINEAR_PROBES) -> None:
        """``defer(what, fn)``: run ``fn`` off the caller's path (the ``_latest`` hint is written so,
        after the lock holder released the validation lock); None: at once. ``linear_probes``: see
        :meth:`head` (the lakehouse's ``Tuning.gvl_linear_probes``)."""
        self.store = store
        self.linear_probes = linear_probes
        self.defer = defer
        self._lock = threading.Lock()
        self._known: GvlState | None = None
        self._cache: OrderedDict[int, GvlState] = OrderedDict()

    def __repr__(self) -> str:
        return f"GlobalLog(head>={self._known.version if self._known else '?'})"

    # ------------------------------------------------------------------ reading
    def head(self) -> GvlState:
        """The newest published global version (version -1 and no tables if no log exists).

        Cost (no LIST ever): from a fresh instance, 1 GET of the hint + ``d + 1`` GETs where ``d`` is
        how far the hint lags (0 or 1 normally); from an instance that has seen a head before,
        ``d + 1`` GETs counted from that head (1 GET when nothing changed). When more than
        ``linear_probes`` versions are new, it re-reads the hint and then gallops with HEADs
        (``O(log d)``) and GETs the head found.

        Raises:
            GlobalLogError: a log object is malformed.
            StorageError: the store failed.
        """
        with self._lock:
            state = self._known
        hinted = state is None
        if state is None:
            state = self._read_hint() or EMPTY
        state = self._advance(state, hinted=hinted)
        self._remember(state)
        return state

    def known(self) -> int:
        """The newest global version this instance has seen (-1: none yet). No request."""
        with self._lock:
            return self._known.version if self._known is not None else -1

    def known_state(self) -> GvlState | None:
        """The newest global version this instance has seen (None: none yet). No request."""
        with self._lock:
            return self._known

    def at(self, version: int) -> GvlState:
        """Global version ``version`` (time travel: the whole lakehouse as of that version).

        ``at(-1)`` is the empty log. Cost: 1 GET (0 when cached, or the newest version this instance saw).

        Raises:
            GlobalVersionNotFound: that version was never published.
            GlobalLogError: the object is malformed.
        """
        if version == -1:
            return EMPTY
        if version < -1:
            raise GlobalVersionNotFound(f"global version {version} does not exist")
        with self._lock:
            cached = self._cache.get(version)
            if cached is None and self._known is not None and self._known.version == version:
                cached = self._known  # the head this instance saw last
        if cached is not None:
            return cached
        with self._lock:
            below = self._cache.get(version - 1)  # judged against it when at hand (no request)
        state = self._get(version, below)
        if state is None:
            raise GlobalVersionNotFound(
                f"global version {version} does not exist. Help: `head()` tells the newest published version.")
        return state

    def as_of(self, ts: float) -> GvlState:
        """The newest global version published at or before ``ts`` (seconds since the epoch).

        Binary search over ``0 .. head``: 1 head() + ``O(log n)`` GETs. Returns the empty state
        (-1) when ``ts`` precedes the first version.
        """
        head = self.head()
        if head.version < 0 or head.ts <= ts:
            return head
        lo, hi = -1, head.version  # at(lo).ts <= ts (or lo == -1), at(hi).ts > ts
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.at(mid).ts <= ts:
                lo = mid
            else:
                hi = mid
        return self.at(lo)

    def check_head(self) -> GvlState:
        """The head, checked the way a publish checks an object it finds at its version (`lv recover`), except
        that a table version missing from its log counts only when it is past the log's latest version (an
        old head may name one cleaned up since; a table without a log tells nothing).

        Cost: :meth:`head` + 1 GET (the version before) + 1 HEAD per table the head changed (up to
        :data:`FOREIGN_CHECKS`), and the log's latest version of each one missing.

        Raises:
            ForeignGlobalVersion: no LakeVilla holder can have written the head.
            StorageError: the store failed.
        """
        return self.vouch(self.head())

    def vouch(self, head: GvlState) -> GvlState:
        """``head``, checked as :meth:`check_head` does: by a holder of the validation key before it builds on a
        head it read that the free record it claimed did not name (a version nobody released the key
        naming: after a voided plan, a crash, or put there by another client; never on the usual path).

        Raises:
            ForeignGlobalVersion: no LakeVilla holder can have written ``head`` (this instance forgets it).
            StorageError: the store failed.
        """
        if head.version < 0:
            return head
        problems = self._foreign(head, self.at(head.version - 1), cleaned_up=True)
        if problems:
            self.forget(head.version)
            raise ForeignGlobalVersion(head.version, problems, advise=True)
        return head

    def refuse_missing(self, state: GvlState, error: VersionNotFound) -> LvError:
        """What to raise when reading table ``error.table`` at the version global version ``state`` names
        failed with ``error`` (its log lacks that version). A holder publishes only versions already in the
        tables' logs, and a log never loses its newest version, so one past the log's latest was made up
        by another client: :class:`ForeignGlobalVersion` (with the advice to move it out), and this
        instance forgets ``state`` (:meth:`forget`). Else (cleaned up since, or not the version ``state``
        names) ``error`` itself.

        Cost: nothing when ``error`` knows the log's latest version, else finding it (this error path only).
        """
        v = state.table_version(error.table)
        if state.version < 0 or v is None or v != error.version:
            return error
        latest = error.latest if error.latest is not None else self._latest_of(error.table)
        if latest is None or v <= latest:
            return error
        self.forget(state.version)
        return ForeignGlobalVersion(state.version, [_lacks(error.table, v, latest)], advise=True)

    def forget(self, version: int) -> None:
        """Forget global version ``version`` and every later one this instance saw (refused: another client
        wrote it), so that the next :meth:`head` reads the log again instead of serving it from memory."""
        with self._lock:
            for v in [v for v in self._cache if v >= version]:
                del self._cache[v]
            if self._known is not None and self._known.version >= version:
                self._known = self._cache.get(version - 1)

    # ------------------------------------------------------------------ publishing
    def publish(self, base: GvlState, updates: Mapping[str, int], txn: str,
                group: Mapping[str, Mapping[str, Any]] | None = None) -> GvlState:
        """Publish ``base.version + 1`` = ``base.tables`` updated with ``updates`` (put-if-absent);
        ``group``: the outcome of the other transactions committed with ``txn``'s (group commit).

        Call only while holding the validation lock, with ``base`` = the head read under it.
        Idempotent for one ``txn``: if ``base.version + 1`` already holds a version published by
        ``txn`` (a roll forward got there first), that version is returned. An object there that
        another holder cannot have written (:meth:`_holders`) raises :class:`ForeignGlobalVersion`,
        one that another holder did write :class:`GlobalLogConflict`. Then the ``_latest``
        hint is overwritten (best effort: a failure only makes readers probe one more version; with
        ``defer``, in the background: hints written out of order only lag).
        Cost: 1 PUT-create + 1 PUT (+ 1 GET when the version already exists, and then 1 HEAD per table
        another transaction's version there names at a version ``base`` does not, up to :data:`FOREIGN_CHECKS`).

        Raises:
            GlobalLogConflict: another transaction published ``base.version + 1``.
            ForeignGlobalVersion: ``base.version + 1`` holds an object no LakeVilla holder wrote.
            StorageError: the store failed (the publish may or may not have landed: retrying
                with the same arguments is safe).
        """
        tables = dict(base.tables)
        tables.update({str(t): int(v) for t, v in updates.items()})
        new = GvlState(base.version + 1, tables, txn, time.time(), dict(group or {}))
        try:
            self.store.put(gvl_key(new.version), new.encode(), mode=CREATE)
        except AlreadyExists:
            existing = self._holders(base, txn)
            if existing is None or existing.txn != txn:
                who = existing.txn if existing is not None else "?"
                raise GlobalLogConflict(
                    f"global version {new.version} was already published by {who}, not by {txn}") from None
            new = existing
        self._cached(new)
        self._remember(new)
        if self.defer is not None:
            self.defer(f"global log hint {new.version}", lambda: self._write_hint(new))
        else:
            self._write_hint(new)
        return new

    # ------------------------------------------------------------------ internals
    def _get(self, version: int, below: GvlState | None = None) -> GvlState | None:
        """Global version ``version`` (None: not published), refused (:class:`ForeignGlobalVersion`) when its
        content alone shows that no holder wrote it: malformed, another number, no transaction, an invalid
        table, or (``below``: the version before, when at hand) dropping or going back on one of its tables.
        No request more, except 1 GET of the version before when only the ``_latest`` hint's copy of it
        found a problem (the hint is overwritten by anyone: a bad one must not condemn a real version)."""
        try:
            data = self.store.get(gvl_key(version)).data
        except NotFound:
            return None
        try:
            state = GvlState.decode(data, expect_version=version)
        except GlobalLogError as e:
            raise ForeignGlobalVersion(version, [str(e)], advise=True) from None
        problems = self._foreign(state, below, look_up=False)
        if problems and below is not None and not self._read_from_log(below):
            problems = self._foreign(state, EMPTY if version == 0 else self._get(version - 1), look_up=False)
        if problems:
            raise ForeignGlobalVersion(version, problems, advise=True)
        return self._cached(state)

    def _read_from_log(self, state: GvlState) -> bool:
        """Whether ``state`` is a version read from its own object (or published) by this instance, not a hint."""
        with self._lock:
            return state.version < 0 or self._cache.get(state.version) == state

    def _cached(self, state: GvlState) -> GvlState:
        with self._lock:
            self._cache[state.version] = state
            self._cache.move_to_end(state.version)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return state

    def _holders(self, base: GvlState, txn: str) -> GvlState | None:
        """The object at ``base.version + 1``, found there by ``txn``'s publish on ``base``, if a LakeVilla
        holder wrote it (None: gone again), else :class:`ForeignGlobalVersion`.

        A holder writes the whole object at once (put-if-absent), as JSON of its own version, naming its
        transaction, every table ``base`` names (``n + 1`` is built on the immutable ``n``) and each table
        it changes at a version it wrote into the table's log before publishing. An object failing any of
        these was written by another client (checked only here, after a failed publish: readers pay nothing).
        """
        version = base.version + 1
        try:
            data = self.store.get(gvl_key(version)).data
        except NotFound:
            return None
        try:
            state = GvlState.decode(data, expect_version=version)
        except GlobalLogError as e:
            raise ForeignGlobalVersion(version, [str(e)]) from None
        if state.txn != txn:
            problems = self._foreign(state, base)
            if problems:
                raise ForeignGlobalVersion(version, problems)
        return self._cached(state)

    def _foreign(self, state: GvlState, base: GvlState | None, *, look_up: bool = True,
                 cleaned_up: bool = False) -> list[str]:
        """Why another holder cannot have written ``state`` on top of ``base`` (empty: it may have; None: the
        version before is not at hand). ``look_up``: also HEAD the log version of each table it changed (up to
        :data:`FOREIGN_CHECKS`); ``cleaned_up``: a missing one counts only when past its log's latest version."""
        problems = [] if state.txn else ["it names no transaction"]
        dropped = sorted(set(base.tables) - set(state.tables)) if base is not None else []
        if base is not None and dropped:
            problems.append(f"it drops table(s) {', '.join(map(repr, dropped[:5]))} that global version "
                            f"{base.version} names")
        changed = []
        for t, v in sorted(state.tables.items()):
            was = base.tables.get(t) if base is not None else None
            if base is not None and was is not None and v < was:
                problems.append(f"it names table {t!r} at version {v}, older than version {was} of global version "
                                f"{base.version}")
            elif was != v:
                try:
                    changed.append((validate_table_name(t), v))
                except LvError as e:
                    problems.append(f"it names an invalid table: {e}")
        if not changed or not look_up:
            return problems

        looked = changed[:FOREIGN_CHECKS]
        there = concurrency.gather(concurrency.Pool.REQUESTS, lambda tv: self.store.exists(commit_key(*tv)), looked)
        missing = [tv for tv, found in zip(looked, there, strict=True) if not found]
        if not cleaned_up:
            return problems + [_lacks(t, v) for t, v in missing]
        latest = concurrency.gather(concurrency.Pool.REQUESTS, lambda tv: self._latest_of(tv[0]), missing)
        return problems + [_lacks(t, v, last) for (t, v), last in zip(missing, latest, strict=True)
                           if last is not None and v > last]

    def _latest_of(self, table: str) -> int | None:
        """The latest version of ``table``'s log (None: it has none, or it could not be read)."""
        try:
            return DeltaLog(self.store, table).latest_version()
        except LvError:
            return None

    def _exists(self, version: int) -> bool:
        return self.store.exists(gvl_key(version))

    def _read_hint(self) -> GvlState | None:
        try:
            hint = GvlState.decode(self.store.get(GVL_LATEST_KEY).data)
        except NotFound:
            return None
        except GlobalLogError:
            log.warning("ignoring a malformed %s", GVL_LATEST_KEY)
            return None
        if not hint.txn:  # a copy of a published version names its transaction
            log.warning("ignoring %s: it names no transaction", GVL_LATEST_KEY)
            return None
        return hint

    def _write_hint(self, state: GvlState) -> None:
        try:
            self.store.put(GVL_LATEST_KEY, state.encode(), mode=OVERWRITE)
        except StorageError as e:  # only a hint: readers probe past it
            log.warning("could not update %s: %s", GVL_LATEST_KEY, e)

    def _advance(self, state: GvlState, *, hinted: bool = False) -> GvlState:
        """From a version known to exist (or -1), find the head: linear GETs, then gallop. Versions this
        instance read already (e.g. a group-commit member looking for the version naming it) are not read
        again: published versions never change.

        The first GET is alone (usually nothing is new). When it finds a version, the next one and the
        ``_latest`` hint are read at once (issue 38: a process whose head lagged by a few versions read them
        one round trip each, then the hint, then galloped: 9 round trips to learn 5 versions); a hint ahead
        is jumped to, else the linear GETs go on up to ``linear_probes`` versions before the hint is read.
        ``hinted``: ``state`` is the hint, just read (it is not read again)."""
        while True:
            with self._lock:
                ahead = self._cache.get(state.version + 1)
            if ahead is None:
                break
            state = ahead
        hint: GvlState | None = None
        for probe in range(self.linear_probes):
            if probe == 1 and not hinted:
                def one(which: bool, here: GvlState = state) -> GvlState | None:
                    return self._get(here.version + 1, here) if which else self._read_hint()

                nxt, hint = concurrency.gather_or_inline(concurrency.Pool.REQUESTS, one, [True, False])
                hinted = True
            else:
                nxt = self._get(state.version + 1, state)
            if nxt is None:
                return state
            state = nxt
            if hint is not None and hint.version > state.version:
                break  # (jump there now)
        if not hinted:
            hint = self._read_hint()  # far behind: the hint may jump ahead of us
        if hint is not None and hint.version > state.version:
            state = hint
            nxt = self._get(state.version + 1, state)
            if nxt is None:
                return state
            state = nxt
        lo, step = state.version, 1  # lo exists; gallop with HEADs, then binary search
        while self._exists(lo + step):
            lo, step = lo + step, step * 2
        hi = lo + step
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._exists(mid):
                lo = mid
            else:
                hi = mid
        return state if lo == state.version else self.at(lo)

    def _remember(self, state: GvlState) -> None:
        with self._lock:
            if self._known is None or state.version > self._known.version:
                self._known = state


__all__ = [
    "EMPTY",
    "FOREIGN_CHECKS",
    "ForeignGlobalVersion",
    "GVL_LATEST_KEY",
    "GVL_PREFIX",
    "GlobalLog",
    "GlobalLogConflict",
    "GlobalLogError",
    "GlobalVersionNotFound",
    "GvlState",
    "gvl_key",
    "move_out",
]
