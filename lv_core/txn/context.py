"""The view an executing operation gets of its transaction (see :mod:`lv_core.txn.ops`)."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from lv_core.delta.actions import AddCDCFile, AddFile
from lv_core.delta.colmap import column_mapping
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.stats import partition_path
from lv_core.storage.base import ObjectStore

__all__ = ["OpContext"]


class OpContext:
    """What an executing operation sees: each table's base files plus the transaction's own changes.

    Attributes:
        txn_id: the transaction's id (names staged files).
        step: the operation's position in the transaction; attempt: 0, then one per redo.
        store: the object store (the transaction's counting view).
        rows_checked: tables whose written rows the data plane checked against the table's CHECK
            constraints and invariants (see :func:`lv_core.delta.features.check_changes`).
        identity_kept: tables whose written rows are rewritten existing rows (UPDATE/DELETE/MERGE),
            their identity column values unchanged, checked by the data plane.
    """

    def __init__(self, txn_id: str, store: ObjectStore, step: int, attempt: int, *,
                 snapshots: Callable[[str], Snapshot], view: Callable[[str, int], Mapping[str, AddFile]],
                 changes: Callable[[str, int], Sequence[AddCDCFile]] | None = None,
                 on_write: Callable[[str], None] | None = None) -> None:
        self._snapshots = snapshots
        self._on_write = on_write  # told of each table before the operation names its first new file there
        self._view = view
        self._changes = changes
        self.txn_id = txn_id
        self.step = step
        self.attempt = attempt
        self.store = store
        self._n = 0
        self.rows_checked: set[str] = set()
        self.identity_kept: set[str] = set()

    def snapshot(self, table: str) -> Snapshot:
        """The snapshot the operation builds on for ``table``."""
        return self._snapshots(table)

    def files(self, table: str) -> Mapping[str, AddFile]:
        """Live data files of ``table`` as this transaction sees it now (read-your-writes)."""
        return self._view(table, self.step)

    def change_files(self, table: str) -> Sequence[AddCDCFile]:
        """Change data files earlier operations of the transaction wrote for ``table``."""
        return self._changes(table, self.step) if self._changes is not None else ()

    def new_path(self, table: str, partition_values: Mapping[str, str | None] | None = None,
                 ext: str = "parquet") -> str:
        """A data file path (relative to the table) unique to this transaction, step and attempt."""
        if self._on_write is not None:
            self._on_write(table)
        self._n += 1
        values = partition_values or {}
        # column mapping: partition values are keyed by physical name, and so are the folders
        parts = column_mapping(self.snapshot(table)).physical_partition_columns if values else ()
        folder = partition_path(parts, values) if values else ""
        return (f"{folder + '/' if folder else ''}"
                f"part-{self.txn_id}-{self.step:04d}-{self.attempt}-{self._n:03d}.{ext}")
