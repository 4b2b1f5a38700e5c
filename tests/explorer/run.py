"""One schedule: real LakeVilla transactions, each in its own thread and its own Lakehouse (a client),
against a :class:`GatedStore`; a policy decides, request by request, what the store does next. The
history holds only what the transactions observed (lists read, elements appended, ok/fail/unknown);
the final lists are read by ``deltalake`` from a copy of the store in a folder; the black-box checker
judges both.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

import lv_core  # noqa: F401 - the composition root (wires the data plane)
from lv_core.blackbox.checker import Report, check
from lv_core.blackbox.history import MicroOp, OpKind, Outcome, Txn
from lv_core.blackbox.listops import append, create_list_table, decode, read_list, read_lists_plain
from lv_core.delta.schema import DeltaSchema
from lv_core.engine import arrow_ops as ops
from lv_core.engine.skipping import FileFilter, file_filter
from lv_core.errors import LvError, TransactionAborted
from lv_core.lakehouse import Lakehouse
from lv_core.protocol.lease import LeaseObserver, keeper
from lv_core.txn import cleaner
from tests.explorer.gate import ACTOR, Decision, GatedStore, Killed, Request, Scheduler, ShiftedClock, attribution
from tests.explorer.memstore import MemStore

__all__ = ["Actor", "Kind", "Policy", "RunResult", "Scenario", "Step", "run_schedule"]

#: How far the clock jumps for a pause or after a crash: past any lease and past the skew
#: (:class:`LeaseObserver`) after which an expired lease counts as gone without waiting.
LEASE_S = 30.0
JUMP_S = LEASE_S + LeaseObserver().skew_s + 1.0
#: While a client is paused, the others' repeated polls each take this long (their waits, cycle
#: checks and shifts run on the shifted clock); after this many, the paused client resumes anyway.
POLL_TICK_S = 0.5
PAUSE_POLLS = 200
TIMEOUT_S = 10 * JUMP_S  # transaction timeouts run on the shifted clock: never hit by a jump


@dataclass(frozen=True)
class Actor:
    """One transaction: its preset and list-append operations (reads carry no value yet)."""

    name: str
    preset: str
    ops: tuple[MicroOp, ...]
    #: read and append with the key's predicate as a FileFilter (a holder can then certify its commit for it,
    #: same-table group commit) instead of "any new file of the table may matter"
    keyed: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    tables: tuple[str, ...]
    actors: tuple[Actor, ...]
    pausable: frozenset[str] = frozenset()  # actors the explorer may pause past their lease
    keys: int = 1  # lists per table (each in its own data file)

    def setup(self) -> MemStore:
        """The warehouse every schedule starts from: each table created with one empty list (plain Delta)."""
        store = MemStore()
        lh = Lakehouse(store, lease_s=LEASE_S)
        for t in self.tables:
            create_list_table(lh, t, self.keys)
        cleaner.drain(30.0)
        return store


class Kind(str, Enum):
    RUN = "run"
    LOST = "lost"  # run, but the caller gets an error
    CRASH = "crash"  # the actor's process dies (no request of it is released again)
    PAUSE = "pause"  # the actor hangs while the clock passes its lease; resumes when nobody else can move


@dataclass(frozen=True)
class Step:
    """One decision of a schedule; ``ident`` names a request (RUN, LOST) or ``(actor, "", "", 0)``."""

    kind: Kind
    ident: tuple[str, str, str, int]

    def __str__(self) -> str:
        a, op, key, n = self.ident
        return f"{self.kind.value} {a}" + (f" {op} {key}#{n}" if op else "")


class Policy(Protocol):
    def replay(self, step: int) -> Step | None:
        """The step to replay at ``step`` (a known prefix), or None to choose."""

    def choose(self, step: int, enabled: list[Request], sched: Scheduler, last: str) -> Step | None:
        """The next step among ``enabled`` (requests that may move now); None: stop (pruned)."""


@dataclass
class RunResult:
    history: list[Txn]
    final: dict[str, tuple[int, ...]]
    report: Report | None
    steps: list[Step]
    trace: list[str]
    preset: str
    pruned: bool = False  # the policy stopped it (a schedule equivalent to one already run)
    diverged: bool = False  # a replayed request never came (lv_core did not repeat itself)
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report is None or self.report.ok(self.preset)

    def describe(self) -> str:
        head = "\n".join(t.describe() for t in self.history)
        return (f"{len(self.steps)} steps: " + "; ".join(map(str, self.steps)) + f"\n{head}\nfinal: {self.final}\n"
                + (self.report.explain() if self.report is not None else ""))


_LIST_SCHEMA = DeltaSchema.from_arrow(pa.schema([("k", pa.int64()), ("vals", pa.string())]))


def _key_filter(key: int) -> FileFilter:
    return file_filter(f"k = {key}", _LIST_SCHEMA)


def _keyed_read(txn: Any, table: str, key: int) -> tuple[int, ...]:
    """:func:`read_list` with the key's predicate (only files that may hold ``k = key`` are read and matter)."""
    got = txn.execute(ops.read(table, ops.eq("k", key), exposed=True, files=_key_filter(key)))
    return tuple(x for v in got["vals"].to_pylist() for x in decode(v))


def _keyed_append(txn: Any, table: str, key: int, elem: int) -> int:
    """:func:`append` with the key's predicate."""
    def add(rows: pa.Table) -> pa.Table:
        joined = pc.binary_join_element_wise(rows["vals"], pa.scalar(str(elem)), " ")
        return rows.set_column(rows.schema.get_field_index("vals"), "vals", pc.utf8_trim(joined, " "))

    return txn.execute(ops.update(table, ops.eq("k", key), add, files=_key_filter(key),
                                  logical={"sql": f"UPDATE {table} SET vals = concat_ws(' ', vals, '{elem}') "
                                                  f"WHERE k = {key}"}))


def _run_actor(actor: Actor, index: int, lh: Lakehouse, sched: Scheduler, txids: dict[str, str],
               out: dict[str, Txn]) -> None:
    """The transaction's body (as :mod:`lv_core.blackbox.workload` runs one): read, append, commit."""
    ACTOR.set(actor.name)
    done: list[MicroOp] = []
    outcome, error, committing = Outcome.INFO, "", False
    try:
        txn = lh.begin(actor.preset, timeout_s=TIMEOUT_S)
        txids[actor.name] = txn.id
        try:
            for op in actor.ops:
                table, key = op.key.split("/")
                if op.kind is OpKind.READ:
                    done.append(MicroOp.read(op.key, (_keyed_read if actor.keyed else read_list)(txn, table, int(key))))
                else:
                    (_keyed_append if actor.keyed else append)(txn, table, int(key), op.appended)
                    done.append(op)
            committing = True
            txn.commit()
            outcome = Outcome.OK
        except TransactionAborted as e:
            unknown = getattr(txn, "state", "") == "unknown" or e.rule == "unknown"
            outcome, error = (Outcome.INFO if unknown else Outcome.FAIL), f"{e.rule}: {e.reason}"[:300]
        except LvError as e:
            if not committing:
                try:
                    txn.rollback()
                except LvError:
                    pass
            outcome, error = (Outcome.INFO if committing else Outcome.FAIL), f"{type(e).__name__}: {e}"[:300]
    except Killed:
        outcome, error = Outcome.INFO, "crashed"
    finally:
        rest = [MicroOp.read(op.key, None) if op.kind is OpKind.READ else op for op in actor.ops[len(done):]]
        out[actor.name] = Txn(actor.name, index, tuple(done + rest), outcome, actor.preset, error=error)
        sched.actor_done(actor.name)


def _final_lists(store: MemStore, tables: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    with tempfile.TemporaryDirectory(prefix="lv-explorer-") as tmp:
        root = store.dump(Path(tmp))
        return {f"{t}/{k}": v for t in tables for k, v in read_lists_plain(str(root / t)).items()}


def run_schedule(scenario: Scenario, base: MemStore, policy: Policy) -> RunResult:
    """Run every actor of ``scenario`` from a copy of ``base`` under ``policy``; recover, read, check."""
    began = time.monotonic()
    store, sched, clock = base.clone(), Scheduler(), ShiftedClock()
    gated = GatedStore(store, sched)
    txids: dict[str, str] = {}
    results: dict[str, Txn] = {}
    steps: list[Step] = []
    pruned = diverged = False
    jumped_for_crash = False
    waited = 0  # polls of the others while an actor is paused
    by_name = {a.name: a for a in scenario.actors}
    with clock.installed(), attribution():
        threads = []
        for i, a in enumerate(scenario.actors):
            lh = Lakehouse(gated, lease_s=LEASE_S, poll_min_s=0.001, poll_max_s=0.01)
            sched.actor_started(a.name)
            threads.append(threading.Thread(target=_run_actor, args=(a, i, lh, sched, txids, results),
                                            name=f"explorer-{a.name}", daemon=True))
        for t in threads:
            t.start()
        last = ""
        while True:
            step = None if diverged else policy.replay(len(steps))
            if step is not None:
                req = None
                if step.kind in (Kind.RUN, Kind.LOST):
                    req = sched.wait_for(step.ident)
                    if req is None:
                        diverged = True
                        continue
            else:
                pending = sched.settle()
                if not pending:
                    break
                active = [r for r in pending if r.actor not in sched.held and r.actor not in sched.crashed]
                enabled = [r for r in active if not r.stutter]
                if not enabled and sched.held:  # the others wait (for the paused client?)
                    if not active or waited >= PAUSE_POLLS:  # the pause ends when nobody else can move
                        sched.held.clear()
                        sched.trace.append("resume")
                        continue
                    waited += 1  # their polls go on while time passes (their waits time out, shift)
                    clock.advance(POLL_TICK_S)
                    enabled = sorted(active, key=lambda r: r.seq)[:1]
                if not enabled and sched.crashed and not jumped_for_crash:  # the others wait for the dead
                    clock.advance(JUMP_S)
                    jumped_for_crash = True
                    sched.trace.append(f"clock +{JUMP_S:.0f} s")
                    continue
                if not enabled:
                    enabled = sorted(active, key=lambda r: r.seq)[:1]  # a stutter: nobody else can move
                if not enabled:
                    break  # only dead clients' requests are left
                step = policy.choose(len(steps), enabled, sched, last)
                if step is None:
                    pruned = True
                    break
                req = next((r for r in enabled if r.ident == step.ident), None)
            steps.append(step)
            actor = step.ident[0]
            if step.kind is Kind.CRASH:
                sched.crash(actor)
                if actor in txids:
                    keeper().pause(txids[actor])
            elif step.kind is Kind.PAUSE:
                sched.held.add(actor)
                if actor in txids:
                    keeper().pause(txids[actor])
                clock.advance(JUMP_S)
                sched.trace.append(f"pause {actor}; clock +{JUMP_S:.0f} s")
            else:
                assert req is not None
                sched.decide(req, Decision.LOST if step.kind is Kind.LOST else Decision.RUN)
                last = actor
        if pruned:
            sched.crashed.update(by_name)
        sched.finish()
        for t in threads:
            t.join(timeout=120)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise TimeoutError(f"actors did not finish: {stuck}; trace: {sched.trace[-20:]}")
        for txn in txids.values():
            keeper().pause(txn)
        history = [results[a.name] for a in scenario.actors]
        if pruned:
            return RunResult(history, {}, None, steps, sched.trace, scenario.actors[0].preset, pruned=True,
                             diverged=diverged, elapsed=time.monotonic() - began)
        cleaner.drain(30.0)
        if sched.crashed or any(t.outcome is Outcome.INFO for t in history):
            clock.advance(JUMP_S)  # every lease ran out: recovery frees and rolls forward what the dead left
            Lakehouse(store, lease_s=LEASE_S).recover(lease_grace_s=0.0)
            cleaner.drain(30.0)
    final = _final_lists(store, scenario.tables)
    report = check(history, final)
    return RunResult(history, final, report, steps, sched.trace, scenario.actors[0].preset, diverged=diverged,
                     elapsed=time.monotonic() - began)
