"""A serial-order oracle for transaction histories over key/value tables (``id BIGINT, val DOUBLE``).

Operations are small values (:class:`Op`) that can be run two ways: inside a LakeVilla transaction
(:func:`to_operation`, file-level pyarrow operations, one row per file as in ``tests/helpers/bank``)
and against a reference database (:class:`Reference`, SQLite in memory). A history is a list of
:class:`TxnRecord` (each operation with what the transaction observed, and whether it committed).

:func:`explain` searches the permutations of the committed transactions for one whose serial
replay against the reference reproduces every observed read and the final tables: the history is
serializable exactly when such an order exists. No value is hand-picked: the reference decides.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

Rows = dict[str, list[tuple[int, float]]]  # table -> rows (id, val), sorted


# ----------------------------------------------------------------------------------- predicates


@dataclass(frozen=True)
class Pred:
    """A row predicate: ``all``, ``val == a``, ``val % a == b`` or ``id == a``."""

    kind: str
    a: float = 0
    b: float = 0

    def __str__(self) -> str:
        return {"all": "true", "eq": f"val = {self.a:g}", "mod": f"val % {self.a:g} = {self.b:g}",
                "id": f"id = {self.a:g}"}[self.kind]

    def sql(self) -> tuple[str, tuple]:
        if self.kind == "all":
            return "1", ()
        if self.kind == "eq":
            return "val = ?", (self.a,)
        if self.kind == "mod":
            return "CAST(val AS INTEGER) % ? = ?", (int(self.a), int(self.b))
        if self.kind == "id":
            return "id = ?", (int(self.a),)
        raise ValueError(self.kind)

    def test(self, id_: int, val: float | None) -> bool:
        if self.kind == "all":
            return True
        if self.kind == "id":
            return id_ == int(self.a)
        if val is None:
            return False
        if self.kind == "eq":
            return val == self.a
        return int(val) % int(self.a) == int(self.b)

    def mask(self, t: pa.Table) -> Any:
        ids, vals = t["id"].to_pylist(), t["val"].to_pylist()
        return pa.array([self.test(i, v) for i, v in zip(ids, vals, strict=False)], pa.bool_())


ALL = Pred("all")


def eq(v: float) -> Pred:
    return Pred("eq", v)


def mod(m: int, r: int) -> Pred:
    return Pred("mod", m, r)


def key(k: int) -> Pred:
    return Pred("id", k)


# ----------------------------------------------------------------------------------- operations

READ_KINDS = frozenset({"read", "scan"})


@dataclass(frozen=True)
class Op:
    """One operation on a key/value table.

    kinds: ``read`` (value(s) of ``key``), ``scan`` (rows matching ``pred``), ``set``
    (``val = value`` where ``pred``), ``add`` (``val = val + value`` where ``pred``), ``insert``
    (row ``key, value``; a blind append), ``delete`` (rows matching ``pred``), ``copy``
    (``INSERT INTO table SELECT key2, val FROM src WHERE id = key``: information flowing inside the
    database, the value is not returned to the caller).
    """

    kind: str
    table: str
    key: int | None = None
    value: float | None = None
    pred: Pred | None = None
    src: str | None = None
    key2: int | None = None

    @property
    def is_read(self) -> bool:
        return self.kind in READ_KINDS

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.src, self.table) if self.kind == "copy" and self.src != self.table else (self.table,)

    def __str__(self) -> str:
        k = self.kind
        if k == "read":
            return f"r({self.table}.{self.key})"
        if k == "scan":
            return f"scan({self.table} where {self.pred})"
        if k == "set":
            return f"w({self.table} where {self.pred} := {self.value:g})"
        if k == "add":
            return f"w({self.table} where {self.pred} += {self.value:g})"
        if k == "insert":
            return f"ins({self.table}.{self.key}={self.value:g})"
        if k == "delete":
            return f"del({self.table} where {self.pred})"
        if k == "copy":
            return f"copy({self.src}.{self.key} -> {self.table}.{self.key2})"
        return k

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "table": self.table}
        for f in ("key", "value", "src", "key2"):
            if getattr(self, f) is not None:
                d[f] = getattr(self, f)
        if self.pred is not None:
            d["pred"] = [self.pred.kind, self.pred.a, self.pred.b]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Op":
        p = d.get("pred")
        return cls(d["kind"], d["table"], d.get("key"), d.get("value"), Pred(p[0], p[1], p[2]) if p else None,
                   d.get("src"), d.get("key2"))


def read(table: str, k: int) -> Op:
    return Op("read", table, key=k)


def scan(table: str, pred: Pred = ALL) -> Op:
    return Op("scan", table, pred=pred)


def write(table: str, k: int, value: float) -> Op:
    return Op("set", table, value=value, pred=key(k))


def add(table: str, k: int, delta: float) -> Op:
    return Op("add", table, value=delta, pred=key(k))


def set_where(table: str, pred: Pred, value: float) -> Op:
    return Op("set", table, value=value, pred=pred)


def add_where(table: str, pred: Pred, delta: float) -> Op:
    return Op("add", table, value=delta, pred=pred)


def insert(table: str, k: int, value: float) -> Op:
    return Op("insert", table, key=k, value=value)


def delete(table: str, pred: Pred) -> Op:
    return Op("delete", table, pred=pred)


def copy(src: str, k: int, dst: str, k2: int) -> Op:
    return Op("copy", dst, key=k, src=src, key2=k2)


def norm_value(v: Any) -> Any:
    """Canonical form of an observed value (floats rounded, lists as tuples)."""
    if isinstance(v, float):
        return round(v, 6) + 0.0
    if isinstance(v, (list, tuple)):
        return tuple(norm_value(x) for x in v)
    return v


def read_result(rows: Iterable[tuple[int, float]], k: int) -> Any:
    """What ``read(table, k)`` observes: None (no row), the value, or a tuple (duplicate ids)."""
    vals = sorted(v for i, v in rows if i == k)
    if not vals:
        return None
    return norm_value(vals[0]) if len(vals) == 1 else norm_value(vals)


def scan_result(rows: Iterable[tuple[int, float]], pred: Pred) -> tuple:
    return norm_value(sorted((i, v) for i, v in rows if pred.test(i, v)))


# ----------------------------------------------------------------------------------- LakeVilla


def _kv(table: pa.Table) -> list[tuple[int, float]]:
    return list(zip(table["id"].to_pylist(), table["val"].to_pylist(), strict=False))


def to_operation(op: Op) -> Any:
    """The LakeVilla operation running ``op`` (reads are exposed: their value reaches the caller)."""
    from lv_core.delta.writer import write_data_files
    from lv_core.engine import arrow_ops as ops
    from lv_core.engine.arrow_io import read_data_files
    from lv_core.txn.ops import Operation, OpResult

    k = op.kind
    if k == "read":
        return ops.read(op.table, ops.eq("id", op.key), exposed=True)
    if k == "scan":
        assert op.pred is not None
        return ops.read(op.table, op.pred.mask, exposed=True)
    if k == "set":
        assert op.pred is not None and op.value is not None
        return ops.update(op.table, op.pred.mask, ops.set_value("val", float(op.value)),
                          logical={"sql": f"UPDATE {op.table} SET val = {op.value:g} WHERE {op.pred}"})
    if k == "add":
        assert op.pred is not None and op.value is not None
        return ops.update(op.table, op.pred.mask, ops.add_to("val", float(op.value)),
                          logical={"sql": f"UPDATE {op.table} SET val = val + {op.value:g} WHERE {op.pred}"})
    if k == "insert":
        return ops.append(op.table, pa.table({"id": pa.array([op.key], pa.int64()),
                                              "val": pa.array([op.value], pa.float64())}))
    if k == "delete":
        assert op.pred is not None
        return ops.delete(op.table, op.pred.mask, logical={"sql": f"DELETE FROM {op.table} WHERE {op.pred}"})
    if k == "copy":
        src, dst, key1, key2 = op.src, op.table, op.key, op.key2
        assert src is not None

        def run(ctx: Any) -> Any:
            snap = ctx.snapshot(src)
            files = list(ctx.files(src).values())
            data = read_data_files(ctx.store, src, files, snap.schema, snap.partition_columns)
            vals = data.filter(pc.equal(data["id"], key1))["val"].to_pylist()
            res = OpResult(value=len(vals), reads={src: {f.path for f in files}}, scans={src})
            if vals:
                rows = pa.table({"id": pa.array([key2] * len(vals), pa.int64()), "val": pa.array(vals, pa.float64())})
                res.adds = {dst: write_data_files(ctx.store, dst, ctx.snapshot(dst), rows,
                                                  new_path=lambda v: ctx.new_path(dst, v))}
            return res

        return Operation("copy", op.tables, run,
                         logical={"sql": f"INSERT INTO {dst} SELECT {key2}, val FROM {src} WHERE id = {key1}"})
    raise ValueError(f"unknown op kind {k!r}")


def run_op(txn: Any, op: Op) -> Any:
    """Run ``op`` in ``txn``; return what the caller observes (normalised), None for writes."""
    value = txn.execute(to_operation(op))
    if op.kind == "read":
        return read_result(_kv(value), op.key)  # type: ignore[arg-type]
    if op.kind == "scan":
        return scan_result(_kv(value), ALL)
    return None


def table_rows(url: str, version: int | None = None) -> list[tuple[int, float]]:
    """A table's rows (sorted) through a plain Delta reader (delta-rs)."""
    import deltalake

    t = deltalake.DeltaTable(url, version=version).to_pyarrow_table(columns=["id", "val"])
    return sorted(norm_value(r) for r in _kv(t))


# ----------------------------------------------------------------------------------- reference


class Reference:
    """The tables in SQLite (in memory): the serial semantics every history is judged by."""

    def __init__(self, initial: Mapping[str, Iterable[tuple[int, float]]]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.tables = sorted(initial)
        for t in self.tables:
            self.db.execute(f'CREATE TABLE "{t}" (id INTEGER NOT NULL, val REAL)')
            self.db.executemany(f'INSERT INTO "{t}" VALUES (?, ?)', list(initial[t]))

    def rows(self, table: str) -> list[tuple[int, float]]:
        return sorted(norm_value(r) for r in self.db.execute(f'SELECT id, val FROM "{table}"'))

    def state(self) -> Rows:
        return {t: self.rows(t) for t in self.tables}

    def apply(self, op: Op) -> Any:
        k, t = op.kind, op.table
        if k == "read":
            return read_result(self.db.execute(f'SELECT id, val FROM "{t}" WHERE id = ?', (op.key,)), op.key)
        assert k == "insert" or k == "copy" or op.pred is not None
        if k == "scan":
            where, args = op.pred.sql()  # type: ignore[union-attr]
            return scan_result(self.db.execute(f'SELECT id, val FROM "{t}" WHERE {where}', args), ALL)
        if k in ("set", "add"):
            where, args = op.pred.sql()  # type: ignore[union-attr]
            expr = "?" if k == "set" else "val + ?"
            self.db.execute(f'UPDATE "{t}" SET val = {expr} WHERE {where}', (op.value, *args))
        elif k == "insert":
            self.db.execute(f'INSERT INTO "{t}" VALUES (?, ?)', (op.key, op.value))
        elif k == "delete":
            where, args = op.pred.sql()  # type: ignore[union-attr]
            self.db.execute(f'DELETE FROM "{t}" WHERE {where}', args)
        elif k == "copy":
            self.db.execute(f'INSERT INTO "{t}" SELECT ?, val FROM "{op.src}" WHERE id = ?', (op.key2, op.key))
        else:
            raise ValueError(k)
        return None


def replay_on(rows: Mapping[str, Iterable[tuple[int, float]]], ops: Sequence[Op]) -> tuple[list[Any], Rows]:
    """Run ``ops`` in order on ``rows``: (observed values of the reads, final rows)."""
    ref = Reference(rows)
    seen = [ref.apply(op) for op in ops]
    return [s for s, op in zip(seen, ops, strict=False) if op.is_read], ref.state()


# ----------------------------------------------------------------------------------- histories


@dataclass
class TxnRecord:
    """One transaction of a history: its operations with what it observed, and its outcome."""

    name: str
    ops: list[tuple[Op, Any]] = field(default_factory=list)
    outcome: str = "active"  # "committed", or why it did not ("R1", "exposed_read", "rollback", ...)

    @property
    def committed(self) -> bool:
        return self.outcome == "committed"


@dataclass
class Verdict:
    serial_order: list[str] | None  # None: no serial order explains the history
    tried: int
    why_not: list[str] = field(default_factory=list)  # per order, the first mismatch

    @property
    def ok(self) -> bool:
        return self.serial_order is not None


def explain(initial: Mapping[str, Iterable[tuple[int, float]]], history: Sequence[TxnRecord],
            final: Mapping[str, Sequence[tuple[int, float]]]) -> Verdict:
    """Find a serial order of the committed transactions that reproduces their reads and ``final``."""
    committed = [t for t in history if t.committed]
    want_final = {t: sorted(norm_value(r) for r in rows) for t, rows in final.items()}
    initial = {t: list(rows) for t, rows in initial.items()}
    why: list[str] = []
    tried = 0
    for order in itertools.permutations(committed):
        tried += 1
        ref = Reference(initial)
        mismatch = None
        for txn in order:
            for op, observed in txn.ops:
                got = ref.apply(op)
                if op.is_read and norm_value(got) != norm_value(observed):
                    mismatch = f"{txn.name} {op}: saw {observed}, serially {got}"
                    break
            if mismatch:
                break
        if mismatch is None:
            state = ref.state()
            diff = [t for t in want_final if state.get(t, []) != want_final[t]]
            if not diff:
                return Verdict([t.name for t in order], tried)
            mismatch = f"final {diff[0]}: {want_final[diff[0]]} != serially {state.get(diff[0])}"
        why.append(f"{'<'.join(t.name for t in order) or '(none)'}: {mismatch}")
    return Verdict(None, tried, why)


def _diff(before: Rows, after: Rows) -> dict[tuple[str, int], tuple[float, ...] | None]:
    """Row images a transaction installed: (table, id) -> its values (None: deleted)."""
    out: dict[tuple[str, int], tuple[float, ...] | None] = {}
    for t in set(before) | set(after):
        b: dict[int, list[float]] = {}
        a: dict[int, list[float]] = {}
        for i, v in before.get(t, []):
            b.setdefault(i, []).append(v)
        for i, v in after.get(t, []):
            a.setdefault(i, []).append(v)
        for i in set(a) | set(b):
            if sorted(a.get(i, [])) != sorted(b.get(i, [])):
                out[(t, i)] = tuple(sorted(a[i])) if i in a else None
    return out


def _install(state: Rows, diff: Mapping[tuple[str, int], tuple[float, ...] | None]) -> Rows:
    out = {t: [r for r in rows if (t, r[0]) not in diff] for t, rows in state.items()}
    for (t, i), vals in diff.items():
        for v in vals or ():
            out.setdefault(t, []).append((i, v))
    return {t: sorted(rows) for t, rows in out.items()}


def explain_snapshot(initial: Mapping[str, Iterable[tuple[int, float]]], history: Sequence[TxnRecord],
                     final: Mapping[str, Sequence[tuple[int, float]]]) -> Verdict:
    """Find a snapshot-isolation explanation: a commit order and, per transaction, a snapshot (a prefix
    of that order) such that each reads its snapshot plus its own writes, installs the rows it changed
    at its commit, and no two overlapping transactions changed the same row (first committer wins).

    A history with such an explanation but no serial order shows only write skew (G2-item, G2)."""
    committed = [t for t in history if t.committed]
    want = {t: sorted(norm_value(r) for r in rows) for t, rows in final.items()}
    start: Rows = {t: sorted(norm_value(r) for r in rows) for t, rows in initial.items()}
    tried = 0
    for order in itertools.permutations(committed):
        for snaps in itertools.product(*[range(i + 1) for i in range(len(order))]):
            tried += 1
            states = [start]  # states[k]: after the first k commits
            diffs: list[dict] = []
            ok = True
            for pos, (txn, s) in enumerate(zip(order, snaps, strict=False)):
                snap = states[s]
                ref = Reference(snap)
                for op, observed in txn.ops:
                    got = ref.apply(op)
                    if op.is_read and norm_value(got) != norm_value(observed):
                        ok = False
                        break
                if not ok:
                    break
                d = _diff(snap, ref.state())
                if any(set(d) & set(diffs[j]) for j in range(s, pos)):
                    ok = False  # a concurrent transaction committed a change to the same row first
                    break
                diffs.append(d)
                states.append(_install(states[-1], d))
            if ok and all(states[-1].get(t, []) == want[t] for t in want):
                return Verdict([f"{t.name}@{s}" for t, s in zip(order, snaps, strict=False)], tried)
    return Verdict(None, tried)


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
