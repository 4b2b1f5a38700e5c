"""The list-append workload: random multi-table transactions that read whole lists and append unique
integers, each recorded as it was invoked and as it ended (:mod:`lv_core.blackbox.history`).

A client records a transaction twice, as Jepsen clients do: an *invoke* line before it runs (its
planned appends; a client killed from here on leaves an outcome nobody knows) and a *done* line with
what it read and how it ended. Nothing a transaction learns about versions is recorded: only values.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Mapping

from lv_core.blackbox.history import MicroOp, OpKind, Outcome, Txn
from lv_core.blackbox.listops import append, read_list
from lv_core.errors import LvError, TransactionAborted

__all__ = ["Phase", "Spec", "load_records", "run_client", "table_names"]


@dataclass(frozen=True)
class Spec:
    """What every client of one run does.

    Attributes:
        preset: the isolation preset of every transaction.
        tables, keys: the tables (``la0``, ``la1``, ...) and rows per table the lists live in.
        generations: the run's transactions use ``tables`` tables at a time, a new set for each
            generation (the ``n``-th transaction of a client is in generation ``n * generations // txns``):
            each generation starts on tables nobody has used yet (new to the global version log).
        txns: transactions per client (a restarted client runs what its predecessor had left).
        max_ops: micro-operations per transaction (1 to this many, over any tables).
        read_share: the share of micro-operations that read (the rest append).
        seed: the workload is a pure function of (seed, client, incarnation); the interleaving is not.
        lease_s, timeout_s: the clients' lease and transaction timeout.
        fault_rate, lost_response_rate: store faults injected in every client (requests that fail;
            writes that land but whose response is lost).
        latency_s: added before every store request of a client (widens the windows between steps).
        prefix: table name prefix.
    """

    preset: str = "serializable"
    tables: int = 2
    keys: int = 3
    generations: int = 1
    txns: int = 40
    max_ops: int = 4
    read_share: float = 0.5
    seed: int = 1
    lease_s: float = 2.0
    timeout_s: float = 30.0
    fault_rate: float = 0.0
    lost_response_rate: float = 0.0
    latency_s: float = 0.0
    prefix: str = "la"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Spec":
        return cls(**json.loads(text))


def table_names(spec: Spec) -> list[str]:
    return [f"{spec.prefix}{i}" for i in range(spec.tables * spec.generations)]


class Phase(str, Enum):
    """Which of a transaction's two records a line is."""

    INVOKE = "invoke"
    DONE = "done"


def _plan(rng: random.Random, spec: Spec, seq: int, first_element: int) -> list[MicroOp]:
    ops: list[MicroOp] = []
    first = spec.tables * min(spec.generations - 1, seq * spec.generations // max(1, spec.txns))
    for j in range(rng.randint(1, spec.max_ops)):
        key = f"{spec.prefix}{first + rng.randrange(spec.tables)}/{rng.randrange(spec.keys)}"
        if rng.random() < spec.read_share:
            ops.append(MicroOp.read(key, None))
        else:
            ops.append(MicroOp.append(key, first_element + j))
    return ops


def _execute(lh: Any, spec: Spec, ops: list[MicroOp]) -> tuple[list[MicroOp], Outcome, str]:
    """Run one transaction; returns the ops with what the reads saw, the outcome and the error."""
    done: list[MicroOp] = []
    txn = lh.begin(spec.preset, timeout_s=spec.timeout_s)
    committing = False
    try:
        for op in ops:
            table, key = op.key.split("/")
            if op.kind is OpKind.READ:
                done.append(MicroOp.read(op.key, read_list(txn, table, int(key))))
            else:
                append(txn, table, int(key), op.appended)
                done.append(op)
        committing = True
        txn.commit()
        return done, Outcome.OK, ""
    except TransactionAborted as e:
        # An abort: nothing of it committed, unless the transaction says its outcome is unknown (a commit
        # write that landed after all), or under ``delta``, where every statement before the failing one
        # committed on its own (judged by what is observed)
        unknown = getattr(txn, "state", "") == "unknown" or e.rule == "unknown"
        out = Outcome.INFO if unknown or (spec.preset == "delta" and done) else Outcome.FAIL
        return _unread(done, ops), out, f"{e.rule}: {e.reason}"[:300]
    except LvError as e:
        if not committing:
            try:
                txn.rollback()
            except LvError:
                pass
        # a failure while committing leaves the outcome unknown (a decided commit is rolled forward later)
        out = Outcome.INFO if committing or spec.preset == "delta" else Outcome.FAIL
        return _unread(done, ops), out, f"{type(e).__name__}: {e}"[:300]


def _unread(done: list[MicroOp], planned: list[MicroOp]) -> list[MicroOp]:
    """The ops of a transaction that did not run to the end: what ran, then the rest as planned (reads unknown)."""
    rest = [MicroOp.read(op.key, None) if op.kind is OpKind.READ else op for op in planned[len(done):]]
    return done + rest


def run_client(lh: Any, spec: Spec, client: int, incarnation: int, out: Path, *, start_seq: int = 0,
               stop_at: float | None = None) -> int:
    """Run ``spec.txns - start_seq`` transactions on ``lh``, appending records to ``out``; returns how many ran.

    Elements are unique across clients and incarnations: ``((client * 100 + incarnation) * 100_000 + seq) * 10 + j``.
    """
    rng = random.Random(f"{spec.seed}/{client}/{incarnation}")
    ran = 0
    with open(out, "a", encoding="utf-8") as f:
        for seq in range(start_seq, spec.txns):
            if stop_at is not None and time.monotonic() > stop_at:
                break
            ops = _plan(rng, spec, seq, ((client * 100 + incarnation) * 100_000 + seq) * 10)
            tid = f"c{client}.{incarnation}-{seq}"
            start = time.time()
            invoked = Txn(tid, client, tuple(ops), Outcome.INFO, spec.preset, start, start)
            f.write(json.dumps({"phase": Phase.INVOKE.value, "txn": invoked.to_obj()}) + "\n")
            f.flush()
            done, outcome, error = _execute(lh, spec, ops)
            txn = Txn(tid, client, tuple(done), outcome, spec.preset, start, time.time(), error)
            f.write(json.dumps({"phase": Phase.DONE.value, "txn": txn.to_obj()}) + "\n")
            f.flush()
            ran += 1
    return ran


def load_records(paths: Iterable[Path]) -> list[Txn]:
    """Every transaction of the runs' record files: its *done* record, else its *invoke* record (outcome
    unknown: the client died while it ran). A torn last line (a killed client) is skipped."""
    found: dict[str, Txn] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            txn = Txn.from_json(rec["txn"])
            if rec.get("phase") == Phase.DONE.value or txn.id not in found:
                found[txn.id] = txn
    return list(found.values())


def abort_stats(history: Iterable[Txn]) -> Mapping[str, Any]:
    """Committed, aborted and unknown transactions, the abort rate and the abort reasons (by rule)."""
    txns = list(history)
    by = {o: sum(1 for t in txns if t.outcome is o) for o in Outcome}
    rules: dict[str, int] = {}
    for t in txns:
        if t.outcome is Outcome.FAIL:
            rule = t.error.split(":", 1)[0] or "?"
            rules[rule] = rules.get(rule, 0) + 1
    total = len(txns)
    return {"txns": total, "committed": by[Outcome.OK], "aborted": by[Outcome.FAIL], "unknown": by[Outcome.INFO],
            "abort_rate": round(by[Outcome.FAIL] / total, 4) if total else 0.0, "abort_rules": rules}
