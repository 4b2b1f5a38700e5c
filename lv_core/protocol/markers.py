"""Module #1: markers, kept beside the Delta log so that no ``_delta_log`` file is ever rewritten.

A marker reserving Delta version ``v`` of a table is the object ``_lakevilla/markers/<table>/<v>.json``
(put-if-absent), holding one ``commitInfo`` line whose ``lakevilla`` field carries the bookkeeping
(transaction id, predecessors, creation time, lease expiry). The version itself is resolved by
writing ``<table>/_delta_log/<v>.json`` exactly once (put-if-absent): the owner writes its commit
there, or an empty "freed" commit is written once the marker was given up. Whichever lands first is
final, so the Delta file is the single arbiter between a commit and a free; the marker object is
only bookkeeping and may be rewritten (new edges, "freed" before the log can take the version).

A version therefore reads as (Delta file first, then marker object):
- ``commit`` / ``freed`` with ``filled=True``: the Delta file exists (final);
- ``marker`` (pending): no Delta file, the marker object holds a live reservation;
- ``freed`` with ``filled=False``: no Delta file yet, the marker was given up; the first writer that
  needs a later version writes the empty commit (:func:`fill_version`), never leaving a gap in the log.

Encoding and classification here are pure; placement and freeing do I/O through an ObjectStore.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Container, Mapping, Sequence

from lv_core import concurrency
from lv_core.delta.actions import json_lines
from lv_core.errors import AlreadyExists, DeltaLogError, NotFound, PreconditionFailed
from lv_core.protocol import ict as _ict
from lv_core.protocol.ict import FIELD as ICT_FIELD
from lv_core.protocol.ict import same_commit
from lv_core.protocol.layout import commit_key, marker_key, markers_prefix
from lv_core.storage.base import CREATE, GetResult, IfMatch, ObjectStore

KEY = "lakevilla"
MARKER_OP = "LAKEVILLA MARKER"
FREED_OP = "LAKEVILLA FREE"
COMMIT_OP_PREFIX = "LAKEVILLA "


@dataclass(frozen=True)
class Footprint:
    """Data files a transaction's results depend on (exposed reads) and files it rewrote, per table."""

    reads: Mapping[str, frozenset[str]] = field(default_factory=dict)
    removes: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"reads": {t: sorted(v) for t, v in self.reads.items() if v},
                "removes": {t: sorted(v) for t, v in self.removes.items() if v}}

    @classmethod
    def from_json(cls, d: Any) -> "Footprint | None":
        """The footprint a marker carries; None when missing or malformed (then nothing is known)."""
        if not isinstance(d, dict):
            return None
        out: dict[str, dict[str, frozenset[str]]] = {"reads": {}, "removes": {}}
        for part in out:
            m = d.get(part, {})
            if not isinstance(m, dict):
                return None
            for t, paths in m.items():
                if not isinstance(t, str) or not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                    return None
                out[part][t] = frozenset(paths)
        return cls(out["reads"], out["removes"])


@dataclass(frozen=True)
class MarkerInfo:
    """The bookkeeping a marker carries."""

    txn: str
    predecessors: tuple[dict, ...] = ()  # outgoing DAG edges: {"txn", "table", "version"}
    created: float = 0.0
    lease_expires: float = 0.0
    client: str = ""
    #: what the owner did so far, for the first-updater check of the transaction it queues behind
    #: (:func:`lv_core.protocol.conflicts.first_updater`): "reads" (data files whose content reached
    #: the caller) and "removes" (data files it rewrote or deleted), each table -> paths; None: not told
    footprint: Footprint | None = None
    #: the name its owner gave the transaction (``Lakehouse.begin(name=...)``, ``%lv begin NAME``), for
    #: other clients to show it by; "" when unnamed (and in markers written before the field existed)
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "marker",
            "txn": self.txn,
            "predecessors": [dict(p) for p in self.predecessors],
            "created": self.created,
            "leaseExpires": self.lease_expires,
            "client": self.client,
        }
        if self.footprint is not None:
            out["footprint"] = self.footprint.to_json()
        if self.name:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class VersionState:
    """What one Delta version currently is, from LakeVilla's point of view."""

    version: int
    kind: str  # "marker" (pending), "freed", "commit" (real actions, LakeVilla or foreign)
    etag: str
    txn: str | None = None  # owner / committer when written by LakeVilla
    marker: MarkerInfo | None = None
    raw: bytes = field(default=b"", repr=False)
    #: a LakeVilla multi-table commit outside the global log: every (table, version) it commits at
    parts: tuple[tuple[str, int], ...] = ()
    #: the Delta file exists (False: read from the marker object; ``etag`` is then the marker's)
    filled: bool = True

    @property
    def pending(self) -> bool:
        return self.kind == "marker"


NAME_MAX = 64  # longest owner's name kept from a marker (longer: cut); markers stay small
_NAMES: "OrderedDict[str, str]" = OrderedDict()  # txn id -> its owner's name, as learnt from markers read
_NAMES_MAX = 4096
_NAMES_LOCK = threading.Lock()


def owner_name(value: Any) -> str:
    """A marker's ``name`` field as shown to people: text, one line, at most :data:`NAME_MAX`
    characters; anything else (missing, null, a number) reads as "" (unnamed)."""
    if not isinstance(value, str):
        return ""
    return " ".join(value.split())[:NAME_MAX]


def learn_name(txn: str, name: str) -> None:
    """Remember the name of ``txn`` (read from one of its markers): messages and views of this
    process then show another client's transaction by its name (bounded: the oldest are forgotten)."""
    with _NAMES_LOCK:
        _NAMES[txn] = name
        _NAMES.move_to_end(txn)
        while len(_NAMES) > _NAMES_MAX:
            _NAMES.popitem(last=False)


def name_of(txn: str) -> str | None:
    """The name of ``txn`` learnt from its markers in this process, or None."""
    with _NAMES_LOCK:
        return _NAMES.get(txn)


def _commit_info_line(operation: str, lv: dict[str, Any], ict: bool = False) -> bytes:
    ci: dict[str, Any] = {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operationParameters": {},
        "engineInfo": "lakevilla-jupyter",
        KEY: lv,
    }
    if ict:
        ci[ICT_FIELD] = None  # sealed when written to the log (lv_core.protocol.ict)
    return (json.dumps({"commitInfo": ci}, separators=(",", ":")) + "\n").encode()


def encode_marker(info: MarkerInfo) -> bytes:
    """The bytes of a marker commit."""
    return _commit_info_line(MARKER_OP, info.to_json())


def encode_freed(txn: str, reason: str, by: str | None = None, *, ict: bool = False) -> bytes:
    """The bytes of a freed marker: an empty commit that says who freed whose marker and why (``ict``:
    the table has in-commit timestamps; the log copy gets one when written)."""
    lv: dict[str, Any] = {"kind": "freed", "txn": txn, "reason": reason}
    if by:
        lv["by"] = by
    return _commit_info_line(FREED_OP, lv, ict)


def lakevilla_commit_info(txn: str, operation: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """commitInfo payload for a real LakeVilla commit (so later readers know who committed it)."""
    lv = {"kind": "commit", "txn": txn}
    if extra:
        lv.update(extra)
    return {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operationParameters": {},
        "engineInfo": "lakevilla-jupyter",
        KEY: lv,
    }


def _seconds(lv: dict[str, Any], name: str, version: int, txn: str) -> float:
    """A marker's time field (seconds since the epoch; missing or null reads as 0).

    Raises:
        DeltaLogError: the field is not a finite number (e.g. text written by another client).
    """
    value = lv.get(name)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DeltaLogError(f"version {version}: marker of transaction {txn!r} has a malformed {name} "
                            f"field {value!r} (expected seconds since the epoch, a number)")
    return float(value)


def classify(version: int, raw: bytes, etag: str, *, filled: bool = True) -> VersionState:
    """Classify bytes as marker, freed marker or real commit (pure).

    ``filled``: the bytes are the Delta file (a marker found there, written by an older LakeVilla
    that kept markers in the log, is final: an empty commit, read as freed); else the marker object."""
    lv: dict[str, Any] | None = None
    n_actions = 0
    for lineno, obj in json_lines(raw, f"commit {version}"):
        if not isinstance(obj, dict):
            raise DeltaLogError(f"version {version}: line {lineno} is not a JSON object")
        n_actions += 1
        ci = obj.get("commitInfo")
        if isinstance(ci, dict) and isinstance(ci.get(KEY), dict):
            lv = ci[KEY]
    if lv is None:
        return VersionState(version, "commit", etag, raw=raw)
    kind = lv.get("kind")
    txn = lv.get("txn") if isinstance(lv.get("txn"), str) else None
    if kind == "marker" and n_actions == 1 and txn and filled:
        return VersionState(version, "freed", etag, txn=txn, raw=raw)
    if kind == "marker" and n_actions == 1 and txn:
        preds = lv.get("predecessors") or []
        if not isinstance(preds, list):
            raise DeltaLogError(f"version {version}: marker of transaction {txn!r} has a malformed "
                                f"predecessors field {preds!r} (expected a list)")
        info = MarkerInfo(
            txn=txn,
            predecessors=tuple(p for p in preds if isinstance(p, dict)),
            created=_seconds(lv, "created", version, txn),
            lease_expires=_seconds(lv, "leaseExpires", version, txn),
            client=str(lv.get("client") or ""),
            footprint=Footprint.from_json(lv.get("footprint")),
            name=owner_name(lv.get("name")),
        )
        if info.name:
            learn_name(txn, info.name)
        return VersionState(version, "marker", etag, txn=txn, marker=info, raw=raw, filled=False)
    if kind == "freed" and n_actions == 1:
        return VersionState(version, "freed", etag, txn=txn, raw=raw, filled=filled)
    # A real commit (LakeVilla's own, or a malformed/foreign marker, which we treat as a commit).
    return VersionState(version, "commit", etag, txn=txn, raw=raw, parts=_parts(lv, txn) if kind == "commit" else ())


def _parts(lv: dict[str, Any], txn: str | None) -> tuple[tuple[str, int], ...]:
    """The (table, version) parts of a multi-table commit outside the global log (LV[CT] without
    LV[I]), from its commitInfo ``at`` map; () for anything else (ignored when malformed)."""
    at = lv.get("at")
    if not txn or "gvl" in lv or not isinstance(at, dict) or len(at) < 2:
        return ()
    return tuple(sorted((t, v) for t, v in at.items()
                        if isinstance(t, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0))


def unfinished_part(store: ObjectStore, table: str, st: VersionState) -> tuple[str, VersionState] | None:
    """For a part of a multi-table commit outside the global log (``st.parts``), another part that is
    still the same transaction's pending marker: (table, its state), else None (1 GET per other part).

    LV[I] treats such a commit as pending: publishing it in a global version before its other parts
    would show half of a multi-table commit to readers at that global version."""
    for t, v in st.parts:
        if t == table:
            continue
        try:
            other = read_version(store, t, v)
        except NotFound:
            continue
        if other.pending and other.txn == st.txn:
            return t, other
    return None


def read_version(store: ObjectStore, table: str, version: int, *, fill: bool = False) -> VersionState:
    """What ``table``'s version ``version`` is: its Delta file, else its marker (raises NotFound if
    neither exists). With ``fill``, a freed marker whose version the log does not hold yet is
    written to the log as an empty commit when the version below it exists (:func:`fill_version`)."""
    logged = read_log_version(store, table, version)
    if logged is not None:
        return logged
    res = store.get(marker_key(table, version))
    st = classify(version, res.data, res.etag, filled=False)
    if st.kind == "commit":  # not a marker object we understand (no owner): never a commit, nothing to wait for
        st = VersionState(version, "freed", res.etag, raw=res.data, filled=False)
    if fill and st.kind == "freed":
        filled = fill_version(store, table, version, st)
        if filled is not None:
            return filled
    return st


def read_versions(store: ObjectStore, table: str, versions: Sequence[int], *,
                  logged: Container[int] = ()) -> list[VersionState]:
    """:func:`read_version` of each of ``versions`` in one round trip: the Delta file and the marker
    object of each are read at the same time (the marker's GET is wasted when the log holds the
    version), the versions in ``logged`` (believed in the log) from the log first as before.

    The log file, when there, is final whatever the marker said; when not, the marker object read
    beside it tells the state. Reading the marker before the log instead of after changes nothing a
    caller relies on: a marker only goes from pending to freed or committed, so either order can
    show a pending marker that resolved a moment later, which waiting finds out (issue 38: a writer
    claiming behind seven others paid two round trips, log then marker, before it could settle)."""
    both = [v for v in versions if v not in logged]
    keys = [commit_key(table, v) for v in versions] + [marker_key(table, v) for v in both]

    def get(key: str) -> GetResult | None:
        try:
            return store.get(key)
        except NotFound:
            return None

    got = dict(zip(keys, concurrency.gather(concurrency.Pool.REQUESTS, get, keys), strict=True))
    out = []
    for v in versions:
        log_file, marker = got[commit_key(table, v)], got.get(marker_key(table, v))
        if log_file is not None:
            out.append(classify(v, log_file.data, log_file.etag))
        elif v not in both:
            out.append(read_version(store, table, v))  # (believed logged, it was not: the usual way)
        elif marker is None:
            raise NotFound(f"neither the log nor a marker holds version {v} of table {table!r}")
        else:
            st = classify(v, marker.data, marker.etag, filled=False)
            out.append(VersionState(v, "freed", marker.etag, raw=marker.data, filled=False)
                       if st.kind == "commit" else st)
    return out


def read_log_version(store: ObjectStore, table: str, version: int) -> VersionState | None:
    """The version's Delta file classified, or None when the log does not hold it yet (1 GET)."""
    try:
        res = store.get(commit_key(table, version))
    except NotFound:
        return None
    return classify(version, res.data, res.etag)


def fill_version(store: ObjectStore, table: str, version: int, st: VersionState,
                 *, below: bytes | None = None) -> VersionState | None:
    """Write the empty commit of a given-up version into the log (put-if-absent), once the version
    below it exists there. ``below``: that version's Delta file, when the caller has it; else it is
    read (1 GET: it must exist, and on a table with in-commit timestamps the empty commit is stamped
    after it). Returns the version's final state (whatever landed first), or None when the version
    below is not in the log yet (filling now would leave a gap that Delta readers reject)."""
    if version > 0 and below is None:
        try:
            below = store.get(commit_key(table, version - 1)).data
        except NotFound:
            return None
    prev = _ict.stamped(below) if below is not None else None
    data = encode_freed(st.txn or "?", "freed", ict=prev is not None)
    if prev is not None:
        data = _ict.seal(store, table, version, data, prev, prev_known=True)
    try:
        store.put(commit_key(table, version), data, mode=CREATE)
    except AlreadyExists:
        pass
    res = store.get(commit_key(table, version))
    return classify(version, res.data, res.etag)


def place_marker(store: ObjectStore, table: str, start: int, info: MarkerInfo, *,
                 check_log: bool = True, contended: bool = False) -> tuple[int, str, int]:
    """Put-if-absent a marker object at the first free version >= ``start`` that the log does not hold.

    Returns (version, etag, attempts). Each candidate version is claimed (PUT-create of the marker
    object) while the log is checked for it (1 HEAD, at the same time: one round trip): a writer that
    ignores markers may have taken the version, and then the claim is withdrawn (its object deleted)
    and the next version tried. Losing the race for the marker object means: try the next version with a
    LIST of the claims beside it; losing that too (the start was stale, or others race for the same
    versions), try just above the highest claim the LIST found; and so on, alternately, so every lost race
    costs one round trip (a LIST sent only after a loss cost two: eight writers of one table, released
    together by a group commit, lost four races in a row). A writer that ignores markers may still take
    the version after the check: the commit then finds it taken and the transaction moves its marker.
    ``check_log=False`` skips the check for the first candidate (the caller has just seen the log end
    below it; the commit still finds a taken version).
    ``contended`` (the caller's claims on the table lost races lately): the LIST is sent with the
    first try instead, so a lost first try jumps past the highest claim at once (2 round trips, not 3:
    issue 38, eight writers of one table lost 1.8 races per claim); where it is won, the LIST is wasted.
    """
    data = encode_marker(info)
    v = start
    attempts = 0
    # a LIST started at a loss, beside the next try (or with the first try, when contended)
    listing: Future[int] | None = (concurrency.submit(concurrency.Pool.REQUESTS, highest_claim, store, table, v)
                                   if contended else None)
    while True:
        attempts += 1
        held = (concurrency.submit(concurrency.Pool.REQUESTS, store.exists, commit_key(table, v))
                if check_log or attempts > 1 else None)  # a leaf request: callers run on TASKS at most
        try:
            etag = store.put(marker_key(table, v), data, mode=CREATE)
        except AlreadyExists:
            if held is not None:
                held.result()
            if listing is not None:  # (lost beside a LIST: jump past the highest claim it found)
                v, listing = max(v, listing.result()) + 1, None
            else:
                listing = concurrency.submit(concurrency.Pool.REQUESTS, highest_claim, store, table, v)
                v += 1
            continue
        if held is None or not held.result():
            return v, etag, attempts
        store.delete(marker_key(table, v))  # the log holds it: our claim there means nothing
        v += 1


def highest_claim(store: ObjectStore, table: str, at_least: int) -> int:
    """The highest version with a marker object at or above ``at_least`` (1 LIST; claims are contiguous:
    every claimer walks up from a version it saw claimed or in the log)."""
    top = at_least
    for meta in store.list(markers_prefix(table), start_after=marker_key(table, at_least)):
        name = meta.key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            top = max(top, int(name[:-5]))
    return top


def update_marker(store: ObjectStore, table: str, version: int, etag: str, data: bytes) -> str:
    """Rewrite a marker object conditionally on its etag (raises PreconditionFailed if it changed).

    Only marker and freed bookkeeping goes here: commits go to the log (:func:`write_version`)."""
    return store.put(marker_key(table, version), data, mode=IfMatch(etag))


def write_version(store: ObjectStore, table: str, version: int, data: bytes) -> str:
    """Write ``table``'s Delta version ``version`` once (put-if-absent), its in-commit timestamp sealed
    (:func:`lv_core.protocol.ict.seal`; compare read-backs with :func:`same_commit`). The caller makes
    sure every version below exists. Raises PreconditionFailed when the version is already written (by
    anyone: read it to learn by whom)."""
    data = _ict.seal(store, table, version, data)
    try:
        return store.put(commit_key(table, version), data, mode=CREATE)
    except AlreadyExists:
        raise PreconditionFailed(f"version {version} of table {table!r} is already written") from None


def free_marker(store: ObjectStore, table: str, state: VersionState, reason: str, by: str | None = None) -> str:
    """Give up a marker (ours, or an expired one of someone else) if its object is unchanged.

    The log does not take the version yet (a version below may still be pending): the next writer
    that needs a later version writes the empty commit (:func:`fill_version`). If the owner's commit
    reached the log first, the commit stands (the log is the arbiter)."""
    assert state.txn is not None
    return update_marker(store, table, state.version, state.etag, encode_freed(state.txn, reason, by))

def append_at_tail(store: ObjectStore, table: str, start: int, data: bytes) -> int:
    """Write ``data`` at the first free version >= ``start`` of the log, unless a version from
    ``start`` on already holds exactly these bytes (written by another runner). Returns the version."""
    v = start
    while True:
        try:
            write_version(store, table, v, data)
            return v
        except PreconditionFailed:
            try:
                got = read_version(store, table, v)
            except NotFound:
                continue
            if got.filled and same_commit(got.raw, data):
                return v
            v += 1



__all__ = [
    "append_at_tail",
    "Footprint",
    "MarkerInfo",
    "NotFound",
    "VersionState",
    "classify",
    "read_versions",
    "encode_freed",
    "unfinished_part",
    "encode_marker",
    "fill_version",
    "highest_claim",
    "same_commit",
    "free_marker",
    "lakevilla_commit_info",
    "place_marker",
    "read_log_version",
    "read_version",
    "update_marker",
    "write_version",
]
