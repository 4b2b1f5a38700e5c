"""LakeVilla for Jupyter: multi-table, multi-statement ACID transactions over Delta Lake tables."""

from lv_core.errors import LvError, TransactionAborted

__all__ = ["LvError", "TransactionAborted"]
