"""Which Delta protocol versions and table features this code can read and write.

We read reader version 1 (plus reader 2/3 tables whose only reader features we handle:
``timestampNtz``, ``vacuumProtocolCheck``, ``v2Checkpoint``, ``deletionVectors``, ``columnMapping`` in
mode ``name`` or ``id``, see :mod:`lv_core.delta.colmap`) and write writer versions up to 7 with only
features we honour (``appendOnly``, CHECK constraints and invariants enforced on every write, deletion
vectors and column mapping). A feature is refused for
writing when a correct writer would have to do something we do not (CDC files, row ids, identity
values, generated columns ...): LakeVilla never writes to such tables, it refuses with
:class:`~lv_core.errors.UnsupportedFeature` naming the feature.

Rules on the *changes* of a write (:func:`check_changes`): an append-only table gets no data-changing
``remove``; rows added to a table with CHECK constraints or column invariants (:func:`constraints`)
must have been checked by the data plane (the Spark engine evaluates the SQL on every row it writes),
otherwise the write is refused.

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
    "check_changes",
    "check_readable",
    "check_writable",
    "constraints",
    "is_append_only",
    "required_protocol",
]

#: Reader features whose reader requirements we meet.
READER_FEATURES_SUPPORTED = frozenset({"timestampNtz", "vacuumProtocolCheck", "v2Checkpoint", "deletionVectors",
                                       "columnMapping"})
#: Writer features whose writer requirements we meet (some only while not in use, see below).
WRITER_FEATURES_SUPPORTED = frozenset({"appendOnly", "timestampNtz", "invariants", "checkConstraints",
                                       "changeDataFeed", "generatedColumns", "identityColumns",
                                       "columnMapping", "vacuumProtocolCheck", "deletionVectors"})

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
    if metadata is None or metadata.schema_string is None:
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

#: In use, but writable: the data plane enforces them on every row it writes (see :func:`check_changes`).
_ENFORCED = frozenset({"invariants", "checkConstraints"})

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
        if f in _IN_USE and f not in _ENFORCED:
            if _IN_USE[f](metadata):
                raise _refuse(table, f, "write")
            continue
        if f not in WRITER_FEATURES_SUPPORTED:
            raise _refuse(table, f, "write")
    # Configuration that asks writers for a feature even if the protocol lacks it: refuse too.
    # (delta.enableDeletionVectors only allows writers to write DVs; copy-on-write writers need none.)
    for key, feature in (("delta.enableRowTracking", "rowTracking"),
                         ("delta.enableTypeWidening", "typeWidening"),
                         ("delta.enableInCommitTimestamps", "inCommitTimestamp"),
                         ("delta.enableChangeDataFeed", "changeDataFeed")):
        if _conf(metadata, key) == "true":
            raise _refuse(table, feature, "write")
    if _conf(metadata, "delta.checkpointPolicy", "classic") == "v2":
        raise _refuse(table, "v2Checkpoint", "write")
    for feature in ("generatedColumns", "identityColumns"):
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


def constraints(metadata: Optional[Metadata]) -> list[tuple[str, str]]:
    """The row rules of a table: ``(description, SQL boolean expression)`` for each CHECK constraint
    (``delta.constraints.<name>`` in the configuration) and each column invariant
    (``delta.invariants`` in a field's metadata, ``{"expression": {"expression": "<SQL>"}}``).
    A row satisfies a rule only when the expression is true (false or null violate it).

    Raises:
        SchemaError: an invariant that is not the JSON the spec describes (we cannot enforce it).
    """
    out: list[tuple[str, str]] = []
    for key, value in sorted((metadata.configuration if metadata else {}).items()):
        if key.startswith("delta.constraints."):
            out.append((f"CHECK constraint {key[len('delta.constraints.'):]!r}", str(value)))
    schema = _schema(metadata)
    for path, _t, f in schema.iter_types() if schema is not None else ():
        raw = f.metadata.get("delta.invariants")
        if raw is None:
            continue
        try:
            sql = (json.loads(raw) if isinstance(raw, str) else raw)["expression"]["expression"]
        except (ValueError, TypeError, KeyError):
            raise SchemaError(f"column {path!r} has an invariant LakeVilla cannot parse ({raw!r}); "
                              "nothing was written") from None
        out.append((f"invariant of column {path!r}", str(sql)))
    return out


def check_changes(protocol: Protocol, metadata: Optional[Metadata], *, adds: Iterable[Any] = (),
                  removes: Iterable[Any] = (), rows_checked: bool = False, table: Optional[str] = None) -> None:
    """Raise :class:`UnsupportedFeature` if a write's ``adds``/``removes`` break a table feature.

    * ``delta.appendOnly``: no ``remove`` with ``dataChange`` (UPDATE, DELETE, MERGE that matches);
    * CHECK constraints / invariants: rows are added only if ``rows_checked`` (the data plane
      evaluated every rule on them).
    """
    if metadata is not None and is_append_only(metadata) and any(r.data_change for r in removes):
        where = f"table {table!r}" if table else "this table"
        err = UnsupportedFeature(
            f"{where} is append-only (table feature appendOnly, delta.appendOnly = true): UPDATE, DELETE and "
            "MERGE that change or remove rows are not allowed; nothing was changed. Help: only INSERT into it, "
            "or write the changed rows into a new table; to allow changes, set the table property "
            "delta.appendOnly = false with Spark/Delta.")
        err.feature = "appendOnly"  # type: ignore[attr-defined]
        raise err
    rules = constraints(metadata)
    if rules and not rows_checked and any(a.data_change for a in adds):
        feature = "checkConstraints" if rules[0][0].startswith("CHECK") else "invariants"
        where = f"table {table!r}" if table else "this table"
        err = UnsupportedFeature(
            f"{where} has {rules[0][0]} ({_WHAT[feature]}, {feature}) and this write path cannot evaluate it "
            "on the rows; nothing was written. Help: write through the Spark data plane (txn.insert / "
            "txn.update / txn.sql), which checks every row.")
        err.feature = feature  # type: ignore[attr-defined]
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
