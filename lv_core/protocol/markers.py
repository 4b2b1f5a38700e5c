"""Module #1: markers.

A marker is a valid Delta commit holding one ``commitInfo`` whose ``lakevilla`` field carries the
bookkeeping (transaction id, predecessors, creation time, lease expiry). Plain Delta readers see an
empty commit. On commit the owner overwrites it (if-match on its etag) with the real actions; on
abort, rollback or shift it is overwritten with a "freed" commit, again an empty commit to Delta.

Encoding and classification here are pure; placement and freeing do I/O through an ObjectStore.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from lv_core.delta.actions import json_lines
from lv_core.errors import AlreadyExists, DeltaLogError, NotFound
from lv_core.protocol.layout import commit_key
from lv_core.storage.base import CREATE, IfMatch, ObjectStore

KEY = "lakevilla"
MARKER_OP = "LAKEVILLA MARKER"
FREED_OP = "LAKEVILLA FREE"
COMMIT_OP_PREFIX = "LAKEVILLA "


@dataclass(frozen=True)
class MarkerInfo:
    """The bookkeeping a marker carries."""

    txn: str
    predecessors: tuple[dict, ...] = ()  # outgoing DAG edges: {"txn", "table", "version"}
    created: float = 0.0
    lease_expires: float = 0.0
    client: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "marker",
            "txn": self.txn,
            "predecessors": [dict(p) for p in self.predecessors],
            "created": self.created,
            "leaseExpires": self.lease_expires,
            "client": self.client,
        }


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

    @property
    def pending(self) -> bool:
        return self.kind == "marker"


def _commit_info_line(operation: str, lv: dict[str, Any]) -> bytes:
    ci = {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operationParameters": {},
        "engineInfo": "lakevilla-jupyter",
        KEY: lv,
    }
    return (json.dumps({"commitInfo": ci}, separators=(",", ":")) + "\n").encode()


def encode_marker(info: MarkerInfo) -> bytes:
    """The bytes of a marker commit."""
    return _commit_info_line(MARKER_OP, info.to_json())


def encode_freed(txn: str, reason: str, by: str | None = None) -> bytes:
    """The bytes of a freed marker: an empty commit that says who freed whose marker and why."""
    lv: dict[str, Any] = {"kind": "freed", "txn": txn, "reason": reason}
    if by:
        lv["by"] = by
    return _commit_info_line(FREED_OP, lv)


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


def classify(version: int, raw: bytes, etag: str) -> VersionState:
    """Classify a commit's bytes as marker, freed marker or real commit (pure)."""
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
        )
        return VersionState(version, "marker", etag, txn=txn, marker=info, raw=raw)
    if kind == "freed" and n_actions == 1:
        return VersionState(version, "freed", etag, txn=txn, raw=raw)
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


def read_version(store: ObjectStore, table: str, version: int) -> VersionState:
    """GET one version and classify it (raises NotFound if it does not exist)."""
    res = store.get(commit_key(table, version))
    return classify(version, res.data, res.etag)


def place_marker(store: ObjectStore, table: str, start: int, info: MarkerInfo) -> tuple[int, str, int]:
    """Put-if-absent a marker at the first free version >= ``start``.

    Returns (version, etag, attempts). Losing a race means: try the next version.
    """
    data = encode_marker(info)
    v = start
    attempts = 0
    while True:
        attempts += 1
        try:
            etag = store.put(commit_key(table, v), data, mode=CREATE)
            return v, etag, attempts
        except AlreadyExists:
            v += 1


def overwrite(store: ObjectStore, table: str, version: int, etag: str, data: bytes) -> str:
    """Overwrite a version conditionally on its etag (raises PreconditionFailed if it changed)."""
    return store.put(commit_key(table, version), data, mode=IfMatch(etag))


def free_marker(store: ObjectStore, table: str, state: VersionState, reason: str, by: str | None = None) -> str:
    """Free a marker (ours, or an expired one of someone else) with an empty commit, if unchanged."""
    assert state.txn is not None
    return overwrite(store, table, state.version, state.etag, encode_freed(state.txn, reason, by))


__all__ = [
    "MarkerInfo",
    "NotFound",
    "VersionState",
    "classify",
    "encode_freed",
    "unfinished_part",
    "encode_marker",
    "free_marker",
    "lakevilla_commit_info",
    "overwrite",
    "place_marker",
    "read_version",
]
