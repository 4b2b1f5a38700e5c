"""LakeVilla for Jupyter: multi-table, multi-statement ACID transactions over Delta Lake tables."""

from lv_core.errors import LvError, TransactionAborted
from lv_core.lakehouse import Lakehouse, connect
from lv_core.txn.result import CommitResult
from lv_core.txn.transaction import Transaction

__all__ = ["CommitResult", "Lakehouse", "LvError", "Transaction", "TransactionAborted", "connect"]
