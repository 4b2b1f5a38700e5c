"""Classic Parquet checkpoints: ``<v:020d>.checkpoint.parquet`` (or multi-part) + ``_last_checkpoint``.

The Parquet layout is the one delta-rs writes and reads back: one row per action, one nullable
struct column per action kind (``add``, ``remove``, ``metaData``, ``protocol``, ``txn``), maps as
``map<string,string>`` and ``add.stats`` as a JSON string.

Caution for the protocol layer: a checkpoint at version ``v`` freezes the content of every commit
``<= v``. Never checkpoint a version at or after a marker that may still be overwritten with real
actions, or readers starting from the checkpoint would never see them.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lv_core.delta.actions import Action, AddFile, Metadata, Protocol, RemoveFile, Txn, UnknownAction, now_ms
from lv_core.delta.features import check_writable
from lv_core.delta.snapshot import Snapshot
from lv_core.errors import AlreadyExists, DeltaLogError, NotFound, PreconditionFailed
from lv_core.storage.base import CREATE, IfMatch, ObjectStore

__all__ = [
    "CHECKPOINT_SCHEMA",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "checkpoint_actions",
    "checkpoint_interval",
    "checkpoint_names",
    "encode_checkpoint",
    "interval_ms",
    "decode_checkpoint",
    "decode_json_checkpoint",
    "parse_checkpoint_name",
    "parse_v2_checkpoint_name",
    "sidecar_name",
    "should_checkpoint",
    "write_checkpoint",
]

#: Commits between checkpoints when ``delta.checkpointInterval`` is not set (Spark's default).
DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000  # delta.deletedFileRetentionDuration default


def _map(value_nullable: bool = True) -> pa.DataType:
    return pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), value_nullable))


_STR_LIST = pa.list_(pa.field("element", pa.string(), False))
#: ``deletionVector`` of add/remove (Delta spec, DeletionVectorDescriptor): never dropped by a checkpoint.
_DV = pa.struct([
    pa.field("storageType", pa.string(), False),
    pa.field("pathOrInlineDv", pa.string(), False),
    pa.field("offset", pa.int32()),
    pa.field("sizeInBytes", pa.int32(), False),
    pa.field("cardinality", pa.int64(), False),
])

CHECKPOINT_SCHEMA = pa.schema([
    pa.field("add", pa.struct([
        pa.field("path", pa.string(), False),
        pa.field("partitionValues", _map(), False),
        pa.field("size", pa.int64(), False),
        pa.field("modificationTime", pa.int64(), False),
        pa.field("dataChange", pa.bool_(), False),
        pa.field("stats", pa.string()),
        pa.field("tags", _map()),
        pa.field("deletionVector", _DV),
    ])),
    pa.field("remove", pa.struct([
        pa.field("path", pa.string(), False),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_(), False),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", _map()),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", _map()),
        pa.field("deletionVector", _DV),
    ])),
    pa.field("metaData", pa.struct([
        pa.field("id", pa.string(), False),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("format", pa.struct([
            pa.field("provider", pa.string(), False),
            pa.field("options", _map(False), False),
        ]), False),
        pa.field("schemaString", pa.string(), False),
        pa.field("partitionColumns", _STR_LIST, False),
        pa.field("createdTime", pa.int64()),
        pa.field("configuration", _map(False), False),
    ])),
    pa.field("protocol", pa.struct([
        pa.field("minReaderVersion", pa.int32(), False),
        pa.field("minWriterVersion", pa.int32(), False),
        pa.field("readerFeatures", _STR_LIST),
        pa.field("writerFeatures", _STR_LIST),
    ])),
    pa.field("txn", pa.struct([
        pa.field("appId", pa.string(), False),
        pa.field("version", pa.int64(), False),
        pa.field("lastUpdated", pa.int64()),
    ])),
])

_MAP_FIELDS = {"add": ("partitionValues", "tags"), "remove": ("partitionValues", "tags"),
               "metaData": ("configuration",), "sidecar": ("tags",), "checkpointMetadata": ("tags",)}
_SINGLE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID = re.compile(r"^(\d{20})\.checkpoint\.([0-9A-Za-z-]+)\.(json|parquet)$")


def checkpoint_names(version: int, parts: int = 1) -> list[str]:
    """File names (inside ``_delta_log/``) of a classic checkpoint with ``parts`` parts."""
    if parts <= 1:
        return [f"{version:020d}.checkpoint.parquet"]
    return [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]


def parse_checkpoint_name(name: str) -> Optional[tuple[int, int, int]]:
    """``(version, part, parts)`` for a classic checkpoint file name, else None (V2/UUID names too)."""
    m = _SINGLE.match(name)
    if m:
        return int(m.group(1)), 1, 1
    m = _MULTI.match(name)
    if m:
        return int(m.group(1)), int(m.group(2)), int(m.group(3))
    return None


def parse_v2_checkpoint_name(name: str) -> Optional[int]:
    """The version of a UUID-named (V2) checkpoint file name ``<v>.checkpoint.<uuid>.json|parquet``, else None."""
    m = _UUID.match(name)
    if not m or m.group(2).isdigit():
        return None
    return int(m.group(1))


def sidecar_name(body: Any) -> str:
    """The file name (inside ``_delta_log/_sidecars/``) a ``sidecar`` action points to.

    The spec stores a URI-encoded path, ideally the bare file name; sidecars always live in the
    table's own ``_delta_log/_sidecars``, so only the last path segment is used.

    Raises:
        DeltaLogError: no usable ``path``.
    """
    from lv_core.delta.paths import decode_path

    path = body.get("path") if isinstance(body, Mapping) else None
    if not isinstance(path, str) or not path.strip("/"):
        raise DeltaLogError(f"bad 'sidecar' action: no path ({body!r})")
    return decode_path(path.rstrip("/").rsplit("/", 1)[-1])


def decode_json_checkpoint(data: bytes, *, name: str = "checkpoint") -> list[Action]:
    """Parse a UUID-named JSON (V2) checkpoint: newline-delimited actions, like a commit (pure).

    ``sidecar`` and ``checkpointMetadata`` come back as :class:`UnknownAction` for the caller to resolve.

    Raises:
        DeltaLogError: not UTF-8 / JSON, or a malformed action (the message names the file and line).
    """
    from lv_core.delta.actions import action_from_json, json_lines

    out: list[Action] = []
    for n, obj in json_lines(data, f"checkpoint {name}"):
        try:
            out.append(action_from_json(obj))
        except DeltaLogError as e:
            raise DeltaLogError(f"malformed Delta checkpoint {name}, line {n}: {e}") from e
    return out


def checkpoint_interval(metadata: Metadata, default: int = DEFAULT_CHECKPOINT_INTERVAL) -> int:
    """``delta.checkpointInterval`` of the table, or ``default``."""
    try:
        n = int(metadata.configuration.get("delta.checkpointInterval", default))
    except (TypeError, ValueError):
        return default
    return n if n > 0 else default


def should_checkpoint(version: int, interval: int) -> bool:
    """The usual policy: checkpoint every ``interval`` commits (never at version 0)."""
    return interval > 0 and version > 0 and version % interval == 0


_UNITS_MS = {"nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1000, "minute": 60_000,
             "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}


def _interval_ms(text: Optional[str]) -> Optional[float]:
    if not text:
        return None
    m = re.match(r"^\s*interval\s+(\d+)\s+([a-z]+?)s?\s*$", str(text).lower())
    if not m or m.group(2) not in _UNITS_MS:
        return None
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def interval_ms(text: Optional[str]) -> Optional[float]:
    """A Delta interval property (``"interval 7 days"``) in milliseconds, None if absent or malformed."""
    return _interval_ms(text)


def checkpoint_actions(snapshot: Snapshot, now: Optional[int] = None) -> list[Action]:
    """The actions a checkpoint of ``snapshot`` holds (pure).

    protocol, metaData, every txn (minus those older than ``delta.setTransactionRetentionDuration``),
    every live add, and the remove tombstones younger than ``delta.deletedFileRetentionDuration``
    (default one week).
    """
    now = now_ms() if now is None else now
    conf = snapshot.metadata.configuration
    keep_tomb = _interval_ms(conf.get("delta.deletedFileRetentionDuration"))
    keep_tomb = DEFAULT_TOMBSTONE_RETENTION_MS if keep_tomb is None else keep_tomb
    keep_txn = _interval_ms(conf.get("delta.setTransactionRetentionDuration"))
    out: list[Action] = [snapshot.protocol, snapshot.metadata]
    for t in snapshot.txns.values():
        if keep_txn is None or t.last_updated is None or t.last_updated >= now - keep_txn:
            out.append(t)
    out.extend(snapshot.files.values())
    for r in snapshot.tombstones.values():
        if r.deletion_timestamp is None or r.deletion_timestamp >= now - keep_tomb:
            out.append(r)
    return out


def _row(a: Action) -> dict[str, Any]:
    (key, body), = a.to_json().items()
    body = dict(body)
    if isinstance(a, AddFile):
        body.setdefault("tags", None)
    if isinstance(a, Metadata):
        body["format"] = {"provider": a.format_provider, "options": dict(a.format_options)}
        body.setdefault("createdTime", None)
    return {key: body}


def encode_checkpoint(actions: Sequence[Action], parts: int = 1) -> list[bytes]:
    """Serialize checkpoint actions to ``parts`` Parquet files (pure; protocol+metaData in part 1).

    Raises:
        DeltaLogError: an action kind that a classic checkpoint cannot hold (e.g. commitInfo).
    """
    rows: list[dict[str, Any]] = []
    for a in actions:
        if not isinstance(a, (Protocol, Metadata, AddFile, RemoveFile, Txn)):
            raise DeltaLogError(f"a checkpoint cannot hold {type(a).__name__} actions")
        rows.append(_row(a))
    parts = max(1, min(parts, len(rows)))
    head = [r for r in rows if "protocol" in r or "metaData" in r]
    rest = [r for r in rows if "protocol" not in r and "metaData" not in r]
    chunks: list[list[dict[str, Any]]] = [list(head) if i == 0 else [] for i in range(parts)]
    per = -(-len(rest) // parts) if rest else 0
    for i in range(parts):
        chunks[i].extend(rest[i * per:(i + 1) * per])
    out = []
    for chunk in chunks:
        table = pa.Table.from_pylist(chunk, schema=CHECKPOINT_SCHEMA)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        out.append(buf.getvalue())
    return out


def decode_checkpoint(data: bytes, *, name: str = "checkpoint") -> list[Action]:
    """Parse one checkpoint Parquet file into actions (pure).

    ``sidecar`` and ``checkpointMetadata`` rows (V2 spec) come back as :class:`UnknownAction`: the
    caller reads the sidecar files (:meth:`~lv_core.delta.log.DeltaLog.read_checkpoint_files`).

    Raises:
        DeltaLogError: not a readable checkpoint.
    """
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        cols = [c for c in ("protocol", "metaData", "txn", "add", "remove", "domainMetadata",
                            "sidecar", "checkpointMetadata") if c in pf.schema_arrow.names]
        table = pf.read(columns=cols)
    except (pa.ArrowException, OSError) as e:
        raise DeltaLogError(f"cannot read checkpoint {name}: {e}") from e
    from lv_core.delta.actions import action_from_json

    actions: list[Action] = []
    for col in cols:
        arr = table.column(col)
        if arr.null_count == len(arr):
            continue
        for body in arr.to_pylist():
            if body is None:
                continue
            body = {k: v for k, v in body.items() if v is not None}
            if isinstance(body.get("deletionVector"), dict):  # absent offset (inline DVs) stays absent
                body["deletionVector"] = {k: v for k, v in body["deletionVector"].items() if v is not None}
            for k in _MAP_FIELDS.get(col, ()):
                if k in body:
                    body[k] = dict(body[k]) if isinstance(body[k], list) else body[k]
            if col == "metaData" and "format" in body:
                fmt = dict(body["format"])
                fmt["options"] = dict(fmt.get("options") or [])
                body["format"] = fmt
            if col in ("domainMetadata", "sidecar", "checkpointMetadata"):
                actions.append(UnknownAction(col, body))
                continue
            try:
                actions.append(action_from_json({col: body}))
            except DeltaLogError as e:
                raise DeltaLogError(f"checkpoint {name}: {e}") from e
    return actions


def write_checkpoint(store: ObjectStore, table: str, snapshot: Snapshot, *, parts: int = 1,
                     now: Optional[int] = None) -> dict[str, Any]:
    """Write a checkpoint of ``snapshot`` and advance ``_last_checkpoint``; return its content.

    Parts are written put-if-absent: if a checkpoint of that version already exists, it is left
    alone (someone else wrote the same state). ``_last_checkpoint`` is only moved forward, with
    a conditional put, never back to an older version.

    Raises:
        UnsupportedFeature: the table uses a feature we never write.
    """
    check_writable(snapshot.protocol, snapshot.metadata, table=table)
    actions = checkpoint_actions(snapshot, now)
    blobs = encode_checkpoint(actions, parts)
    prefix = f"{table}/_delta_log/"
    names = checkpoint_names(snapshot.version, len(blobs))
    for name, blob in zip(names, blobs, strict=False):
        try:
            store.put(prefix + name, blob, mode=CREATE)
        except AlreadyExists:
            if len(blobs) == 1:
                break
            raise DeltaLogError(f"table {table!r}: checkpoint part {name} already exists; "
                                "another writer is checkpointing this version") from None
    info: dict[str, Any] = {"version": snapshot.version, "size": len(actions)}
    if len(blobs) > 1:
        info["parts"] = len(blobs)
    info["sizeInBytes"] = sum(len(b) for b in blobs)
    info["numOfAddFiles"] = len(snapshot.files)
    _advance_last_checkpoint(store, prefix + "_last_checkpoint", info)
    return info


def _advance_last_checkpoint(store: ObjectStore, key: str, info: Mapping[str, Any], tries: int = 5) -> None:
    data = json.dumps(info, separators=(",", ":")).encode()
    for _ in range(tries):
        try:
            cur = store.get(key)
        except NotFound:
            try:
                store.put(key, data, mode=CREATE)
                return
            except AlreadyExists:
                continue
        try:
            cur_version = int(json.loads(cur.data)["version"])
        except (ValueError, KeyError, TypeError):
            cur_version = -1
        if cur_version >= info["version"]:
            return
        try:
            store.put(key, data, mode=IfMatch(cur.etag))
            return
        except PreconditionFailed:
            continue
