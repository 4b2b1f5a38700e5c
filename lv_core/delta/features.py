"""Which Delta protocol versions and table features this code can read and write.

We read reader version 1 (plus reader 2/3 tables whose only reader features we handle:
``timestampNtz``, ``vacuumProtocolCheck``, ``columnMapping`` in mode ``name`` or ``id``, see
:mod:`lv_core.delta.colmap`) and write writer version <= 2 (``appendOnly``; ``invariants`` only when no
column declares one), writer 5 (column mapping) or writer 7 with only features we honour. A feature
is refused for writing when a correct writer would have to do something we do not (write deletion
vectors, CDC files, row ids, evaluate CHECK constraints or generated columns ...): LakeVilla never
writes to such tables, it refuses with :class:`~lv_core.errors.UnsupportedFeature` naming the feature.

Legacy protocols (writer 3-6) imply features; like delta-rs we only refuse those that are *in use*
(e.g. writer 4 with ``delta.enableChangeDataFeed`` off is writable).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Optional

from lv_core.delta.actions import Metadata, Protocol
from lv_core.delta.colmap import mapping_mode
from lv_core.delta.schema import DeltaSchema
from lv_core.errors import SchemaError, UnsupportedFeature

__all__ = [
    "READER_FEATURES_SUPPORTED",
    "WRITER_FEATURES_SUPPORTED",
    "check_readable",
    "check_writable",
    "is_append_only",
    "required_protocol",
]

#: Reader features whose reader requirements we meet.
READER_FEATURES_SUPPORTED = frozenset({"timestampNtz", "vacuumProtocolCheck", "columnMapping"})
#: Writer features whose writer requirements we meet (some only while not in use, see below).
WRITER_FEATURES_SUPPORTED = frozenset({"appendOnly", "timestampNtz", "invariants", "checkConstraints",
                                       "changeDataFeed", "generatedColumns", "identityColumns",
                                       "columnMapping", "vacuumProtocolCheck"})

_WHAT = {
    "deletionVectors": "deletion vectors",
    "columnMapping": "column mapping",
    "v2Checkpoint": "V2 checkpoints",
    "rowTracking": "row tracking",
    "domainMetadata": "domain metadata",
    "clustering": "liquid clustering",
    "typeWidening": "type widening",
    "typeWidening-preview": "type widening (preview)",
    "variantType": "the VARIANT type",
    "variantType-preview": "the VARIANT type (preview)",
    "variantShredding-preview": "variant shredding (preview)",
    "identityColumns": "identity columns",
    "generatedColumns": "generated columns",
    "changeDataFeed": "change data feed",
    "checkConstraints": "CHECK constraints",
    "invariants": "column invariants",
    "icebergCompatV1": "Iceberg compatibility V1",
    "icebergCompatV2": "Iceberg compatibility V2",
    "icebergWriterCompatV1": "Iceberg writer compatibility V1",
    "inCommitTimestamp": "in-commit timestamps",
    "allowColumnDefaults": "column defaults",
    "catalogManaged": "catalog-managed commits",
    "catalogOwned-preview": "catalog-owned commits",
    "vacuumProtocolCheck": "vacuum protocol check",
}


def _schema(metadata: Optional[Metadata]) -> Optional[DeltaSchema]:
    if metadata is None:
        return None
    try:
        return DeltaSchema.from_json(metadata.schema_string)
    except SchemaError:
        return None


def _field_md_has(metadata: Optional[Metadata], keys: Iterable[str]) -> bool:
    schema = _schema(metadata)
    if schema is None:
        return False
    keys = tuple(keys)
    return any(any(k in f.metadata for k in keys) for _, _t, f in schema.iter_types())


def _conf(metadata: Optional[Metadata], key: str, default: str = "") -> str:
    return str((metadata.configuration if metadata else {}).get(key, default)).strip().lower()


def _column_mapping_on(md: Optional[Metadata]) -> bool:
    """Column mapping mode ``name`` or ``id`` (an unknown mode raises UnsupportedFeature)."""
    return mapping_mode(md.configuration if md else None) != "none"


# Predicates "the feature is in use": a supported-while-unused feature is refused only when in use.
_IN_USE: dict[str, Callable[[Optional[Metadata]], bool]] = {
    "invariants": lambda md: _field_md_has(md, ("delta.invariants",)),
    "checkConstraints": lambda md: any(k.startswith("delta.constraints.") for k in (md.configuration if md else {})),
    "changeDataFeed": lambda md: _conf(md, "delta.enableChangeDataFeed") == "true",
    "generatedColumns": lambda md: _field_md_has(md, ("delta.generationExpression",)),
    "identityColumns": lambda md: _field_md_has(md, ("delta.identity.start", "delta.identity.step",
                                                     "delta.identity.highWaterMark")),
}

# Features implied by legacy writer versions (Delta spec, "Table Features" section).
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


def _refuse(table: Optional[str], feature: str, action: str) -> UnsupportedFeature:
    what = _WHAT.get(feature, f"the table feature {feature!r}")
    where = f"table {table!r}" if table else "this table"
    if action == "read":
        msg = (f"{where} uses {what} ({feature}), which LakeVilla cannot read correctly. "
               "Help: read it with Spark or delta-rs instead.")
    else:
        msg = (f"{where} uses {what} ({feature}); LakeVilla never writes to tables with this feature, "
               "to avoid corrupting them. Help: write with Spark/Delta, or copy the data into a new "
               "LakeVilla table.")
    err = UnsupportedFeature(msg)
    err.feature = feature  # type: ignore[attr-defined]
    return err


def check_readable(protocol: Protocol, metadata: Optional[Metadata] = None, *, table: Optional[str] = None) -> None:
    """Raise :class:`UnsupportedFeature` if reading the table needs something we do not implement."""
    rv = protocol.min_reader_version
    if rv > 3:
        raise _refuse(table, f"readerVersion{rv}", "read")
    _column_mapping_on(metadata)  # refuses an unknown mode
    if rv == 3:
        for f in protocol.reader_features or ():
            if f not in READER_FEATURES_SUPPORTED:
                raise _refuse(table, f, "read")


def check_writable(protocol: Protocol, metadata: Optional[Metadata] = None, *, table: Optional[str] = None) -> None:
    """Raise :class:`UnsupportedFeature` if writing needs something we do not implement.

    Also checks readability (we always read before we write) and the configuration of a
    writer-version-2 table (e.g. invariants declared in the schema).
    """
    check_readable(protocol, metadata, table=table)
    wv = protocol.min_writer_version
    if wv > 7:
        raise _refuse(table, f"writerVersion{wv}", "write")
    if wv == 7:
        features = list(protocol.writer_features or ())
    else:
        features = [f for v, fs in _LEGACY_WRITER.items() if v <= wv for f in fs]
    for f in features:
        if f in _IN_USE:
            if _IN_USE[f](metadata):
                raise _refuse(table, f, "write")
            continue
        if f not in WRITER_FEATURES_SUPPORTED:
            raise _refuse(table, f, "write")
    # Configuration that asks writers for a feature even if the protocol lacks it: refuse too.
    for key, feature in (("delta.enableDeletionVectors", "deletionVectors"),
                         ("delta.enableRowTracking", "rowTracking"),
                         ("delta.enableTypeWidening", "typeWidening"),
                         ("delta.enableInCommitTimestamps", "inCommitTimestamp"),
                         ("delta.enableChangeDataFeed", "changeDataFeed")):
        if _conf(metadata, key) == "true":
            raise _refuse(table, feature, "write")
    if _conf(metadata, "delta.checkpointPolicy", "classic") == "v2":
        raise _refuse(table, "v2Checkpoint", "write")
    for feature in ("invariants", "checkConstraints", "generatedColumns", "identityColumns"):
        if _IN_USE[feature](metadata):
            raise _refuse(table, feature, "write")
    if _column_mapping_on(metadata) and "columnMapping" not in features:
        err = UnsupportedFeature(
            f"{'table ' + repr(table) if table else 'this table'} sets delta.columnMapping.mode but its protocol "
            f"({describe(protocol)}) does not declare column mapping (writer version 5, or the table feature "
            "columnMapping); LakeVilla does not create or upgrade column-mapped tables. Help: create the table "
            "with Spark/Delta (delta.columnMapping.mode), or leave the property out.")
        err.feature = "columnMapping"  # type: ignore[attr-defined]
        raise err


def is_append_only(metadata: Metadata) -> bool:
    """True if ``delta.appendOnly`` is set: writers must not remove data files (dataChange removes)."""
    return _conf(metadata, "delta.appendOnly") == "true"


def required_protocol(schema: DeltaSchema, configuration: Optional[Mapping[str, Any]] = None) -> Protocol:
    """The smallest protocol we write for a new table: 1/2, or 3/7 with ``timestampNtz`` if needed."""
    if "timestamp_ntz" in schema.primitive_types():
        return Protocol(3, 7, ("timestampNtz",), ("timestampNtz",) + (
            ("appendOnly",) if str((configuration or {}).get("delta.appendOnly", "")).lower() == "true" else ()))
    return Protocol(1, 2)


def describe(protocol: Protocol) -> str:
    """A short human description, e.g. ``reader 3 [timestampNtz], writer 7 [timestampNtz]``."""
    r = f"reader {protocol.min_reader_version}"
    if protocol.reader_features is not None:
        r += f" {json.dumps(list(protocol.reader_features))}"
    w = f"writer {protocol.min_writer_version}"
    if protocol.writer_features is not None:
        w += f" {json.dumps(list(protocol.writer_features))}"
    return f"{r}, {w}"
