"""Hermitage-style anomaly schedules (after Martin Kleppmann's Hermitage) and a runner judged by the oracle.

Each schedule is written once over abstract items (x = 10, y = 20, z = 30) and run in two forms:
``ST`` puts every item in one table, ``MT`` puts each item in its own table (the paper's "-MT"
variants). Steps run in order in one thread; a commit runs in the background and the schedule
continues as soon as it finished or started waiting for another transaction (as Hermitage's
"blocks" notes). What each transaction observed, its outcome and the final tables go to
:func:`tests.helpers.oracle.explain`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pyarrow as pa

import lv_core
from lv_core import events as ev
from lv_core.engine import arrow_ops as aops
from lv_core.errors import LvError, TransactionAborted
from tests.helpers import oracle as O

C, A = "commit", "abort"

#: run name -> (preset, features)
CONFIGS: dict[str, tuple[str, Any]] = {
    "serializable": ("serializable", None),
    "snapshot": ("snapshot", None),
    "write_serializable": ("write_serializable", None),
    "repeatable_read": ("repeatable_read", None),
    "R": ("repeatable_read", {"R"}),
    "delta": ("delta", None),
}

VALUES = {"x": 10.0, "y": 20.0, "z": 30.0}
FORMS = {
    "ST": {"x": ("t", 1), "y": ("t", 2), "z": ("t", 3)},
    "MT": {"x": ("a", 1), "y": ("b", 2), "z": ("c", 3)},
}


class Form:
    """Maps the abstract items of a schedule to tables and keys."""

    def __init__(self, name: str, items: Sequence[str]) -> None:
        self.name = name
        self.items = list(items)
        self.where = {i: FORMS[name][i] for i in items}
        self.tables = sorted({t for t, _ in self.where.values()})

    def t(self, item: str) -> str:
        return self.where[item][0]

    def k(self, item: str) -> int:
        return self.where[item][1]

    def initial(self) -> dict[str, list[tuple[int, float]]]:
        out: dict[str, list[tuple[int, float]]] = {t: [] for t in self.tables}
        for i in self.items:
            out[self.t(i)].append((self.k(i), VALUES[i]))
        return out

    # operations -----------------------------------------------------------------------
    def r(self, *items: str) -> list[O.Op]:
        return [O.read(self.t(i), self.k(i)) for i in items]

    def w(self, item: str, v: float) -> list[O.Op]:
        return [O.write(self.t(item), self.k(item), v)]

    def add(self, item: str, d: float) -> list[O.Op]:
        return [O.add(self.t(item), self.k(item), d)]

    def scan(self, pred: O.Pred = O.ALL) -> list[O.Op]:
        return [O.scan(t, pred) for t in self.tables]

    def ins(self, like: str, k: int, v: float) -> list[O.Op]:
        return [O.insert(self.t(like), k, v)]

    def delete(self, pred: O.Pred) -> list[O.Op]:
        return [O.delete(t, pred) for t in self.tables]

    def set_where(self, pred: O.Pred, v: float) -> list[O.Op]:
        return [O.set_where(t, pred, v) for t in self.tables]

    def add_where(self, pred: O.Pred, d: float) -> list[O.Op]:
        return [O.add_where(t, pred, d) for t in self.tables]

    def copy(self, src: str, into: str, k2: int) -> list[O.Op]:
        return [O.copy(self.t(src), self.k(src), self.t(into), k2)]


Step = tuple[str, Any]  # (transaction, list of Ops | "commit" | "abort")


@dataclass(frozen=True)
class Anomaly:
    name: str
    doc: str
    items: tuple[str, ...]
    schedule: Callable[[Form], list[Step]]


def _g0(F: Form) -> list[Step]:
    return [("T1", F.w("x", 11)), ("T2", F.w("x", 12)), ("T2", F.w("y", 22)), ("T1", F.w("y", 21)),
            ("T1", C), ("T2", C)]


def _g1a(F: Form) -> list[Step]:
    return [("T1", F.w("x", 101) + F.w("y", 201)), ("T2", F.r("x", "y")), ("T1", A), ("T2", F.r("x", "y")),
            ("T2", C)]


def _g1b(F: Form) -> list[Step]:
    return [("T1", F.w("x", 101) + F.w("y", 201)), ("T2", F.r("x", "y")), ("T1", F.w("x", 11) + F.w("y", 21)),
            ("T1", C), ("T2", F.r("x", "y")), ("T2", C)]


def _g1c(F: Form) -> list[Step]:
    # information flows inside the database (INSERT ... SELECT), as in the paper's multi-table test
    return [("T1", F.w("x", 11)), ("T2", F.w("y", 22)), ("T1", F.copy("y", "z", 101)), ("T2", F.copy("x", "z", 102)),
            ("T1", C), ("T2", C)]


def _otv(F: Form) -> list[Step]:
    return [("T1", F.w("x", 11) + F.w("y", 19)), ("T2", F.w("x", 12)), ("T1", C), ("T3", F.r("x")),
            ("T2", F.w("y", 18)), ("T3", F.r("y")), ("T2", C), ("T3", F.r("x", "y")), ("T3", C)]


def _pmp(F: Form) -> list[Step]:
    return [("T1", F.scan(O.eq(30))), ("T2", F.ins("y", 3, 30)), ("T2", C), ("T1", F.scan(O.mod(3, 0))), ("T1", C)]


def _pmp_write(F: Form) -> list[Step]:
    return [("T1", F.add_where(O.ALL, 10)), ("T2", F.scan(O.eq(20))), ("T2", F.delete(O.eq(20))), ("T1", C),
            ("T2", F.scan(O.eq(20))), ("T2", C)]


def _p4(F: Form) -> list[Step]:
    return [("T1", F.r("x", "y")), ("T2", F.r("x", "y")), ("T1", F.w("x", 11) + F.w("y", 21)),
            ("T2", F.w("x", 11) + F.w("y", 21)), ("T1", C), ("T2", C)]


def _g_single(F: Form) -> list[Step]:
    return [("T1", F.r("x")), ("T2", F.r("x", "y")), ("T2", F.w("x", 12) + F.w("y", 18)), ("T2", C),
            ("T1", F.r("y")), ("T1", C)]


def _g_single_dependencies(F: Form) -> list[Step]:
    return [("T1", F.scan(O.mod(5, 0))), ("T2", F.set_where(O.eq(10), 12)), ("T2", C), ("T1", F.scan(O.mod(3, 0))),
            ("T1", C)]


def _g_single_write_1(F: Form) -> list[Step]:
    return [("T1", F.r("x")), ("T2", F.scan()), ("T2", F.w("x", 12) + F.w("y", 18)), ("T2", C),
            ("T1", F.delete(O.eq(20))), ("T1", C)]


def _g_single_write_2(F: Form) -> list[Step]:
    return [("T1", F.r("x")), ("T2", F.scan()), ("T2", F.w("x", 12)), ("T1", F.delete(O.eq(20))),
            ("T2", F.w("y", 18)), ("T2", C), ("T1", C)]


def _g2_item(F: Form) -> list[Step]:
    return [("T1", F.r("x", "y")), ("T2", F.r("x", "y")), ("T1", F.w("x", 11)), ("T2", F.w("y", 21)),
            ("T1", C), ("T2", C)]


def _g2(F: Form) -> list[Step]:
    return [("T1", F.scan(O.mod(3, 0))), ("T2", F.scan(O.mod(3, 0))), ("T1", F.ins("x", 3, 30)),
            ("T2", F.ins("y", 4, 42)), ("T1", C), ("T2", C)]


def _g2_two_edges(F: Form) -> list[Step]:
    return [("T1", F.scan()), ("T2", F.add("y", 5)), ("T2", C), ("T3", F.scan()), ("T3", C), ("T1", F.w("x", 0)),
            ("T1", C)]


ANOMALIES: list[Anomaly] = [
    Anomaly("G0", "write cycles: T1 and T2 write x and y in opposite orders", ("x", "y"), _g0),
    Anomaly("G1a", "aborted reads: T2 must not see x, y of T1 which aborts", ("x", "y"), _g1a),
    Anomaly("G1b", "intermediate reads: T2 must not see T1's first values", ("x", "y"), _g1b),
    Anomaly("G1c", "circular information flow: each copies the item the other wrote", ("x", "y", "z"), _g1c),
    Anomaly("OTV", "observed transaction vanishes: T3 sees x of T1 and y of T2", ("x", "y"), _otv),
    Anomaly("PMP", "predicate-many-preceders: a predicate read sees a later insert", ("x", "y"), _pmp),
    Anomaly("PMP-write", "predicate-many-preceders with a delete by predicate", ("x", "y"), _pmp_write),
    Anomaly("P4", "lost update: both read, both write x and y", ("x", "y"), _p4),
    Anomaly("G-single", "read skew: T1 reads x before and y after T2", ("x", "y"), _g_single),
    Anomaly("G-single-dep", "read skew through predicate reads", ("x", "y"), _g_single_dependencies),
    Anomaly("G-single-write-1", "read skew, then a delete by predicate", ("x", "y"), _g_single_write_1),
    Anomaly("G-single-write-2", "read skew, interleaved delete by predicate", ("x", "y"), _g_single_write_2),
    Anomaly("G2-item", "write skew: both read x and y, each writes one", ("x", "y"), _g2_item),
    Anomaly("G2", "anti-dependency cycle through predicate reads and inserts", ("x", "y"), _g2),
    Anomaly("G2-two-edges", "anti-dependency cycle over three transactions", ("x", "y"), _g2_two_edges),
]
BY_NAME = {a.name: a for a in ANOMALIES}


# ----------------------------------------------------------------------------------- runner


@dataclass
class CaseResult:
    anomaly: str
    form: str
    config: str
    history: list[O.TxnRecord]
    final: dict[str, list[tuple[int, float]]]
    verdict: O.Verdict
    snapshot_verdict: O.Verdict | None = None
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.errors

    @property
    def code(self) -> str:
        """``.`` serializable, ``w`` write skew only (a snapshot-isolation explanation exists), ``X`` neither."""
        if self.errors:
            return "E"
        if self.verdict.ok:
            return "."
        return "w" if self.snapshot_verdict is not None and self.snapshot_verdict.ok else "X"

    def describe(self) -> str:
        head = f"serializable as {'<'.join(self.verdict.serial_order or [])}" if self.ok else "ANOMALY"
        if self.code == "w" and self.snapshot_verdict is not None:
            head += f" (write skew only: {', '.join(self.snapshot_verdict.serial_order or [])})"
        lines = [f"{self.anomaly}/{self.form} under {self.config}: {head}"]
        for t in self.history:
            ops = ", ".join(f"{op}={obs}" if op.is_read else str(op) for op, obs in t.ops)
            lines.append(f"  {t.name} [{t.outcome}]: {ops}")
        lines.append(f"  final: {self.final}")
        if not self.ok:
            lines += [f"  {w}" for w in self.verdict.why_not[:6]]
        lines += [f"  error: {e}" for e in self.errors]
        return "\n".join(lines)


def setup_tables(lh: lv_core.Lakehouse, initial: dict[str, list[tuple[int, float]]], *, register: bool = True) -> None:
    """Create the tables (one row per data file) and put them into the global version log."""
    for t, rows in initial.items():
        lh.create_table(t, "id BIGINT, val DOUBLE")
        txn = lh.begin("delta")
        for k, v in rows:
            txn.execute(aops.append(t, pa.table({"id": pa.array([k], pa.int64()), "val": pa.array([v], pa.float64())})))
        txn.commit()
    if register:  # the first validated write adds a table to the global log (built on demand)
        txn = lh.begin("serializable")
        for t in initial:
            txn.execute(O.to_operation(O.add_where(t, O.ALL, 0)))
        txn.commit()


def _start_commit(txn: Any, settle_s: float) -> Any:
    """Commit in the background; return once it finished or waits for another transaction."""
    n0 = len(txn.events.history)
    fut = txn.commit_async()
    deadline = time.monotonic() + settle_s
    while not fut.done() and time.monotonic() < deadline:
        if any(isinstance(e, ev.Waiting) for e in txn.events.history[n0:]):
            break
        time.sleep(0.002)
    return fut


def run_case(root: str, anomaly: Anomaly, form: str, config: str, *, store_wrapper: Any = None,
             timeout_s: float = 20.0, settle_s: float = 5.0) -> CaseResult:
    t0 = time.monotonic()
    F = Form(form, anomaly.items)
    preset, features = CONFIGS[config]
    lh = lv_core.connect(root, lease_s=10.0, cycle_check_s=0.05, shift_after_s=2.0)
    if store_wrapper is not None:
        lh = lv_core.Lakehouse(store_wrapper(lh.store), lease_s=10.0, cycle_check_s=0.05, shift_after_s=2.0)
    initial = F.initial()
    setup_tables(lh, initial)
    txns: dict[str, Any] = {}
    records: dict[str, O.TxnRecord] = {}
    futures: dict[str, Any] = {}
    errors: list[str] = []
    for name, action in anomaly.schedule(F):
        if name not in txns:
            txns[name] = lh.begin(preset, features=features, timeout_s=timeout_s, name=name)
            records[name] = O.TxnRecord(name)
        txn, rec = txns[name], records[name]
        if rec.outcome != "active":
            continue  # aborted earlier: its remaining steps do not run
        if action == C:
            rec.outcome = "committing"
            futures[name] = _start_commit(txn, settle_s)
        elif action == A:
            txn.rollback()
            rec.outcome = "rollback"
        else:
            for op in action:
                try:
                    rec.ops.append((op, O.run_op(txn, op)))
                except TransactionAborted as e:
                    rec.outcome = e.rule
                    txn.rollback()
                    break
                except LvError as e:
                    rec.outcome = "error"
                    errors.append(f"{name} {op}: {type(e).__name__}: {e}")
                    txn.rollback()
                    break
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s * 3)
            records[name].outcome = "committed"
        except TransactionAborted as e:
            records[name].outcome = e.rule
        except Exception as e:  # reported, fails the case
            records[name].outcome = "error"
            errors.append(f"{name} commit: {type(e).__name__}: {e}")
    for name, txn in txns.items():  # a transaction the schedule never ended
        if records[name].outcome == "active":
            txn.rollback()
            records[name].outcome = "rollback"
    final = {t: O.table_rows(lh.store.url(t)) for t in F.tables}
    history = [records[n] for n in sorted(records)]
    verdict = O.explain(initial, history, final)
    si = None if verdict.ok else O.explain_snapshot(initial, history, final)
    return CaseResult(anomaly.name, form, config, history, final, verdict, si, errors, time.monotonic() - t0)


LEGEND = ("cell = <single-table form><multi-table form>: '.' serializable (a serial order explains it), "
          "'w' write skew only (not serializable, but snapshot isolation explains it), "
          "'X' anomaly (not even snapshot isolation explains it), 'E' error")


def cell(results: dict[str, CaseResult]) -> str:
    """Matrix cell for one anomaly x config: the code of the ST form, then of the MT form."""
    return "".join(results[f].code if f in results else "?" for f in ("ST", "MT"))


def parse_matrix(text: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    lines = [ln.split() for ln in text.strip().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    header = lines[0][1:]  # the first word labels the row names
    return header, {row[0]: dict(zip(header, row[1:], strict=False)) for row in lines[1:]}


def format_matrix(header: list[str], rows: dict[str, dict[str, str]],
                  expected: dict[str, dict[str, str]] | None = None) -> str:
    w0 = max(len(r) for r in [*rows, "anomaly"]) + 2
    widths = [max(len(h), 6) + 2 for h in header]
    out = ["anomaly".ljust(w0) + "".join(h.ljust(w) for h, w in zip(header, widths, strict=False))]
    for name, row in rows.items():
        cells = []
        for h, w in zip(header, widths, strict=False):
            c = row.get(h, "?")
            if expected is not None and expected.get(name, {}).get(h) not in (None, c):
                c += "!"
            cells.append(c.ljust(w))
        out.append(name.ljust(w0) + "".join(cells))
    return "\n".join(out)


# ----------------------------------------------------------------------------------- PostgreSQL reference

#: PostgreSQL 15 SERIALIZABLE outcomes of every schedule, measured by ``measure_postgres`` (see
#: tests/reliability/test_postgres.py, which measures them again whenever a server is installed)
PG_RECORDING = os.path.join(os.path.dirname(__file__), "postgres_outcomes.json")


def measure_postgres(dsn: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Run every schedule in both forms on the PostgreSQL server at ``dsn`` (SERIALIZABLE).

    Returns anomaly -> form -> {"outcomes": {txn: committed|aborted|rollback}, "serializable": bool}."""
    from tests.helpers.postgres import run_schedule

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for a in ANOMALIES:
        for form in ("ST", "MT"):
            F = Form(form, a.items)
            history, final = run_schedule(dsn, a.schedule(F), F.initial())
            ok = O.explain(F.initial(), history, final).ok
            out.setdefault(a.name, {})[form] = {"outcomes": {t.name: t.outcome for t in history}, "serializable": ok}
    return out


def load_postgres() -> dict[str, dict[str, dict[str, Any]]]:
    """The recorded PostgreSQL outcomes (written by ``python -m tests.reliability.anomalies record-postgres``)."""
    with open(PG_RECORDING, encoding="utf-8") as f:
        data: dict[str, dict[str, dict[str, Any]]] = json.load(f)["cases"]
    return data


def needless_aborts(result: CaseResult, pg: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Transactions LakeVilla aborted (any rule) that PostgreSQL SERIALIZABLE commits in the same schedule."""
    want = pg[result.anomaly][result.form]["outcomes"]
    return [t.name for t in result.history
            if t.outcome not in ("committed", "rollback") and want.get(t.name) == "committed"]


if __name__ == "__main__":  # python -m tests.reliability.anomalies record-postgres
    import sys

    from tests.helpers.postgres import cluster

    if sys.argv[1:] != ["record-postgres"]:
        raise SystemExit("usage: python -m tests.reliability.anomalies record-postgres")
    with cluster() as dsn:
        import psycopg

        with psycopg.connect(dsn) as c:
            version = c.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        cases = measure_postgres(dsn)
    with open(PG_RECORDING, "w", encoding="utf-8") as f:
        json.dump({"server": version, "isolation": "SERIALIZABLE", "cases": cases}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {PG_RECORDING}")
