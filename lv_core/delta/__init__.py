"""Delta Lake log layer: actions, schemas, table features, log replay, checkpoints, table creation.

Pure logic (actions, schema, features, snapshot replay, checkpoint encoding, stats) is separate
from the few functions that talk to an :class:`~lv_core.storage.base.ObjectStore`
(:class:`DeltaLog`, :func:`write_checkpoint`, :func:`create_table`, :func:`commit`).
"""

from __future__ import annotations

#: ``engineInfo`` written in our commitInfo actions.
ENGINE_INFO = "lakevilla-jupyter/0.1.0"

from lv_core.delta.actions import (  # noqa: E402
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    UnknownAction,
    decode_commit,
    encode_commit,
    is_empty_commit,
)
from lv_core.delta.checkpoint import checkpoint_interval, should_checkpoint, write_checkpoint  # noqa: E402
from lv_core.delta.errors import CommitChanged, VersionConflict, VersionNotFound  # noqa: E402
from lv_core.delta.features import check_readable, check_writable, is_append_only  # noqa: E402
from lv_core.delta.log import DeltaLog  # noqa: E402
from lv_core.delta.schema import DeltaField, DeltaSchema, as_delta_schema, parse_ddl  # noqa: E402
from lv_core.delta.snapshot import Snapshot, replay  # noqa: E402
from lv_core.delta.stats import compute_stats, partition_path, serialize_partition_value  # noqa: E402
from lv_core.delta.table import commit, create_table, table_exists, validate_table_name  # noqa: E402
from lv_core.delta.writer import write_data_files  # noqa: E402

__all__ = [
    "ENGINE_INFO", "Action", "AddFile", "CommitChanged", "CommitInfo", "DeltaField", "DeltaLog", "DeltaSchema",
    "Metadata", "Protocol", "RemoveFile", "Snapshot", "Txn", "UnknownAction", "VersionConflict",
    "VersionNotFound", "as_delta_schema", "check_readable", "check_writable", "checkpoint_interval", "commit",
    "compute_stats", "create_table", "decode_commit", "encode_commit", "is_append_only", "is_empty_commit",
    "parse_ddl", "partition_path", "replay", "serialize_partition_value", "should_checkpoint", "table_exists",
    "validate_table_name", "write_checkpoint", "write_data_files",
]
