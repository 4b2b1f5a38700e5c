"""Which Delta protocol versions and table features this code can read and write.

We read reader version 1 (plus reader 2/3 tables whose only reader features we handle:
``timestampNtz``, ``vacuumProtocolCheck``, ``v2Checkpoint``, ``deletionVectors``, ``columnMapping`` in
mode ``name`` or ``id`` (see :mod:`lv_core.delta.colmap`), ``typeWidening``, and ``variantType`` on the
direct data path) and write writer versions up to 7 with only features we honour (``appendOnly``,
CHECK constraints and invariants enforced on every write, deletion vectors, column mapping, type
widening; identity tables for writes that keep the identity column; change data feed, see below). A
feature is refused for writing when a correct writer would have to do something we do not (row ids,
identity values, in-commit timestamps, generated columns ...): LakeVilla never writes to such tables, it refuses with
:class:`~lv_core.errors.UnsupportedFeature` naming the feature.

Rules on the *changes* of a write (:func:`check_changes`): an append-only table gets no data-changing
``remove``; rows added to a table with CHECK constraints or column invariants (:func:`constraints`)
must have been checked by the data plane (the Spark engine evaluates the SQL on every row it writes),
otherwise the write is refused.

Change data feed (``delta.enableChangeDataFeed = true``): every write the data plane makes to such a
table comes with change data files (``cdc`` actions under ``_change_data/``, rows plus ``_change_type``:
``insert``, ``update_preimage``, ``update_postimage``, ``delete``); :func:`check_changes` refuses a write
that changes data without them (e.g. the pyarrow-only test operations). Not with column mapping (refused).

Type widening (:func:`type_changes`): older files hold a column in a narrower type than the schema;
both data paths read them as the wide type (Spark 4's Parquet reader under the table schema, pyarrow casts),
every change in ``delta.typeChanges`` must be one the spec allows (else the table is refused for reading),
data skipping ignores stats of widened columns, and writes use the schema's (wide) types.

Legacy protocols (writer 3-6) imply features; like delta-rs we only refuse those that are *in use*
(e.g. writer 4 with ``delta.enableChangeDataFeed`` off is writable).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Mapping, Optional

from lv_core.delta.actions import Metadata, Protocol
from lv_core.delta.colmap import mapping_mode
from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType
from lv_core.errors import SchemaError, UnsupportedFeature

__all__ = [
    "READER_FEATURES_SUPPORTED",
    "WRITER_FEATURES_SUPPORTED",
    "check_changes",
    "check_readable",
    "check_writable",
    "cdf_enabled",
    "constraints",
    "check_identity_update",
    "identity_columns",
    "identity_refusal",
    "type_changes",
    "is_append_only",
    "required_protocol",
]

#: Reader features whose reader requirements we meet.
#: ``variantType``: read by Spark itself only (the direct data path; see :func:`has_variant`).
READER_FEATURES_SUPPORTED = frozenset({"timestampNtz", "vacuumProtocolCheck", "v2Checkpoint", "deletionVectors",
                                       "columnMapping", "typeWidening", "typeWidening-preview", "variantType",
                                       "variantType-preview"})
#: Writer features whose writer requirements we meet (some only while not in use, see below).
WRITER_FEATURES_SUPPORTED = frozenset({"appendOnly", "timestampNtz", "invariants", "checkConstraints",
                                       "changeDataFeed", "generatedColumns", "identityColumns",
                                       "columnMapping", "vacuumProtocolCheck", "deletionVectors",
                                       "typeWidening", "typeWidening-preview", "inCommitTimestamp"})

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
    "variantShredding": "variant shredding",
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
    "adaptiveMetadata": "adaptive metadata",
    "icebergNativeV4": "Iceberg-native metadata (V4)",
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
#: Identity columns: UPDATE/DELETE/MERGE that keep the column's values are allowed; inserts are refused.
#: Change data feed: every data-changing write comes with change data files (see :func:`check_changes`).
_ENFORCED = frozenset({"invariants", "checkConstraints", "identityColumns", "changeDataFeed"})

#: Columns a change data feed adds to the table's rows (a table using CDF may not have them).
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def cdf_enabled(metadata: Optional[Metadata]) -> bool:
    """True if the table asks writers for change data files (``delta.enableChangeDataFeed = true``)."""
    return _conf(metadata, "delta.enableChangeDataFeed") == "true"

# Features implied by legacy writer versions (Delta spec, "Table Features" section).
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


def _where(table: Optional[str]) -> str:
    """How a message names the table: ``table 'x'``, or ``this table`` when the name is unknown."""
    return f"table {table!r}" if table else "this table"


#: Why a reader feature cannot be followed by LakeVilla's log reader, and the way out (read refusals).
_READ_WAY_OUT = {
    "catalogManaged": "its commits are ratified by a catalog (e.g. Unity Catalog) and the _delta_log may lag "
                      "behind it, so a log reader would show an old state. Help: read and write it through the "
                      "catalog (Spark/Databricks with the catalog configured)",
    "catalogOwned-preview": "its commits are ratified by a catalog and the _delta_log may lag behind it. Help: "
                            "read and write it through the catalog",
    "adaptiveMetadata": "part of its metadata lives outside the _delta_log entries LakeVilla replays. Help: read "
                        "it with a Delta client that supports the feature (Spark with Delta 4.x)",
    "icebergNativeV4": "its metadata is kept Iceberg-native, not (only) in the _delta_log. Help: read it with "
                       "a client that supports the feature (Spark with Delta 4.x, or an Iceberg client)",
    "variantShredding-preview": "its VARIANT values are shredded into typed Parquet columns. Help: read it "
                                "with Spark with Delta 4.x",
    "variantShredding": "its VARIANT values are shredded into typed Parquet columns. Help: read it with Spark "
                        "with Delta 4.x",
}


def _refuse(table: Optional[str], feature: str, action: str) -> UnsupportedFeature:
    what = _WHAT.get(feature, f"the table feature {feature!r}")
    where = _where(table)
    if action == "read" and feature in _READ_WAY_OUT:
        msg = f"{where} uses {what} ({feature}), which LakeVilla's log reader cannot follow: {_READ_WAY_OUT[feature]}."
    elif action == "read":
        msg = (f"{where} uses {what} ({feature}), which LakeVilla cannot read correctly. "
               "Help: read it with Spark or delta-rs instead.")
    else:
        msg = (f"{where} uses {what} ({feature}); LakeVilla never writes to tables with this feature, "
               "to avoid corrupting them. Help: write with Spark/Delta, or copy the data into a new "
               "LakeVilla table.")
    err = UnsupportedFeature(msg, feature=feature)
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
    for path, change in type_changes(metadata):
        if not _widening_supported(str(change.get("fromType")), str(change.get("toType"))):
            where = _where(table)
            err = UnsupportedFeature(
                f"{where}: the type of column {path!r} was changed from {change.get('fromType')!r} to "
                f"{change.get('toType')!r} (delta.typeChanges), a type change LakeVilla cannot read (type widening "
                "supports wider integers, integer/float to double, date to timestamp_ntz and wider decimals). "
                "Help: read it with Spark/Delta instead.", feature="typeWidening")
            raise err


def has_variant(schema: Optional[DeltaSchema]) -> bool:
    """True if a column (or nested field) of ``schema`` is of type ``variant``."""
    def walk(t: Any) -> bool:
        if isinstance(t, str):
            return t == "variant"
        if isinstance(t, ArrayType):
            return walk(t.element_type)
        if isinstance(t, MapType):
            return walk(t.key_type) or walk(t.value_type)
        if isinstance(t, StructType):
            return any(walk(f.type) for f in t.fields)
        return False

    return schema is not None and any(walk(f.type) for f in schema)


def variant_refusal(table: Optional[str]) -> UnsupportedFeature:
    """The error for reading VARIANT data through this client (pyarrow has no variant type here)."""
    where = _where(table)
    err = UnsupportedFeature(
        f"{where} has VARIANT columns (the VARIANT type, variantType): LakeVilla reads them only when Spark reads "
        "the table's files itself (data path 'direct'), not through this client. Help: connect a Spark server "
        "that reaches the storage (data_path='direct'), or read the table with Spark/Delta.", feature="variantType")
    return err


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
    # (delta.enableDeletionVectors / delta.enableTypeWidening only allow writers to write DVs / change
    # types; LakeVilla does neither.)
    # (delta.enableInCommitTimestamps without the protocol feature: LakeVilla does not upgrade protocols.)
    for key, feature in (("delta.enableRowTracking", "rowTracking"),
                         ("delta.enableInCommitTimestamps", "inCommitTimestamp")):
        if _conf(metadata, key) == "true" and feature not in features:
            raise _refuse(table, feature, "write")
    if cdf_enabled(metadata):
        _check_cdf(metadata, table)
    if _conf(metadata, "delta.checkpointPolicy", "classic") == "v2":
        raise _refuse(table, "v2Checkpoint", "write")
    for feature in ("generatedColumns",):
        if _IN_USE[feature](metadata):
            raise _refuse(table, feature, "write")
    if _column_mapping_on(metadata) and "columnMapping" not in features:
        err = UnsupportedFeature(
            f"{_where(table)} sets delta.columnMapping.mode but its protocol "
            f"({describe(protocol)}) does not declare column mapping (writer version 5, or the table feature "
            "columnMapping); LakeVilla does not create or upgrade column-mapped tables. Help: create the table "
            "with Spark/Delta (delta.columnMapping.mode), or leave the property out.", feature="columnMapping")
        raise err


def _check_cdf(metadata: Optional[Metadata], table: Optional[str]) -> None:
    where = _where(table)
    why = ""
    if _column_mapping_on(metadata):
        why = "LakeVilla does not write change data files for column-mapped tables"
    schema = _schema(metadata)
    clash = [f.name for f in (schema or ()) if f.name.lower() in CDF_COLUMNS]
    if clash:
        why = f"its column {clash[0]!r} is reserved for the change data feed"
    if why:
        raise UnsupportedFeature(f"{where} uses change data feed (changeDataFeed, delta.enableChangeDataFeed = "
                                 f"true), but {why}; nothing was written. Help: write with Spark/Delta.",
                                 feature="changeDataFeed")


_INT_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3}
_DEC = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def _widening_supported(old: str, new: str) -> bool:
    """True for the type changes of the Delta spec's Type Widening section (which Spark 4's Parquet reader
    and pyarrow's casts both read): integers to wider integers, to ``double`` (not ``long``) or to a decimal
    with at least 10 (``long``: 20) integer digits; ``float`` to ``double``; ``date`` to ``timestamp_ntz``;
    ``decimal(p, s)`` to ``decimal(p + k1, s + k2)`` with ``k1 >= k2 >= 0``."""
    old, new = old.strip().lower(), new.strip().lower()
    dec_new = _DEC.match(new)
    if old in _INT_RANK:
        if new in _INT_RANK:
            return _INT_RANK[new] > _INT_RANK[old]
        if new == "double":
            return old != "long"
        if dec_new:
            p, s = int(dec_new.group(1)), int(dec_new.group(2))
            return p - s >= (20 if old == "long" else 10)
        return False
    if old == "float":
        return new == "double"
    if old == "date":
        return new == "timestamp_ntz"
    dec_old = _DEC.match(old)
    if dec_old and dec_new:
        k1 = int(dec_new.group(1)) - int(dec_old.group(1))
        k2 = int(dec_new.group(2)) - int(dec_old.group(2))
        return k1 >= k2 >= 0
    return False


def type_changes(metadata: Optional[Metadata]) -> list[tuple[str, Mapping[str, Any]]]:
    """The type changes recorded in a table's schema (``delta.typeChanges`` in a field's metadata: a list
    of ``{"fromType", "toType", "fieldPath"?, "tableVersion"?}``), as ``(column path, change)``.

    Raises:
        UnsupportedFeature: a ``delta.typeChanges`` that is not such a list (we cannot tell what the files hold).
    """
    schema = _schema(metadata)
    out: list[tuple[str, Mapping[str, Any]]] = []
    for path, _t, f in schema.iter_types() if schema is not None else ():
        raw = f.metadata.get("delta.typeChanges")
        if raw is None:
            continue
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                raw = None
        if not isinstance(raw, list) or not all(isinstance(c, Mapping) for c in raw):
            raise UnsupportedFeature(f"column {path!r} has type-change metadata (delta.typeChanges) LakeVilla "
                                     f"cannot parse: {raw!r}. Help: read it with Spark/Delta instead.",
                                     feature="typeWidening")
        for change in raw:
            sub = change.get("fieldPath")
            out.append((f"{path}.{sub}" if sub else str(path), change))
    return out


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


_IDENTITY_KEYS = ("delta.identity.start", "delta.identity.step", "delta.identity.highWaterMark")


def identity_columns(metadata: Optional[Metadata]) -> list[str]:
    """The top-level columns of a table that are identity columns (``delta.identity.*`` in their metadata)."""
    schema = _schema(metadata)
    return [f.name for f in (schema or ())
            if any(k in f.metadata for k in _IDENTITY_KEYS)]


def identity_refusal(table: Optional[str], column: str, what: str) -> UnsupportedFeature:
    """The error for a write an identity column forbids: ``what`` is ``"insert"`` (LakeVilla does not
    generate identity values) or ``"update"`` (identity values never change)."""
    where = _where(table)
    if what == "update":
        msg = (f"{where}: column {column!r} is an identity column (identity columns, identityColumns); its values "
               "cannot be updated; nothing was changed. Help: update the other columns only.")
    else:
        msg = (f"{where} has the identity column {column!r} (identity columns, identityColumns): inserting rows needs "
               "generated identity values and a new high-water mark, which LakeVilla does not write; nothing was "
               "written. UPDATE, DELETE and MERGE without INSERT that leave the column alone are allowed. "
               "Help: insert with Spark/Delta.")
    err = UnsupportedFeature(msg, feature="identityColumns")
    return err


def check_identity_update(metadata: Optional[Metadata], columns: Iterable[str], table: Optional[str] = None) -> None:
    """Raise :class:`UnsupportedFeature` if an UPDATE assigns one of the table's identity columns."""
    identity = {c.lower(): c for c in identity_columns(metadata)}
    for c in columns:
        if c.lower() in identity:
            raise identity_refusal(table, identity[c.lower()], "update")


def check_changes(protocol: Protocol, metadata: Optional[Metadata], *, adds: Iterable[Any] = (),
                  removes: Iterable[Any] = (), rows_checked: bool = False, table: Optional[str] = None,
                  identity_kept: bool = False, cdc: Iterable[Any] = ()) -> None:
    """Raise :class:`UnsupportedFeature` if a write's ``adds``/``removes`` break a table feature.

    * ``delta.appendOnly``: no ``remove`` with ``dataChange`` (UPDATE, DELETE, MERGE that matches);
    * CHECK constraints / invariants: rows are added only if ``rows_checked`` (the data plane
      evaluated every rule on them);
    * identity columns: rows are added only if ``identity_kept`` (the data plane rewrote existing rows,
      keeping their identity values: UPDATE/DELETE/MERGE without INSERT), never new rows;
    * change data feed: a write that adds or removes rows comes with change data files (``cdc``).
    """
    adds = list(adds)
    removes = list(removes)
    if (cdf_enabled(metadata) and not list(cdc)
            and any(x.data_change for x in [*adds, *removes])):
        where = _where(table)
        err = UnsupportedFeature(
            f"{where} uses change data feed (changeDataFeed, delta.enableChangeDataFeed = true) and this write path "
            "does not write change data files; nothing was written. Help: write through the Spark data plane "
            "(txn.insert / txn.update / txn.delete / txn.sql), which writes them.", feature="changeDataFeed")
        raise err
    identity = identity_columns(metadata)
    if identity and not identity_kept and any(a.data_change for a in adds):
        raise identity_refusal(table, identity[0], "insert")
    if metadata is not None and is_append_only(metadata) and any(r.data_change for r in removes):
        where = _where(table)
        err = UnsupportedFeature(
            f"{where} is append-only (table feature appendOnly, delta.appendOnly = true): UPDATE, DELETE and "
            "MERGE that change or remove rows are not allowed; nothing was changed. Help: only INSERT into it, "
            "or write the changed rows into a new table; to allow changes, set the table property "
            "delta.appendOnly = false with Spark/Delta.", feature="appendOnly")
        raise err
    rules = constraints(metadata)
    if rules and not rows_checked and any(a.data_change for a in adds):
        feature = "checkConstraints" if rules[0][0].startswith("CHECK") else "invariants"
        where = _where(table)
        err = UnsupportedFeature(
            f"{where} has {rules[0][0]} ({_WHAT[feature]}, {feature}) and this write path cannot evaluate it "
            "on the rows; nothing was written. Help: write through the Spark data plane (txn.insert / "
            "txn.update / txn.sql), which checks every row.", feature=feature)
        raise err


def is_append_only(metadata: Metadata) -> bool:
    """True if ``delta.appendOnly`` is set: writers must not remove data files (dataChange removes)."""
    return _conf(metadata, "delta.appendOnly") == "true"


def ict_enabled(protocol: Optional[Protocol], metadata: Optional[Metadata]) -> bool:
    """In-commit timestamps are on: writer 7 with the ``inCommitTimestamp`` feature and the table
    property ``delta.enableInCommitTimestamps`` true (every commit then starts with a commitInfo that
    carries ``inCommitTimestamp``)."""
    if protocol is None or metadata is None:
        return False
    return (_conf(metadata, "delta.enableInCommitTimestamps") == "true" and protocol.min_writer_version == 7
            and "inCommitTimestamp" in (protocol.writer_features or ()))


def required_protocol(schema: DeltaSchema, configuration: Optional[Mapping[str, Any]] = None) -> Protocol:
    """The smallest protocol we write for a new table: 1/2 (1/4 with change data feed), or 3/7 with
    ``timestampNtz`` if needed; writer 7 with ``inCommitTimestamp`` when in-commit timestamps are asked
    for (``delta.enableInCommitTimestamps``)."""
    def on(key: str) -> bool:
        return str((configuration or {}).get(key, "")).lower() == "true"

    cdf = on("delta.enableChangeDataFeed")
    ntz = "timestamp_ntz" in schema.primitive_types()
    if on("delta.enableInCommitTimestamps"):
        writer = ("appendOnly", "invariants", "inCommitTimestamp") + (("timestampNtz",) if ntz else ()) \
            + (("changeDataFeed",) if cdf else ())
        return Protocol(3, 7, ("timestampNtz",), writer) if ntz else Protocol(1, 7, None, writer)
    if ntz:
        return Protocol(3, 7, ("timestampNtz",), ("timestampNtz",) + (("appendOnly",) if on("delta.appendOnly") else ())
                        + (("changeDataFeed",) if cdf else ()))
    return Protocol(1, 4) if cdf else Protocol(1, 2)


def describe(protocol: Protocol) -> str:
    """A short human description, e.g. ``reader 3 [timestampNtz], writer 7 [timestampNtz]``."""
    r = f"reader {protocol.min_reader_version}"
    if protocol.reader_features is not None:
        r += f" {json.dumps(list(protocol.reader_features))}"
    w = f"writer {protocol.min_writer_version}"
    if protocol.writer_features is not None:
        w += f" {json.dumps(list(protocol.writer_features))}"
    return f"{r}, {w}"
