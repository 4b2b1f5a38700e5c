"""LakeVilla for Jupyter: multi-table, multi-statement ACID transactions over Delta Lake tables.

The entry points load lazily (importing a submodule such as ``lv_core.engine`` or ``lv_core.delta``
does not pull in the transaction layer); :mod:`lv_core.wiring` is the composition root.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lv_core.errors import LvError, TransactionAborted

if TYPE_CHECKING:
    from lv_core.lakehouse import Lakehouse
    from lv_core.txn.core import Tuning
    from lv_core.txn.result import CommitResult
    from lv_core.txn.transaction import Transaction
    from lv_core.wiring import connect

__all__ = ["CommitResult", "Lakehouse", "LvError", "Transaction", "TransactionAborted", "Tuning", "connect"]


def __getattr__(name: str) -> Any:
    if name in ("Lakehouse", "connect"):
        from lv_core import wiring

        return getattr(wiring, name)
    if name == "Transaction":
        from lv_core.txn.transaction import Transaction

        return Transaction
    if name == "Tuning":
        from lv_core.txn.core import Tuning

        return Tuning
    if name == "CommitResult":
        from lv_core.txn.result import CommitResult

        return CommitResult
    raise AttributeError(f"module 'lv_core' has no attribute {name!r}")
