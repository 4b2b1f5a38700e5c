"""Delta log actions as immutable values, and the newline-delimited JSON commit format.

Each action knows its JSON form (Delta spec field names, camelCase) through ``to_json()`` (the
whole one-key object, e.g. ``{"add": {...}}``) and ``from_json(body)`` (the inner object). Fields
this code does not model are kept in ``extra`` (or, for unknown action kinds, in
:class:`UnknownAction`) and written back verbatim, so reading and re-writing loses nothing.

Paths in ``add``/``remove`` are URIs in the log (RFC 2396, percent-encoded). Python objects hold the
*decoded* path in ``path`` (the object key relative to the table root, e.g. ``p=a%20b/part-0.parquet``
for a directory literally named ``p=a%20b``): code uses it as the key and to match a ``remove`` to its
``add``. Actions read from a log also keep the exact log string in ``raw_path`` and write it back
byte for byte (``AddFile.remove()`` passes it on): decoding is many-to-one, and other readers match
``remove`` to ``add`` by the string. Only paths we create are encoded, by :func:`encode_path`
(see :mod:`lv_core.delta.paths` for the encodings and why).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Optional, Sequence, Union

from lv_core.delta.paths import decode_path, encode_path
from lv_core.errors import DeltaLogError

__all__ = [
    "Action",
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "Txn",
    "UnknownAction",
    "action_from_json",
    "decode_commit",
    "decode_path",
    "encode_commit",
    "encode_path",
    "is_empty_commit",
    "json_lines",
    "now_ms",
]


def now_ms() -> int:
    """Milliseconds since the epoch (the unit of every Delta timestamp)."""
    return int(time.time() * 1000)


def _log_path(path: str, raw_path: Optional[str]) -> str:
    """The log string of a path: the one read from the log if it still names ``path``, else encoded."""
    if raw_path is not None and decode_path(raw_path) == path:
        return raw_path
    return encode_path(path)


def _raw_path(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"path must be a string, not {type(value).__name__}")
    return value


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _extra(body: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    known = set(known)
    return {k: v for k, v in body.items() if k not in known and v is not None}


def _opt_dict(v: Any) -> Optional[dict[str, Any]]:
    return None if v is None else dict(v)


@dataclass(frozen=True)
class Protocol:
    """``protocol``: the reader/writer versions (and table features for reader 3 / writer 7)."""

    KEY: ClassVar[str] = "protocol"
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: Optional[tuple[str, ...]] = None
    writer_features: Optional[tuple[str, ...]] = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            body["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            body["writerFeatures"] = list(self.writer_features)
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Protocol":
        rf, wf = body.get("readerFeatures"), body.get("writerFeatures")
        return cls(
            int(body["minReaderVersion"]),
            int(body["minWriterVersion"]),
            None if rf is None else tuple(rf),
            None if wf is None else tuple(wf),
            _extra(body, ("minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures")),
        )


@dataclass(frozen=True)
class Metadata:
    """``metaData``: table id, schema (as a JSON string), partition columns and configuration."""

    KEY: ClassVar[str] = "metaData"
    id: str
    #: None only in a ``metaData`` a later version supersedes (e.g. a Databricks DLT table's first commit)
    schema_string: Optional[str]
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)
    name: Optional[str] = None
    description: Optional[str] = None
    format_provider: str = "parquet"
    format_options: Mapping[str, str] = field(default_factory=dict)
    created_time: Optional[int] = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def create(
        cls,
        schema_string: str,
        partition_columns: Sequence[str] = (),
        configuration: Optional[Mapping[str, str]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
    ) -> "Metadata":
        """A new table's metadata with a fresh id and ``createdTime`` = now."""
        import uuid

        return cls(
            id=str(uuid.uuid4()),
            schema_string=schema_string,
            partition_columns=tuple(partition_columns),
            configuration=dict(configuration or {}),
            name=name,
            description=description,
            created_time=now_ms(),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": {"provider": self.format_provider, "options": dict(self.format_options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "createdTime": self.created_time,
            "configuration": dict(self.configuration),
        }
        body = _drop_none(body)
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Metadata":
        fmt = body.get("format") or {}
        return cls(
            id=str(body["id"]),
            schema_string=None if body.get("schemaString") is None else str(body["schemaString"]),
            partition_columns=tuple(body.get("partitionColumns") or ()),
            configuration=dict(body.get("configuration") or {}),
            name=body.get("name"),
            description=body.get("description"),
            format_provider=fmt.get("provider", "parquet"),
            format_options=dict(fmt.get("options") or {}),
            created_time=body.get("createdTime"),
            extra=_extra(body, ("id", "schemaString", "partitionColumns", "configuration", "name",
                                "description", "format", "createdTime")),
        )


@dataclass(frozen=True)
class AddFile:
    """``add``: a data file that is part of the table from this version on."""

    KEY: ClassVar[str] = "add"
    path: str  # decoded, relative to the table root (or an absolute URI)
    partition_values: Mapping[str, Optional[str]]
    size: int
    modification_time: int
    data_change: bool = True
    stats: Optional[str] = None  # JSON: numRecords, minValues, maxValues, nullCount
    tags: Optional[Mapping[str, str]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # deletionVector, baseRowId, ...
    #: the exact ``path`` string of the log this action was read from (None: encode ``path``)
    raw_path: Optional[str] = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "path": _log_path(self.path, self.raw_path),
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
            "stats": self.stats,
        }
        if self.tags is not None:
            body["tags"] = dict(self.tags)
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "AddFile":
        raw = _raw_path(body["path"])
        return cls(
            path=decode_path(raw),
            partition_values=dict(body.get("partitionValues") or {}),
            size=int(body["size"]),
            modification_time=int(body.get("modificationTime") or 0),
            data_change=bool(body.get("dataChange", True)),
            stats=body.get("stats"),
            tags=_opt_dict(body.get("tags")),
            extra=_extra(body, ("path", "partitionValues", "size", "modificationTime", "dataChange",
                                "stats", "tags", "stats_parsed", "partitionValues_parsed")),
            raw_path=raw,
        )

    def parsed_stats(self) -> Optional[dict[str, Any]]:
        """The ``stats`` JSON as a dict (None when absent or unreadable)."""
        if not self.stats:
            return None
        try:
            out = json.loads(self.stats)
        except ValueError:
            return None
        return out if isinstance(out, dict) else None

    @property
    def num_records(self) -> Optional[int]:
        """``numRecords`` from the stats, if present."""
        s = self.parsed_stats()
        n = s.get("numRecords") if s else None
        return int(n) if n is not None else None

    def remove(self, deletion_timestamp: Optional[int] = None, *, data_change: bool = True) -> "RemoveFile":
        """The ``remove`` action for this file (extended metadata: partition values, size, stats), naming
        it with the add's own log string."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=now_ms() if deletion_timestamp is None else deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=dict(self.partition_values),
            size=self.size,
            stats=self.stats,
            tags=None if self.tags is None else dict(self.tags),
            extra={k: v for k, v in self.extra.items() if k in ("deletionVector", "baseRowId",
                                                                  "defaultRowCommitVersion")},
            raw_path=self.raw_path,
        )


@dataclass(frozen=True)
class RemoveFile:
    """``remove``: a data file that is no longer part of the table (a tombstone)."""

    KEY: ClassVar[str] = "remove"
    path: str
    deletion_timestamp: Optional[int] = None
    data_change: bool = True
    extended_file_metadata: Optional[bool] = None
    partition_values: Optional[Mapping[str, Optional[str]]] = None
    size: Optional[int] = None
    stats: Optional[str] = None
    tags: Optional[Mapping[str, str]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: the exact ``path`` string of the log (or of the removed add); None: encode ``path``
    raw_path: Optional[str] = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        body = _drop_none({
            "path": _log_path(self.path, self.raw_path),
            "deletionTimestamp": self.deletion_timestamp,
            "dataChange": self.data_change,
            "extendedFileMetadata": self.extended_file_metadata,
            "partitionValues": _opt_dict(self.partition_values),
            "size": self.size,
            "stats": self.stats,
            "tags": _opt_dict(self.tags),
        })
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "RemoveFile":
        size = body.get("size")
        raw = _raw_path(body["path"])
        return cls(
            path=decode_path(raw),
            deletion_timestamp=body.get("deletionTimestamp"),
            data_change=bool(body.get("dataChange", True)),
            extended_file_metadata=body.get("extendedFileMetadata"),
            partition_values=_opt_dict(body.get("partitionValues")),
            size=None if size is None else int(size),
            stats=body.get("stats"),
            tags=_opt_dict(body.get("tags")),
            extra=_extra(body, ("path", "deletionTimestamp", "dataChange", "extendedFileMetadata",
                                "partitionValues", "size", "stats", "tags")),
            raw_path=raw,
        )


@dataclass(frozen=True)
class AddCDCFile:
    """``cdc``: a change data file of this version (Delta spec "Add CDC File"): rows of the table's
    columns plus ``_change_type``; never part of the table's data (``dataChange`` is always false)."""

    KEY: ClassVar[str] = "cdc"
    path: str  # decoded, relative to the table root (``_change_data/...``)
    partition_values: Mapping[str, Optional[str]]
    size: int
    data_change: bool = False
    tags: Optional[Mapping[str, str]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    raw_path: Optional[str] = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "path": _log_path(self.path, self.raw_path),
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "dataChange": self.data_change,
        }
        if self.tags is not None:
            body["tags"] = dict(self.tags)
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "AddCDCFile":
        raw = _raw_path(body["path"])
        return cls(
            path=decode_path(raw),
            partition_values=dict(body.get("partitionValues") or {}),
            size=int(body["size"]),
            data_change=bool(body.get("dataChange", False)),
            tags=_opt_dict(body.get("tags")),
            extra=_extra(body, ("path", "partitionValues", "size", "dataChange", "tags")),
            raw_path=raw,
        )


@dataclass(frozen=True)
class Txn:
    """``txn``: an application's transaction id (idempotent writes), latest version per ``appId``."""

    KEY: ClassVar[str] = "txn"
    app_id: str
    version: int
    last_updated: Optional[int] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = _drop_none({"appId": self.app_id, "version": self.version, "lastUpdated": self.last_updated})
        body.update(self.extra)
        return {self.KEY: body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Txn":
        return cls(str(body["appId"]), int(body["version"]), body.get("lastUpdated"),
                   _extra(body, ("appId", "version", "lastUpdated")))


@dataclass(frozen=True)
class CommitInfo:
    """``commitInfo``: free-form provenance, kept verbatim (our markers carry their data here)."""

    KEY: ClassVar[str] = "commitInfo"
    payload: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, operation: str, operation_parameters: Optional[Mapping[str, Any]] = None,
               **fields: Any) -> "CommitInfo":
        """A commitInfo with ``timestamp`` = now, ``operation``, parameters and extra fields."""
        from lv_core.delta import ENGINE_INFO

        payload: dict[str, Any] = {"timestamp": now_ms(), "operation": operation,
                                   "operationParameters": dict(operation_parameters or {}),
                                   "engineInfo": ENGINE_INFO}
        payload.update(fields)
        return cls(payload)

    def to_json(self) -> dict[str, Any]:
        return {self.KEY: dict(self.payload)}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "CommitInfo":
        if not isinstance(body, Mapping):
            raise TypeError("commitInfo must be a JSON object")
        return cls(dict(body))

    def get(self, key: str, default: Any = None) -> Any:
        return self.payload.get(key, default)

    @property
    def timestamp(self) -> Optional[int]:
        return self.payload.get("timestamp")

    @property
    def in_commit_timestamp(self) -> Optional[int]:
        return self.payload.get("inCommitTimestamp")

    @property
    def operation(self) -> Optional[str]:
        return self.payload.get("operation")

    @property
    def operation_parameters(self) -> Mapping[str, Any]:
        return self.payload.get("operationParameters") or {}

    @property
    def engine_info(self) -> Optional[str]:
        return self.payload.get("engineInfo")


@dataclass(frozen=True)
class UnknownAction:
    """Any other action (``domainMetadata``, ``checkpointMetadata``, ...), kept verbatim."""

    key: str
    body: Any

    def to_json(self) -> dict[str, Any]:
        return {self.key: self.body}


Action = Union[Protocol, Metadata, AddFile, RemoveFile, AddCDCFile, Txn, CommitInfo, UnknownAction]

_KINDS: dict[str, Any] = {c.KEY: c for c in (Protocol, Metadata, AddFile, RemoveFile, AddCDCFile, Txn, CommitInfo)}


def action_from_json(obj: Mapping[str, Any]) -> Action:
    """Parse one log line's object (``{"add": {...}}``) into an action.

    Top-level keys next to one known action are ignored (the Delta spec asks readers to ignore what
    they do not know); a lone unknown key is kept as an :class:`UnknownAction`.

    Raises:
        DeltaLogError: no action key, two known actions (or several unknown keys) in one object, or a
            required field is missing / has a bad type.
    """
    if not isinstance(obj, Mapping) or not obj:
        raise DeltaLogError("an action must be a JSON object with exactly one key")
    known = [k for k in obj if k in _KINDS]
    if len(known) > 1 or (not known and len(obj) != 1):
        what = f"actions {known}" if len(known) > 1 else f"keys {sorted(obj)[:5]}"
        raise DeltaLogError(f"an action must be a JSON object with exactly one key naming the action, not {what}")
    key = known[0] if known else next(iter(obj))
    body = obj[key]
    cls = _KINDS.get(key)
    if cls is None:
        return UnknownAction(key, body)
    try:
        return cls.from_json(body)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise DeltaLogError(f"bad {key!r} action: {what}") from e


def encode_commit(actions: Iterable[Action]) -> bytes:
    """Serialize actions as newline-delimited JSON (one action per line, as delta-rs writes)."""
    lines = [json.dumps(a.to_json(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
             for a in actions]
    return "\n".join(lines).encode("utf-8")


def json_lines(data: bytes, where: str = "commit") -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of every non-blank line of a commit file (newline-delimited JSON).

    Lines end at ``\\n`` only: ``str.splitlines`` would also cut at U+0085, U+2028 and U+2029, which
    JSON strings may hold unescaped (:func:`encode_commit` writes them so).

    Raises:
        DeltaLogError: invalid UTF-8 or a line that is not JSON; the message names ``where`` and the line.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DeltaLogError(f"malformed Delta {where}: not UTF-8 ({e})") from e
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise DeltaLogError(f"malformed Delta {where}, line {n}: invalid JSON ({e})") from e
        yield n, obj


def decode_commit(data: bytes, *, version: Optional[int] = None, table: Optional[str] = None) -> list[Action]:
    """Parse a commit file.

    Raises:
        DeltaLogError: invalid UTF-8, invalid JSON or a malformed action; the message names the
            table, version and line.
    """
    where = f"commit {version}" if version is not None else "commit"
    if table is not None:
        where += f" of table {table!r}"
    out: list[Action] = []
    for n, obj in json_lines(data, where):
        try:
            out.append(action_from_json(obj))
        except DeltaLogError as e:
            raise DeltaLogError(f"malformed Delta {where}, line {n}: {e}") from e
    return out


def is_empty_commit(actions: Sequence[Action]) -> bool:
    """True if the commit changes nothing: only ``commitInfo`` actions (e.g. a LakeVilla marker)."""
    return all(isinstance(a, CommitInfo) for a in actions)
