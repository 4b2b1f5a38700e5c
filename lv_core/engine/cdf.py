"""Change data feed: the change data files (``cdc`` actions) of writes to a ``delta.enableChangeDataFeed``
table (Delta spec, "Change Data Files" / "Add CDC File").

A change data file holds the table's columns plus ``_change_type`` (``insert``, ``update_preimage``,
``update_postimage``, ``delete``); it lives under ``<table>/_change_data/`` (in the partition's folder,
without the partition columns, whose values are the action's ``partitionValues``) and is named like the
operation's data files (``ctx.new_path``), so redo, abort and clean-up treat both alike.

What each operation writes (see :func:`lv_core.txn.state.net_actions` for how a commit combines them):
* UPDATE: the matched rows before (``update_preimage``) and after (``update_postimage``) the change,
  from the same scan of the touched files as the rewrite;
* DELETE: the deleted rows (``delete``);
* MERGE: updated rows as preimage/postimage, deleted rows as ``delete``, inserted rows as ``insert``;
* INSERT: its rows as ``insert``, read back from the files written (*implied* by the adds: committed only
  when another operation of the transaction writes change files for the table).

Readers take a commit's changes from its change files alone when it has any, so each file must describe
rows of the base version or rows the commit adds, once: an UPDATE/DELETE/MERGE that changes a row the same
transaction already inserted or changed is refused (:func:`check_staged`); one that changes other rows of a
file the transaction rewrote (copied unchanged) is fine.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from lv_core.delta.actions import AddCDCFile, AddFile
from lv_core.delta.features import cdf_enabled
from lv_core.delta.snapshot import Snapshot
from lv_core.errors import UnsupportedFeature
from lv_core.txn.context import OpContext

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["CHANGE_DIR", "CHANGE_TYPE", "change_snapshot", "enabled", "check_staged", "tagged", "to_cdc"]

CHANGE_TYPE = "_change_type"
CHANGE_DIR = "_change_data"


def enabled(snapshot: Snapshot) -> bool:
    """True if writes to this table version must come with change data files."""
    return cdf_enabled(snapshot.metadata)


def change_snapshot(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with ``_change_type`` (string) appended to its schema: what change data files hold."""
    md = snapshot.metadata
    schema = json.loads(md.schema_string or '{"type": "struct", "fields": []}')
    schema["fields"] = [*schema["fields"], {"name": CHANGE_TYPE, "type": "string", "nullable": True, "metadata": {}}]
    return dataclasses.replace(snapshot, metadata=dataclasses.replace(md, schema_string=json.dumps(schema)))


def tagged(df: "DataFrame", columns: Sequence["Column"], kind: str) -> "DataFrame":
    """``df``'s rows as change rows: the table's columns (``columns``, in order) and ``_change_type`` = ``kind``."""
    from pyspark.sql import functions as F

    return df.select(*columns, F.lit(kind).alias(CHANGE_TYPE))


def to_cdc(adds: Iterable[AddFile]) -> list[AddCDCFile]:
    """The ``cdc`` actions of change data files written as data files."""
    return [AddCDCFile(a.path, dict(a.partition_values), a.size) for a in adds]


class _Scanner(Protocol):
    def scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile]) -> "DataFrame": ...


def check_staged(engine: _Scanner, ctx: OpContext, table: str, files: Sequence[AddFile],
                 matched: Callable[[list[AddFile]], "DataFrame"], what: str) -> None:
    """Raise :class:`UnsupportedFeature` if ``what`` changes, on a change data feed table, a row this
    transaction already inserted or changed (its earlier change is described by a change file, which
    a second change would have to rewrite).

    Only files the transaction staged can hold such rows. ``matched(staged files)`` gives the rows the
    statement changes there (the table's columns); they may be rows an earlier rewrite copied unchanged
    (their change rows are then right as computed), unless one equals an ``update_postimage`` or
    ``insert`` row of an earlier change file of the transaction (one Spark query; equal values count as
    the same row, which may refuse a statement that was fine, never lets a wrong change file through).
    """
    snap = ctx.snapshot(table)
    staged = [f for f in files if f.path not in snap.files]
    if not staged or not enabled(snap):
        return
    from pyspark.sql import functions as F

    earlier = [AddFile(c.path, dict(c.partition_values), c.size, 0) for c in ctx.change_files(table)]
    names = [f.name for f in snap.schema]
    if earlier:
        rows = (engine.scan(table, change_snapshot(snap), earlier)
                .where(F.col(CHANGE_TYPE).isin("update_postimage", "insert")).select(*[F.col(f"`{n}`") for n in names]))
        clash = matched(staged).select(*[F.col(f"`{n}`") for n in names]).intersect(rows).limit(1).count() > 0
    else:
        clash = True  # staged rows without change files: cannot tell which are new (never the case today)
    if clash:
        err = UnsupportedFeature(
            f"{what}: table {table!r} uses change data feed (changeDataFeed) and this statement changes rows "
            "that this transaction already inserted or changed; LakeVilla cannot yet record such a second change "
            "in the change data files; nothing was changed by this statement. Help: commit the transaction "
            "before changing those rows again, or change them in one statement.", feature="changeDataFeed")
        raise err
