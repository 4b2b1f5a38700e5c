"""The exception hierarchy: every error lv_core raises derives from :class:`LvError`."""

from __future__ import annotations


class LvError(Exception):
    """Base class of every error raised by LakeVilla for Jupyter."""


class ConfigError(LvError):
    """A bad option, URI or setting supplied by the caller."""


class UnsafeStore(ConfigError):
    """The store failed a conditional-write check: LakeVilla refuses to write to it (reads still work)."""


class StorageError(LvError):
    """The object store failed a request (network, permissions, server error)."""


class NotFound(StorageError):
    """The key does not exist."""


class AlreadyExists(StorageError):
    """A put in ``create`` mode found the key already present (put-if-absent lost)."""


class PreconditionFailed(StorageError):
    """A conditional put (``if_match``) found a different etag (or no object)."""


class TableError(LvError):
    """A problem with a table: unknown, invalid name, already exists, bad schema."""


class TableNotFound(TableError):
    """The named table does not exist in the warehouse."""


class TableExists(TableError):
    """A table with that name already exists."""


class InvalidTableName(TableError):
    """The table name is not acceptable (empty, ``/``, ``..``, control characters, too long)."""


class SchemaError(TableError):
    """A schema could not be parsed, or data does not match the table's schema."""


class ConstraintViolation(SchemaError):
    """A row to write breaks a CHECK constraint or column invariant of the table; nothing was written."""


class UnsupportedFeature(TableError):
    """The table uses a Delta reader/writer feature this code does not implement (``.feature`` names it)."""

    def __init__(self, message: str, *, feature: str | None = None) -> None:
        super().__init__(message)
        self.feature = feature


class DeltaLogError(LvError):
    """The Delta log is malformed or inconsistent."""


class TransactionError(LvError):
    """Misuse of a transaction (e.g. using it after commit)."""


class TransactionAborted(TransactionError):
    """A transaction could not commit; nothing of it is visible.

    Attributes:
        reason: a human sentence saying why, and what to do.
        rule: one of "R1", "R2", "R3", "conflict", "deadlock", "timeout",
            "exposed_read", "crashed", "rollback", "global_log" (the next global version holds an object
            LakeVilla did not write: the commit was reverted), "voided" (its plan was broken before).
    """

    def __init__(self, reason: str, rule: str, *, details: dict | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rule = rule
        self.details = details or {}


class Interrupted(LvError):
    """A running statement was stopped (``Transaction.cancel()`` or a kernel interrupt); its Spark
    operation was interrupted and it wrote nothing."""


class EngineError(LvError):
    """The Spark engine could not be started or reached (Java, Spark Connect server, connection)."""
