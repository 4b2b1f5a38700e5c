"""Column mapping on the direct (Spark) data path: projections between logical and physical names.

Spark reads a column-mapped table's files with the *physical* schema and :func:`logical_frame` renames
the columns to the logical names; before writing, :func:`physical_frame` renames logical -> physical
(with ``parquet.field.id`` metadata in ``id`` mode, so Spark writes the Parquet field ids). Nested
struct fields are renamed by a cast (Spark casts structs by position). Both are the identity when the
table does not map columns. See :mod:`lv_core.delta.colmap` for the mapping itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from lv_core.delta.colmap import ID_KEY, ColumnMapping
from lv_core.delta.schema import DeltaField, DeltaSchema
from lv_core.engine.spark_schema import col

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["logical_frame", "physical_frame"]

#: Spark's field metadata key for the Parquet field id it writes.
SPARK_FIELD_ID = "parquet.field.id"


def _json_type(t: Any, ids: bool) -> Any:
    """A Delta/Spark JSON type, all nullable; struct fields carry only their Parquet field id (``ids``)."""
    if not isinstance(t, dict):
        return t
    if t["type"] == "struct":
        return {"type": "struct", "fields": [
            {"name": f["name"], "type": _json_type(f["type"], ids), "nullable": True,
             "metadata": {SPARK_FIELD_ID: int(f["metadata"][ID_KEY])} if ids and ID_KEY in f["metadata"] else {}}
            for f in t["fields"]]}
    if t["type"] == "array":
        return {**t, "elementType": _json_type(t["elementType"], ids), "containsNull": True}
    if t["type"] == "map":
        return {**t, "keyType": _json_type(t["keyType"], ids), "valueType": _json_type(t["valueType"], ids),
                "valueContainsNull": True}
    return t


def _renamed(src: DeltaField, dst: DeltaField, ids: bool = False) -> "Column":
    """Column ``src`` under ``dst``'s name: nested fields renamed too (all nullable, with their field ids
    when ``ids``), by a cast."""
    from pyspark.sql.types import StructType as SparkStruct

    e = col(src.name)
    if not isinstance(dst.type, str):
        t = _json_type(DeltaSchema((dst,)).to_json()["fields"][0]["type"], ids)
        e = e.cast(SparkStruct.fromJson({"type": "struct", "fields": [
            {"name": "x", "type": t, "nullable": True, "metadata": {}}]}).fields[0].dataType)
    return e


def logical_frame(df: "DataFrame", cm: ColumnMapping, keep: Sequence[str] = ()) -> "DataFrame":
    """``df`` holding the table's columns under physical names -> the logical names (plus ``keep``)."""
    if not cm.active:
        return df
    cols = [_renamed(p, lf).alias(lf.name) for lf, p in zip(cm.logical, cm.physical, strict=True)]
    return df.select(*cols, *[col(k) for k in keep])


def physical_frame(df: "DataFrame", cm: ColumnMapping) -> "DataFrame":
    """``df`` holding the table's columns under logical names -> physical names (field ids in id mode)."""
    if not cm.active:
        return df
    cols = []
    for lf, p in zip(cm.logical, cm.physical, strict=True):
        e = _renamed(lf, p, cm.mode == "id")
        if cm.mode == "id":
            cols.append(e.alias(p.name, metadata={SPARK_FIELD_ID: int(p.metadata[ID_KEY])}))
        else:
            cols.append(e.alias(p.name))
    return df.select(*cols)
