"""The validation queue (group commit, LV[I]; docs/PROTOCOL.md, "Group commit"): the commit requests of
transactions waiting for the validation lock, ``_lakevilla/vq/<txn>~<tags>.json`` (``tags``: a short hash of
each table touched, so that a holder reads only the requests that may be disjoint from its tables)."""

from __future__ import annotations

import dataclasses
import json
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from lv_core import concurrency
from lv_core.concurrency import Pool
from lv_core.delta.actions import decode_commit
from lv_core.errors import LvError, NotFound
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.ict import commit_info_first
from lv_core.protocol.layout import LV_ROOT
from lv_core.protocol.markers import KEY
from lv_core.protocol.validation import Policy, TableAccess
from lv_core.storage.base import OVERWRITE, ObjectStore

log = logging.getLogger(__name__)

VQ_PREFIX = f"{LV_ROOT}/vq/"
#: the most requests one holder validates with its own
MAX_GROUP = 32
CHUNK = 16  # global versions read in parallel when looking for an outcome
#: above this many tables a request's key says ``all`` instead of naming each table's tag
MAX_TAGS = 64


def tag(table: str) -> str:
    """A table's tag in request keys: 8 hex digits of its CRC-32 (two tables may share one: a holder then
    reads a request it need not have, or skips one it could have grouped; never groups wrongly)."""
    return f"{zlib.crc32(table.encode()):08x}"


def request_key(txn: str, tables: Iterable[str]) -> str:
    """``_lakevilla/vq/<txn>~<tags>.json``."""
    tags = sorted({tag(t) for t in tables})
    return f"{VQ_PREFIX}{txn}~{'-'.join(tags) if 0 < len(tags) <= MAX_TAGS else 'all'}.json"


def parse_key(key: str) -> tuple[str, frozenset[str] | None] | None:
    """(txn, its tables' tags or None when the key says ``all``) of a request key, None if not one."""
    name = key[len(VQ_PREFIX):] if key.startswith(VQ_PREFIX) else ""
    if not name.endswith(".json") or "~" not in name:
        return None
    txn, _, tags = name[:-5].partition("~")
    if not txn:
        return None
    return txn, None if tags == "all" else frozenset(tags.split("-"))


@dataclass(frozen=True)
class RequestCommit:
    """One table's commit in a request: its actions (Delta JSON lines, no commitInfo), the LakeVilla
    commitInfo fields and whether the table has in-commit timestamps."""

    actions: bytes
    info: Mapping[str, Any]
    ict: bool

    def data(self, gvl: int) -> bytes:
        """The commit's bytes as a holder writes it, its commitInfo naming global version ``gvl``."""
        info = {**self.info, KEY: {**dict(self.info.get(KEY) or {}), "gvl": gvl}}
        return commit_info_first(decode_commit(self.actions), info, self.ict)


@dataclass(frozen=True)
class Request:
    """A queued commit request: ``known``, the newest global version it had seen (its outcome is published
    later); ``accesses`` as its own validation sees them; per written table its commit and (version, etag) of
    its marker; ``unsettled``: queued before its predecessors resolved, what it read
    (:func:`~lv_core.protocol.samegroup.unsettled`: only a holder that certifies it commits it)."""

    txn: str
    known: int
    accesses: tuple[TableAccess, ...]
    policy: Policy
    commits: Mapping[str, RequestCommit]
    markers: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    unsettled: Mapping[str, Any] | None = None

    @property
    def tables(self) -> frozenset[str]:
        return frozenset(a.table for a in self.accesses)

    @property
    def key(self) -> str:
        return request_key(self.txn, self.tables)

    def encode(self) -> bytes:
        return json.dumps({
            "txn": self.txn, "known": self.known, "policy": dataclasses.asdict(self.policy),
            "accesses": [dataclasses.asdict(a) for a in self.accesses],
            "commits": {t: {"actions": c.actions.decode(), "info": dict(c.info), "ict": c.ict}
                        for t, c in self.commits.items()},
            "markers": {t: [v, e] for t, (v, e) in self.markers.items()},
            **({} if self.unsettled is None else {"unsettled": dict(self.unsettled)}),
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Request":
        """Parse a request (ValueError: malformed; the holder skips it)."""
        try:
            b = json.loads(data)
            accesses = tuple(TableAccess(**a) for a in b["accesses"])
            commits = {str(t): RequestCommit(str(c["actions"]).encode(), dict(c["info"]), bool(c["ict"]))
                       for t, c in dict(b["commits"]).items()}
            markers = {str(t): (int(m[0]), str(m[1])) for t, m in dict(b["markers"]).items()}
            un = b.get("unsettled")
            req = cls(str(b["txn"]), int(b["known"]), accesses, Policy(**b["policy"]), commits, markers,
                      None if un is None else dict(un))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"malformed validation request ({e})") from None
        written = {a.table for a in accesses if a.written}
        if set(commits) != written or set(markers) != written:
            raise ValueError("a validation request must give a commit and a marker for every written table")
        return req


def put_request(store: ObjectStore, req: Request) -> None:
    """Queue ``req`` (1 PUT)."""
    store.put(req.key, req.encode(), mode=OVERWRITE)


def any_queued(store: ObjectStore) -> bool:
    """Whether any request is queued (1 LIST)."""
    return any(True for _ in store.list(VQ_PREFIX))


def withdraw(store: ObjectStore, key: str) -> None:
    """Remove a request (1 DELETE; a missing one is fine)."""
    store.delete(key)


def pending(store: ObjectStore, *, skip: str | Iterable[str] = (), avoid: Iterable[str] = (),
            limit: int = MAX_GROUP, only: Iterable[str] | None = None,
            listed: Callable[[int], None] | None = None) -> list[Request]:
    """The queued requests (oldest txn ids first, at most ``limit``) but those of ``skip``, and those whose
    tags show a table of ``avoid`` or (``only``) one not in ``only``; ``listed(n)`` is told how many are read,
    before they are. Cost: 1 LIST + 1 GET per request read."""
    busy = {tag(t) for t in avoid}
    allowed = None if only is None else {tag(t) for t in only}
    skipped = {skip} if isinstance(skip, str) else set(skip)
    keys = []
    for meta in store.list(VQ_PREFIX):
        parsed = parse_key(meta.key)
        if parsed is None or parsed[0] in skipped or (parsed[1] is not None and parsed[1] & busy) or (
                allowed is not None and (parsed[1] is None or not parsed[1] <= allowed)):
            continue
        keys.append((parsed[0], meta.key))
    keys = sorted(keys)[:limit]
    if listed is not None:
        listed(len(keys))

    def one(item: tuple[str, str]) -> Request | None:
        txn, key = item
        try:
            req = Request.decode(store.get(key).data)
        except NotFound:
            return None
        except ValueError as e:
            log.warning("skipping the validation request of %s: %s", txn, e)
            return None
        return req if req.txn == txn and req.key == key else None

    return [r for r in concurrency.gather(Pool.REQUESTS, one, keys) if r is not None]


def outcome_of(glog: GlobalLog, txn: str, after: int,
               head: GvlState | None = None) -> tuple[GvlState, Mapping[str, Any]] | None:
    """The global version after ``after`` (up to ``head``, read when not given) whose group names ``txn``, with
    its outcome there, or None. Cost: the head (unless given) + 1 GET per version not cached (in parallel)."""
    head = glog.head() if head is None else head
    for start in range(after + 1, head.version + 1, CHUNK):
        for state in _states(glog, range(start, min(start + CHUNK, head.version + 1)), head):
            if state is not None and (got := state.group.get(txn)) is not None:
                return state, got
    return None


def read_ahead(glog: GlobalLog, after: int, upto: int) -> int:
    """Read the newest global versions past ``after`` up to ``upto`` (at most :data:`CHUNK`) into the log's cache:
    the last one before the first not published (a waiter's look ahead, :class:`lv_core.txn.group.Waiter`)."""
    versions = range(max(after + 1, upto - CHUNK + 1), upto + 1)
    return next((v - 1 for v, st in zip(versions, _states(glog, versions), strict=True) if st is None), upto)


def _states(glog: GlobalLog, versions: Sequence[int], head: GvlState | None = None) -> list[GvlState | None]:
    """Global versions ``versions`` (``head`` among them: not read again), in parallel; None: not published."""

    def at(v: int) -> GvlState | None:
        try:
            return head if head is not None and v == head.version else glog.at(v)
        except LvError:  # GlobalVersionNotFound included
            return None

    return concurrency.gather(Pool.REQUESTS, at, versions)


__all__ = ["CHUNK", "MAX_GROUP", "MAX_TAGS", "VQ_PREFIX", "Request", "RequestCommit", "any_queued", "outcome_of",
           "parse_key", "pending", "put_request", "read_ahead", "request_key", "tag", "withdraw"]
