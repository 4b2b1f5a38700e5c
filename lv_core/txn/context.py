"""Per-table state of a transaction and the view operations execute against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from lv_core.delta.actions import AddFile
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.stats import partition_path

if TYPE_CHECKING:
    from lv_core.txn.transaction import Transaction


@dataclass
class TableState:
    """What a transaction holds on one table."""

    name: str
    base: Snapshot  # the snapshot its operations build on
    marker_version: int | None = None
    marker_etag: str | None = None
    logical: bool = False  # switched to logical sublogs (sticky)
    pending: dict[int, str] = field(default_factory=dict)  # preceding pending markers: version -> txn
    first_step: int | None = None
    read_version: int | None = None  # LV[I]: the global log's version of the table it reads at


class OpContext:
    """What an executing operation sees: each table's base files plus the transaction's own changes."""

    def __init__(self, txn: "Transaction", step: int, attempt: int) -> None:
        self.txn = txn
        self.step = step
        self.attempt = attempt
        self.store = txn.store
        self._n = 0

    def snapshot(self, table: str) -> Snapshot:
        return self.txn._table(table).base

    def files(self, table: str) -> Mapping[str, AddFile]:
        """Live data files of ``table`` as this transaction sees it now (read-your-writes)."""
        return self.txn._view_files(table, upto_step=self.step)

    def new_path(self, table: str, partition_values: Mapping[str, str | None] | None = None,
                 ext: str = "parquet") -> str:
        """A data file path (relative to the table) unique to this transaction, step and attempt."""
        self._n += 1
        values = partition_values or {}
        folder = partition_path(self.txn._table(table).base.partition_columns, values) if values else ""
        return (f"{folder + '/' if folder else ''}"
                f"part-{self.txn.id}-{self.step:04d}-{self.attempt}-{self._n:03d}.{ext}")
