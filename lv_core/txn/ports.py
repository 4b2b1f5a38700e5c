"""The ports between the transaction layer and the data plane (interfaces only, no behaviour).

The transaction layer owns these; the data plane (:mod:`lv_core.engine`) implements
:class:`DataPlane` and uses only :class:`TransactionPort`, :class:`LakehousePort` and the operation
types of :mod:`lv_core.txn.ops` / :mod:`lv_core.txn.context`. It never imports
:mod:`lv_core.txn.transaction` or :mod:`lv_core.lakehouse`; :mod:`lv_core.wiring` (the composition
root) plugs a data plane into a :class:`~lv_core.lakehouse.Lakehouse`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol

from lv_core.delta.snapshot import Snapshot
from lv_core.events import EventStream
from lv_core.storage.base import ObjectStore
from lv_core.txn.ops import Operation

__all__ = ["DataPlane", "DataPlaneFactory", "LakehousePort", "TransactionPort"]


class TransactionPort(Protocol):
    """What the data plane may use of a transaction."""

    @property
    def id(self) -> str: ...

    @property
    def events(self) -> EventStream: ...

    def execute(self, op: Operation) -> Any:
        """Run ``op`` inside the transaction and return its value."""

    def ensure_active(self) -> None:
        """Raise TransactionError unless the transaction is still active."""

    def commit(self) -> Any: ...

    def rollback(self) -> None: ...


class LakehousePort(Protocol):
    """What the data plane may use of a lakehouse."""

    @property
    def store(self) -> ObjectStore: ...

    def snapshot(self, name: str, version: int | None = None) -> Snapshot: ...

    def list_tables(self) -> list[str]: ...

    def has_table(self, name: str) -> bool: ...

    def create_table(self, name: str, schema: Any, partition_by: list[str] | None = None, *,
                     if_not_exists: bool = False, description: str | None = None,
                     properties: dict[str, Any] | None = None) -> Any: ...

    def begin(self, preset: str = "serializable") -> TransactionPort: ...

    def vacuum(self, name: str, retain_hours: float | None = None, *, dry_run: bool = False,
               enforce_retention: bool = True) -> Any: ...

    @property
    def data_plane(self) -> "DataPlane": ...


class DataPlane(Protocol):
    """The data work of one lakehouse: reads, writes and SQL (implemented by Spark)."""

    @property
    def spark(self) -> Any: ...

    def read(self, name: str, version: Optional[int] = None) -> Any: ...

    def table(self, txn: TransactionPort, name: str) -> Any: ...

    def insert(self, txn: TransactionPort, name: str, data: Any) -> int: ...

    def update(self, txn: TransactionPort, name: str, set: Mapping[str, str],  # noqa: A002 - public API keyword set=
               where: Optional[str] = None) -> int: ...

    def delete(self, txn: TransactionPort, name: str, where: Optional[str] = None) -> int: ...

    def sql(self, txn: TransactionPort, statement: str) -> Any: ...

    def autocommit_sql(self, statement: str) -> Any: ...

    def interrupt(self, txn: TransactionPort) -> None:
        """Stop the Spark operation ``txn`` is running (from any thread)."""


#: Builds the data plane of a lakehouse (called once, on first data access, with the lakehouse and
#: the ``spark`` argument of ``connect``).
DataPlaneFactory = Callable[[LakehousePort, Any], DataPlane]
