"""Column mapping (Delta spec, "Column Mapping"): logical column names <-> physical names in data files.

A table with ``delta.columnMapping.mode`` ``name`` or ``id`` gives every column (nested struct fields
too) a ``delta.columnMapping.physicalName`` and a ``delta.columnMapping.id`` in its field metadata. Users
see the logical names (the schema's ``name``); Parquet files, ``partitionValues`` and ``stats`` use the
physical names. In ``id`` mode the Parquet fields also carry the column ids as ``field_id``.

:class:`ColumnMapping` holds both views of one table's schema and converts between them. With mode
``none`` (or no mapping) every conversion is the identity, so callers apply it unconditionally.
Files are matched to columns by physical name in both modes (every Delta writer names Parquet
columns by their physical names).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pyarrow as pa

from lv_core.delta.schema import ArrayType, DataType, DeltaField, DeltaSchema, MapType, StructType
from lv_core.errors import UnsupportedFeature

if TYPE_CHECKING:
    from lv_core.delta.snapshot import Snapshot

__all__ = ["ID_KEY", "MAX_ID_KEY", "MODE_KEY", "PARQUET_FIELD_ID", "PHYSICAL_KEY", "ColumnMapping",
           "column_mapping", "mapping_mode"]

MODE_KEY = "delta.columnMapping.mode"
ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
MAX_ID_KEY = "delta.columnMapping.maxColumnId"
#: Arrow field metadata key pyarrow writes as the Parquet ``field_id``.
PARQUET_FIELD_ID = b"PARQUET:field_id"
MODES = ("none", "name", "id")


def mapping_mode(configuration: Optional[Mapping[str, Any]]) -> str:
    """The column mapping mode of a table configuration: ``none``, ``name`` or ``id`` (lower case).

    Raises:
        UnsupportedFeature: any other value.
    """
    mode = str((configuration or {}).get(MODE_KEY, "none")).strip().lower() or "none"
    if mode not in MODES:
        raise UnsupportedFeature(f"unknown column mapping mode {mode!r} ({MODE_KEY}); LakeVilla knows 'none', "
                                 "'name' and 'id'. Help: read the table with Spark or delta-rs.",
                                 feature="columnMapping")
    return mode


def _physical(f: DeltaField, mode: str, where: str) -> DeltaField:
    name = f.metadata.get(PHYSICAL_KEY)
    if not isinstance(name, str) or not name:
        raise UnsupportedFeature(f"column {where}{f.name!r} has no {PHYSICAL_KEY} although the table uses column "
                                 f"mapping mode {mode!r}: the table's schema is invalid")
    if mode == "id" and not _is_int(f.metadata.get(ID_KEY)):
        raise UnsupportedFeature(f"column {where}{f.name!r} has no {ID_KEY} although the table uses column "
                                 "mapping mode 'id': the table's schema is invalid")
    return DeltaField(name, _physical_type(f.type, mode, f"{where}{f.name}."), f.nullable, f.metadata)


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    try:
        int(v)
        return True
    except (TypeError, ValueError):
        return False


def _physical_type(t: DataType, mode: str, where: str) -> DataType:
    if isinstance(t, StructType):
        return StructType(tuple(_physical(f, mode, where) for f in t.fields))
    if isinstance(t, ArrayType):
        return ArrayType(_physical_type(t.element_type, mode, where), t.contains_null)
    if isinstance(t, MapType):
        return MapType(_physical_type(t.key_type, mode, where), _physical_type(t.value_type, mode, where),
                       t.value_contains_null)
    return t


def _arrow_type(a: pa.DataType, t: DataType, field_ids: bool) -> pa.DataType:
    """Arrow type ``a`` (of Delta type ``t``, logical names) with the names of ``t`` (and field ids)."""
    if isinstance(t, StructType):
        return pa.struct([_arrow_field(a.field(i), f, field_ids) for i, f in enumerate(t.fields)])
    if isinstance(t, ArrayType):
        v = a.value_field
        return pa.list_(pa.field(v.name, _arrow_type(v.type, t.element_type, field_ids), v.nullable))
    if isinstance(t, MapType):
        k, v = a.key_field, a.item_field
        return pa.map_(pa.field(k.name, _arrow_type(k.type, t.key_type, field_ids), False),
                       pa.field(v.name, _arrow_type(v.type, t.value_type, field_ids), v.nullable))
    return a


def _arrow_field(a: pa.Field, f: DeltaField, field_ids: bool) -> pa.Field:
    md = {PARQUET_FIELD_ID: str(int(f.metadata[ID_KEY])).encode()} if field_ids and ID_KEY in f.metadata else None
    return pa.field(f.name, _arrow_type(a.type, f.type, field_ids), a.nullable, metadata=md)


def _view(col: pa.ChunkedArray, t: pa.DataType) -> pa.ChunkedArray:
    """The same data under a type that differs only in (nested) field names and metadata: zero copy."""
    if col.type == t and col.type.equals(t, check_metadata=True):
        return col
    return pa.chunked_array([c.view(t) for c in col.chunks], type=t)


@dataclass(frozen=True)
class ColumnMapping:
    """The logical and physical views of a table's columns.

    Attributes:
        mode: ``none``, ``name`` or ``id``.
        logical: the table schema as users see it.
        partition_columns: the logical partition columns.
    """

    mode: str
    logical: DeltaSchema
    partition_columns: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """True when files use physical names (mode ``name`` or ``id``)."""
        return self.mode != "none"

    @cached_property
    def physical(self) -> DeltaSchema:
        """The schema with physical names (at every nesting level); metadata kept."""
        if not self.active:
            return self.logical
        return DeltaSchema(tuple(_physical(f, self.mode, "") for f in self.logical))

    @cached_property
    def names(self) -> Mapping[str, str]:
        """Top-level logical name -> physical name."""
        return {lf.name: pf.name for lf, pf in zip(self.logical, self.physical, strict=True)}

    @cached_property
    def logical_names(self) -> Mapping[str, str]:
        """Top-level physical name -> logical name."""
        return {p: n for n, p in self.names.items()}

    def physical_name(self, logical: str) -> str:
        """The physical name of top-level column ``logical`` (exact or case-insensitive match)."""
        if logical in self.names:
            return self.names[logical]
        low = logical.lower()
        for n, p in self.names.items():
            if n.lower() == low:
                return p
        raise KeyError(logical)

    @property
    def physical_partition_columns(self) -> tuple[str, ...]:
        return tuple(self.physical_name(c) for c in self.partition_columns)

    # -- partition values (``add.partitionValues`` are keyed by physical name) ------------------------
    def logical_values(self, values: Mapping[str, Optional[str]]) -> dict[str, Optional[str]]:
        """``partitionValues`` of a file keyed by logical name."""
        return {c: values.get(self.physical_name(c)) for c in self.partition_columns}

    # -- Arrow ---------------------------------------------------------------------------------------
    @cached_property
    def logical_arrow(self) -> pa.Schema:
        return self.logical.to_arrow()

    @cached_property
    def physical_arrow(self) -> pa.Schema:
        """The Arrow schema of data files: physical names, Parquet field ids in ``id`` mode."""
        if not self.active:
            return self.logical_arrow
        ids = self.mode == "id"
        return pa.schema([_arrow_field(a, f, ids) for a, f in zip(self.logical_arrow, self.physical, strict=True)])

    def to_physical(self, data: pa.Table) -> pa.Table:
        """Rows in the table's logical Arrow schema (e.g. after conforming) renamed to the physical one."""
        if not self.active:
            return data
        target = self.physical_arrow
        return pa.Table.from_arrays([_view(data.column(i), target.field(i).type) for i in range(len(target))],
                                    schema=target)

    def to_logical(self, data: pa.Table, columns: Sequence[str] = ()) -> pa.Table:
        """Rows in the physical Arrow schema (column order of ``physical_arrow``) renamed to logical names.

        ``columns`` (logical names) restricts the result to those columns, in that order."""
        if not self.active:
            return data if not columns else data.select(list(columns))
        target = self.logical_arrow
        want = list(columns) or target.names
        cols = [_view(data.column(self.names[n]), target.field(n).type) for n in want]
        return pa.Table.from_arrays(cols, schema=pa.schema([target.field(n) for n in want]))


def column_mapping(snapshot: "Snapshot") -> ColumnMapping:
    """The column mapping of a table version (identity when the table does not map columns)."""
    return ColumnMapping(mapping_mode(snapshot.configuration), snapshot.schema, tuple(snapshot.partition_columns))
