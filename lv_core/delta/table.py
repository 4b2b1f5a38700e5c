"""Table-level writes: name validation, ``CREATE TABLE`` (version 0) and put-if-absent commits."""

from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence, Union

import pyarrow as pa

from lv_core.delta.actions import Action, CommitInfo, Metadata, encode_commit
from lv_core.delta.errors import CommitChanged, VersionConflict
from lv_core.delta.features import check_writable, ict_enabled, required_protocol
from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType, as_delta_schema
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.errors import AlreadyExists, InvalidTableName, NotFound, PreconditionFailed, SchemaError
from lv_core.storage.base import CREATE, IfMatch, ObjectStore, PutMode

__all__ = ["commit", "create_table", "table_exists", "validate_table_name"]

MAX_NAME_LENGTH = 255
_ALLOWED = ("letters, digits and punctuation such as '-' or '.', at most 255 characters, not starting "
            "with '.' or '_', without '/', '\\' or control characters")


def validate_table_name(name: str) -> str:
    """Return ``name`` if it can name a table (the key prefix ``<name>/``), else raise.

    Names starting with ``_`` are reserved (LakeVilla keeps its own state under ``_lakevilla``).

    Raises:
        InvalidTableName: with a message saying what is allowed.
    """
    def bad(why: str) -> InvalidTableName:
        return InvalidTableName(f"invalid table name {name!r}: {why}. Allowed: {_ALLOWED}.")

    if not isinstance(name, str):
        raise InvalidTableName(f"a table name must be a string, not {type(name).__name__}")
    if not name:
        raise bad("it is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise bad(f"it is {len(name)} characters long")
    if "/" in name or "\\" in name:
        raise bad("it contains a path separator")
    if ".." in name:
        raise bad("it contains '..'")
    if name[0] == ".":
        raise bad("it starts with '.'")
    if name[0] == "_":
        raise bad("names starting with '_' are reserved for LakeVilla's own data")
    for ch in name:
        if ord(ch) < 32 or 127 <= ord(ch) < 160:
            raise bad(f"it contains the control character {ch!r}")
    if name != name.strip():
        raise bad("it starts or ends with whitespace")
    return name


def table_exists(store: ObjectStore, name: str) -> bool:
    """True if the table has a version-0 commit or a ``_last_checkpoint`` (1-2 HEADs)."""
    prefix = f"{name}/_delta_log/"
    for key in (f"{prefix}{0:020d}.json", prefix + "_last_checkpoint"):
        try:
            store.head(key)
            return True
        except NotFound:
            pass
    return False


def _check_partitioning(schema: DeltaSchema, partition_by: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for col in partition_by:
        f = schema.field(col)  # SchemaError if unknown
        if isinstance(f.type, (ArrayType, MapType, StructType)):
            raise SchemaError(f"cannot partition by {f.name!r}: only primitive columns can be partition columns")
        if f.name in out:
            raise SchemaError(f"partition column {f.name!r} listed twice")
        out.append(f.name)
    if out and len(out) == len(schema.fields):
        raise SchemaError("cannot partition by all columns: at least one column must hold data")
    return tuple(out)


def create_table(
    store: ObjectStore,
    name: str,
    schema: Union[str, pa.Schema, DeltaSchema],
    partition_by: Optional[Sequence[str]] = None,
    *,
    description: Optional[str] = None,
    configuration: Optional[Mapping[str, object]] = None,
) -> Snapshot:
    """Create table ``name``: write version 0 (commitInfo, protocol, metaData) with put-if-absent.

    ``schema`` is DDL text (``"id BIGINT, balance DOUBLE"``), a :class:`pyarrow.Schema` or a
    :class:`DeltaSchema`. The protocol is reader 1 / writer 2, or 3/7 with ``timestampNtz`` when a
    column needs it. Cost: 1 HEAD (``_last_checkpoint``: a table whose early commits were cleaned
    up has no ``0.json`` but still exists) + 1 PUT-create.

    Raises:
        InvalidTableName, SchemaError: bad name, schema or partition columns.
        UnsupportedFeature: ``configuration`` asks for a feature we never write.
        TableExists: the table already exists.
    """
    from lv_core.errors import TableExists

    validate_table_name(name)
    dschema = as_delta_schema(schema)
    if not dschema.fields:
        raise SchemaError("a table needs at least one column")
    parts = _check_partitioning(dschema, list(partition_by or ()))
    config = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (configuration or {}).items()}
    protocol = required_protocol(dschema, config)
    metadata = Metadata.create(dschema.to_json_string(), parts, config, description=description)
    check_writable(protocol, metadata, table=name)
    info = CommitInfo.create(
        "CREATE TABLE",
        {"mode": "ErrorIfExists", "partitionBy": json.dumps(list(parts)),
         **({"description": description} if description else {}),
         **({"properties": json.dumps(config)} if config else {})},
        isBlindAppend=True,
    )
    if ict_enabled(protocol, metadata):  # in-commit timestamps from version 0 on: commitInfo first, stamped
        info = CommitInfo({**info.payload, "inCommitTimestamp": info.payload["timestamp"]})
    actions: list[Action] = [info, protocol, metadata]
    try:
        store.head(f"{name}/_delta_log/_last_checkpoint")
        raise TableExists(f"table {name!r} already exists")
    except NotFound:
        pass
    try:
        commit(store, name, 0, actions)
    except VersionConflict:
        raise TableExists(f"table {name!r} already exists. Help: pick another name, or drop it first.") from None
    return replay(None, [(0, actions)], table=name)


def commit(store: ObjectStore, table: str, version: int, actions: Sequence[Action],
           mode: PutMode = CREATE) -> str:
    """Write ``actions`` as commit ``version`` of ``table``; return the new etag.

    ``mode`` is ``"create"`` (put-if-absent, the normal Delta commit) or :class:`IfMatch` (replace
    a commit read earlier, e.g. a LakeVilla marker). Unconditional overwrites are refused.

    Raises:
        VersionConflict: ``create`` and the version is already taken.
        CommitChanged: ``IfMatch`` and the commit changed or vanished since it was read.
    """
    if version < 0:
        raise ValueError(f"negative version {version}")
    if not actions:
        raise ValueError("a commit needs at least one action (a commitInfo for an empty commit)")
    if not (mode == CREATE or isinstance(mode, IfMatch)):
        raise ValueError("commits are written with mode='create' or IfMatch(etag), never overwritten blindly")
    key = f"{table}/_delta_log/{version:020d}.json"
    data = encode_commit(actions)
    try:
        return store.put(key, data, mode=mode)
    except AlreadyExists:
        raise VersionConflict(table, version) from None
    except PreconditionFailed:
        raise CommitChanged(table, version) from None
