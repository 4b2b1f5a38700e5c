"""Operations: the unit a transaction executes, records in its sublog, and can redo.

An :class:`Operation` is re-executable: ``run(ctx)`` computes its effect from the transaction's
current view of the tables (``ctx``) and returns an :class:`OpResult` (files added and removed per
table, files read, tables scanned with a predicate, and the value for the caller). The engine
plugs Spark statements in here; tests use small pyarrow-written Parquet files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lv_core.delta.actions import AddCDCFile, AddFile, RemoveFile

if TYPE_CHECKING:
    from lv_core.txn.context import OpContext


@dataclass
class OpResult:
    """The effect of one execution of an operation."""

    value: Any = None
    adds: dict[str, list[AddFile]] = field(default_factory=dict)
    removes: dict[str, list[RemoveFile]] = field(default_factory=dict)
    reads: dict[str, set[str]] = field(default_factory=dict)  # table -> data files whose content was used
    scans: set[str] = field(default_factory=set)  # tables read with a predicate (new rows could matter)
    may_match: dict[str, Callable[[AddFile], bool]] = field(default_factory=dict)
    #: change data files written (change data feed tables): rows changed, with ``_change_type``
    cdc: dict[str, list[AddCDCFile]] = field(default_factory=dict)
    #: tables whose ``cdc`` only restates the adds/removes (an INSERT's rows as ``insert``): a commit
    #: keeps them only if another operation of the transaction wrote change files for the table too
    cdc_implied: set[str] = field(default_factory=set)

    def staged(self) -> dict[str, list[str]]:
        """Table -> paths of every file this execution wrote (data files and change data files)."""
        out: dict[str, list[str]] = {}
        for t, adds in self.adds.items():
            out.setdefault(t, []).extend(a.path for a in adds)
        for t, cdcs in self.cdc.items():
            out.setdefault(t, []).extend(c.path for c in cdcs)
        return out


@dataclass
class Operation:
    """A re-executable operation over one or more tables.

    Attributes:
        name: short kind, e.g. "append", "update", "delete", "read".
        tables: the tables it touches (markers are placed on first access).
        run: computes the effect on the current view; must be side-effect free apart from writing
            new data files through ``ctx.new_path``/``ctx.store``.
        logical: JSON-serialisable description for the logical sublog (e.g. {"sql": ...}).
        blind: write-only append: never conflicts, stays physical.
        exposed: its value reaches the caller (a redo cannot repair what the user saw).
        reads_only: writes no table (a query): nothing is prepared for a marker claim.
    """

    name: str
    tables: tuple[str, ...]
    run: Callable[["OpContext"], OpResult]
    logical: Mapping[str, Any] | None = None
    blind: bool = False
    exposed: bool = False
    reads_only: bool = False
