"""Data skipping: decide from a file's ``add`` (stats, partition values) whether it may hold rows
matching a SQL ``WHERE`` text. Pure (no Spark, no I/O).

The predicate is parsed with sqlglot (Spark dialect). Recognised: ``AND``/``OR``, comparisons
``col <op> literal`` (either side), ``BETWEEN``, ``IN``, ``IS [NOT] NULL``, ``NOT ... IS NULL`` and
bare boolean columns, with number, string, boolean, ``DATE '...'``/``TIMESTAMP '...'`` and
``CAST('...' AS DATE|TIMESTAMP)`` literals. Anything else counts as "may match": when in doubt a file
is kept, so skipping can only cost speed, never rows. Partition columns are compared exactly with the
file's ``partitionValues``; data columns against ``minValues``/``maxValues``/``nullCount``, taking into
account how writers bound them (string maxima may be absent, float32 values printed as decimals,
timestamp maxima truncated to milliseconds).
"""

from __future__ import annotations

import datetime as dt
import decimal
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from lv_core.delta.actions import AddFile
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.stats import HIVE_NULL

__all__ = ["FileFilter", "file_filter"]

_INT = {"long", "integer", "short", "byte"}
_UTC = dt.timezone.utc


class _Unknown(Exception):
    """The predicate (or a literal in it) is beyond what stats can decide: keep the file."""


def _kind(dtype: Any) -> Optional[str]:
    if not isinstance(dtype, str):
        return None
    if dtype in _INT:
        return "int"
    if dtype.startswith("decimal"):
        return "decimal"
    if dtype in ("float", "double", "string", "date", "timestamp", "timestamp_ntz", "boolean"):
        return dtype
    return None


def _parse_ts(text: str, kind: str) -> dt.datetime:
    s = text.strip().replace(" ", "T", 1) if "T" not in text else text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        v = dt.datetime.fromisoformat(s)
    except ValueError as e:
        raise _Unknown from e
    if kind == "timestamp":
        return v.replace(tzinfo=_UTC) if v.tzinfo is None else v.astimezone(_UTC)
    if v.tzinfo is not None:
        raise _Unknown
    return v


def _from_text(text: str, kind: str) -> Any:
    """A value written as text (partition value, string literal, stats date) as a typed value."""
    try:
        if kind == "string":
            return text
        if kind == "int":
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "decimal":
            return decimal.Decimal(text)
        if kind == "date":
            return dt.date.fromisoformat(text.strip()[:10])
        if kind in ("timestamp", "timestamp_ntz"):
            return _parse_ts(text, kind)
        if kind == "boolean":
            if text.lower() in ("true", "false"):
                return text.lower() == "true"
    except (ValueError, ArithmeticError) as e:
        raise _Unknown from e
    raise _Unknown


def _from_stats(v: Any, kind: str, is_max: bool) -> Any:
    """A JSON stats value as a typed, *safe* bound (None: no bound)."""
    if v is None:
        return None
    try:
        if kind == "int" and isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
        if kind in ("float", "double") and isinstance(v, (int, float)) and not isinstance(v, bool):
            v = float(v)
            if kind == "float":  # float32 printed in decimal: widen by a float32 ulp or so
                v += (abs(v) * 1e-6 + 1e-38) * (1 if is_max else -1)
            return v
        if kind == "decimal" and isinstance(v, (int, float, str)) and not isinstance(v, bool):
            return decimal.Decimal(repr(v) if isinstance(v, float) else str(v))
        if kind == "string" and isinstance(v, str):
            return v
        if kind == "date" and isinstance(v, str):
            return dt.date.fromisoformat(v[:10])
        if kind in ("timestamp", "timestamp_ntz") and isinstance(v, str):
            t = _parse_ts(v, kind)
            return t + dt.timedelta(milliseconds=1) if is_max else t  # maxima may be truncated to ms
    except (ValueError, ArithmeticError, _Unknown):
        return None
    return None


@dataclass(frozen=True)
class _Col:
    name: str
    kind: Optional[str]
    partition: bool


def _mapping(value: Any) -> Mapping[str, Any]:
    """A stats section (``minValues``, ...): the JSON object, or {} when it is missing or not an object."""
    return value if isinstance(value, dict) else {}


class _Stats:
    """The parts of an ``add`` that skipping looks at."""

    def __init__(self, add: AddFile) -> None:
        self.add = add
        s = add.parsed_stats() or {}
        self.num_records: Optional[int] = s.get("numRecords") if isinstance(s.get("numRecords"), int) else None
        self.mins = _mapping(s.get("minValues"))
        self.maxs = _mapping(s.get("maxValues"))
        self.nulls = _mapping(s.get("nullCount"))

    def null_count(self, col: str) -> Optional[int]:
        n = self.nulls.get(col)
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    def all_null(self, col: str) -> bool:
        n = self.null_count(col)
        return n is not None and self.num_records is not None and n >= self.num_records

    def partition_value(self, c: _Col) -> Any:
        raw = self.add.partition_values.get(c.name)
        if raw is None or raw == "" or raw == HIVE_NULL:
            return None
        if c.kind is None:
            raise _Unknown
        return _from_text(raw, c.kind)


Pred = Callable[[_Stats], bool]
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq, "neq": operator.ne, "gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le,
}
_FLIP = {"eq": "eq", "neq": "neq", "gt": "lt", "gte": "lte", "lt": "gt", "lte": "gte"}


def _safe(pred: Pred) -> Pred:
    def run(s: _Stats) -> bool:
        try:
            return pred(s)
        except (_Unknown, TypeError, ValueError, ArithmeticError):
            return True

    return run


def _compare(c: _Col, op: str, value: Any) -> Pred:
    fn = _OPS[op]

    def pred(s: _Stats) -> bool:
        if c.partition:
            pv = s.partition_value(c)
            return pv is not None and fn(pv, value)
        if s.num_records == 0 or s.all_null(c.name):
            return False
        if c.kind is None:
            return True
        lo = _from_stats(s.mins.get(c.name), c.kind, False)
        hi = _from_stats(s.maxs.get(c.name), c.kind, True)
        if op == "eq":
            return not ((lo is not None and value < lo) or (hi is not None and value > hi))
        if op in ("gt", "gte"):
            return hi is None or fn(hi, value)
        if op in ("lt", "lte"):
            return lo is None or fn(lo, value)
        return True  # <>: stats cannot tell

    return _safe(pred)


def _is_null(c: _Col, want_null: bool) -> Pred:
    def pred(s: _Stats) -> bool:
        if c.partition:
            return (s.partition_value(c) is None) == want_null
        if s.num_records == 0:
            return False
        n = s.null_count(c.name)
        if n is None:
            return True
        if want_null:
            return n > 0
        return s.num_records is None or s.num_records - n > 0

    return _safe(pred)


class _Compiler:
    def __init__(self, schema: DeltaSchema, partition_columns: Sequence[str],
                 physical: Optional[Mapping[str, str]] = None) -> None:
        self.fields = {f.name.lower(): f for f in schema}
        self.physical = physical or {}
        self.parts = {p.lower() for p in partition_columns}

    def column(self, node: Any) -> Optional[_Col]:
        from sqlglot import expressions as exp

        if not isinstance(node, exp.Column):
            return None
        if node.table and node.table.lower() in self.fields:
            return None  # struct field access (s.a), not a qualified column
        f = self.fields.get(node.name.lower())
        if f is None:
            return None
        if "delta.typeChanges" in f.metadata:  # widened: older files' stats/values are of the narrow type
            return _Col(self.physical.get(f.name, f.name), None, f.name.lower() in self.parts)
        # stats and partition values are keyed by the physical name (column mapping)
        return _Col(self.physical.get(f.name, f.name), _kind(f.type), f.name.lower() in self.parts)

    def literal(self, node: Any, kind: Optional[str]) -> Any:
        from sqlglot import expressions as exp

        if kind is None:
            raise _Unknown
        if isinstance(node, exp.Paren):
            return self.literal(node.this, kind)
        if isinstance(node, exp.Neg):
            v = self.literal(node.this, kind)
            if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
                return -v
            raise _Unknown
        if isinstance(node, exp.Boolean):
            if kind != "boolean":
                raise _Unknown
            return bool(node.this)
        if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.this, exp.Literal) and node.this.is_string:
            target = node.to.this.name.lower() if node.to is not None else ""
            if target == "date" and kind == "date":
                return _from_text(node.this.this, "date")
            if target.startswith("timestamp") and kind in ("timestamp", "timestamp_ntz"):
                return _from_text(node.this.this, kind)
            raise _Unknown
        if isinstance(node, exp.Literal):
            text = node.this
            if node.is_string:
                if kind in ("string", "date", "timestamp", "timestamp_ntz"):
                    return _from_text(text, kind)
                raise _Unknown  # '5' compared with a number: leave Spark's casting rules to Spark
            if kind not in ("int", "decimal", "float", "double"):
                raise _Unknown
            try:
                num = decimal.Decimal(text)
            except ArithmeticError as e:
                raise _Unknown from e
            if kind in ("float", "double"):
                return float(num)
            return int(num) if num == num.to_integral_value() and "e" not in text.lower() else num
        raise _Unknown

    def compile(self, node: Any) -> Pred:
        from sqlglot import expressions as exp

        yes: Pred = lambda s: True  # noqa: E731
        try:
            if isinstance(node, exp.Paren):
                return self.compile(node.this)
            if isinstance(node, exp.And):
                a, b = self.compile(node.left), self.compile(node.right)
                return lambda s: a(s) and b(s)
            if isinstance(node, exp.Or):
                a, b = self.compile(node.left), self.compile(node.right)
                return lambda s: a(s) or b(s)
            if isinstance(node, exp.Not):
                inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
                if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
                    c = self.column(inner.this)
                    return _is_null(c, False) if c else yes
                return yes
            if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
                c = self.column(node.this)
                return _is_null(c, True) if c else yes
            for cls, op in ((exp.EQ, "eq"), (exp.NEQ, "neq"), (exp.GT, "gt"), (exp.GTE, "gte"),
                            (exp.LT, "lt"), (exp.LTE, "lte")):
                if isinstance(node, cls):
                    c, other, o = self.column(node.this), node.expression, op
                    if c is None:
                        c, other, o = self.column(node.expression), node.this, _FLIP[op]
                    if c is None:
                        return yes
                    return _compare(c, o, self.literal(other, c.kind))
            if isinstance(node, exp.Between):
                c = self.column(node.this)
                if c is None:
                    return yes
                lo = _compare(c, "gte", self.literal(node.args["low"], c.kind))
                hi = _compare(c, "lte", self.literal(node.args["high"], c.kind))
                return lambda s: lo(s) and hi(s)
            if isinstance(node, exp.In):
                c = self.column(node.this)
                if c is None or node.args.get("query") is not None or not node.expressions:
                    return yes
                preds = [_compare(c, "eq", self.literal(e, c.kind)) for e in node.expressions]
                return lambda s: any(p(s) for p in preds)
            if isinstance(node, exp.Column):
                c = self.column(node)
                if c is not None and c.kind == "boolean":
                    return _compare(c, "eq", True)
            if isinstance(node, exp.Boolean):
                return (lambda s: True) if node.this else (lambda s: False)
        except _Unknown:
            return yes
        return yes


class FileFilter:
    """``FileFilter(add) -> bool``: False only when the file certainly holds no matching row.

    Attributes:
        where: the predicate text (None: every row matches).
        effective: True when at least part of the predicate could be used for skipping.
    """

    def __init__(self, where: Optional[str], schema: DeltaSchema, partition_columns: Sequence[str] = (),
                 physical: Optional[Mapping[str, str]] = None) -> None:
        self.where = where
        self._spec = {"where": where, "schema": schema.to_json(), "partition_columns": list(partition_columns),
                      "physical": dict(physical) if physical is not None else None}
        self._pred: Optional[Pred] = None
        if where is None or not str(where).strip():
            return
        try:
            import sqlglot

            tree = sqlglot.parse_one(str(where), read="spark")
        except Exception:  # unparsable here: Spark will report it; skip nothing
            return
        self._pred = _Compiler(schema, partition_columns, physical).compile(tree)

    @property
    def effective(self) -> bool:
        return self._pred is not None

    def __call__(self, add: AddFile) -> bool:
        if self._pred is None:
            return True
        return bool(self._pred(_Stats(add)))

    def __repr__(self) -> str:
        return f"FileFilter({self.where!r})"

    def spec(self) -> dict[str, Any]:
        """Everything the filter is made of, JSON-able: :meth:`from_spec` rebuilds the same test elsewhere
        (a group-commit holder checks a queued commit's predicate with it: docs/PROTOCOL.md)."""
        return dict(self._spec)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "FileFilter":
        """The filter :meth:`spec` describes (raises ValueError, KeyError or TypeError when malformed)."""
        physical = spec.get("physical")
        return cls(spec["where"], DeltaSchema.from_json(spec["schema"]), [str(c) for c in spec["partition_columns"]],
                   None if physical is None else {str(k): str(v) for k, v in dict(physical).items()})


def file_filter(where: Optional[str], schema: DeltaSchema, partition_columns: Sequence[str] = (),
                physical: Optional[Mapping[str, str]] = None) -> FileFilter:
    """Compile ``where`` (Spark SQL text) into a per-file "may match" test. ``physical`` maps a column's
    name to the one its stats and partition values use (column mapping: :attr:`ColumnMapping.names`)."""
    return FileFilter(where, schema, partition_columns, physical)

