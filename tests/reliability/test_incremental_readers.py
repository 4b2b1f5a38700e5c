"""Issue 18: a plain Delta reader that keeps a table open sees every commit, whatever LakeVilla does.

Delta clients assume a commit file never changes once it exists: ``DeltaTable.update_incremental()``
(delta-rs), Spark Structured Streaming and change data feed readers only read versions they have not
seen. This test holds ``deltalake.DeltaTable`` objects open across 60 interleaved steps (commits under
every preset, rollbacks, aborts, marker shifts, multi-table commits, a crashed client and its
recovery, plain ``deltalake`` writers, tables reloaded while a marker is pending) and after each step
compares each open table, updated incrementally, with a fresh load: always equal. The reliability
conftest runs it under the log-immutability checker too.
"""

from __future__ import annotations

import random
import threading
import time

import deltalake
import pyarrow as pa
import pytest

import lv_core
from lv_core.protocol.lease import keeper, lease_expired
from tests.helpers import oracle as O
from tests.reliability.anomalies import setup_tables

TABLES = ("kv", "kv2")


def _rows(dt: deltalake.DeltaTable) -> list[tuple[int, float]]:
    t = dt.to_pyarrow_table(columns=["id", "val"])
    return sorted(zip(t["id"].to_pylist(), t["val"].to_pylist(), strict=True))


class Readers:
    """One long-lived DeltaTable per table, updated incrementally and checked against a fresh load."""

    def __init__(self, lh: lv_core.Lakehouse) -> None:
        self.lh = lh
        self.open = {t: deltalake.DeltaTable(lh.store.url(t)) for t in TABLES}
        self.checks = 0

    def reload(self, table: str) -> None:
        self.open[table] = deltalake.DeltaTable(self.lh.store.url(table))

    def check(self, step: str) -> None:
        for t, dt in self.open.items():
            dt.update_incremental()
            fresh = deltalake.DeltaTable(self.lh.store.url(t))
            assert dt.version() == fresh.version(), (step, t, dt.version(), fresh.version())
            assert _rows(dt) == _rows(fresh), (step, t)
            self.checks += 1


def _plain_append(lh: lv_core.Lakehouse, table: str, k: int) -> None:
    row = pa.table({"id": pa.array([k], pa.int64()), "val": pa.array([1.0], pa.float64())})
    deltalake.write_deltalake(lh.store.url(table), row, mode="append")


def _shift_pair(lh: lv_core.Lakehouse) -> None:
    """Opposite transfers (paper Figure 5): one transaction shifts its marker, both commit."""
    t1, t2 = lh.begin("repeatable_read", timeout_s=30), lh.begin("repeatable_read", timeout_s=30)
    O.run_op(t1, O.add("kv", 1, -1))
    O.run_op(t2, O.add("kv2", 1, -1))
    O.run_op(t2, O.add("kv", 1, 1))
    O.run_op(t1, O.add("kv2", 1, 1))  # closes the cycle: t1 shifts in kv
    assert any(e.kind == "Shifted" for e in t1.events.history)
    f1 = t1.commit_async()
    t2.commit()
    f1.result(timeout=60)


def _crash_and_recover(lh: lv_core.Lakehouse, readers: Readers, k: int) -> None:
    """A client hangs holding a marker (its lease runs out); the next transaction frees it."""
    hung = lh.begin("repeatable_read")
    O.run_op(hung, O.add("kv", 1, 5))
    readers.reload("kv")  # a reader that loads the table while the marker is pending
    readers.check("hung marker pending")
    keeper().pause(hung.id)
    deadline = time.monotonic() + 30
    while not lease_expired(lh.store, hung.id, None):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    nxt = lh.begin("serializable", timeout_s=30)
    O.run_op(nxt, O.insert("kv", k, 2.0))
    nxt.commit()
    lh.recover(lease_grace_s=0.0)


def _pending_then_commit(lh: lv_core.Lakehouse, readers: Readers, preset: str, k: int) -> None:
    """The issue's case: a reader loads the table while a marker is pending, then the commit lands."""
    txn = lh.begin(preset)
    O.run_op(txn, O.insert("kv", k, 3.0))
    readers.reload("kv")
    readers.check("marker pending")
    txn.commit()


def _plain_writer_during_marker(lh: lv_core.Lakehouse, k: int) -> None:
    """A plain Delta writer commits while a LakeVilla marker is pending: both commits land."""
    txn = lh.begin("repeatable_read")
    O.run_op(txn, O.add("kv2", 1, 1))
    _plain_append(lh, "kv2", k)
    txn.commit()


def test_open_delta_tables_see_every_commit(tmp_path):
    threads_before = set(threading.enumerate())
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0, cycle_check_s=0.05)
    setup_tables(lh, {"kv": [(1, 100.0), (2, 100.0)], "kv2": [(1, 100.0)]})
    readers = Readers(lh)
    rng = random.Random(18)
    kinds = ["commit", "rollback", "abort", "multi", "shift", "plain", "pending", "plain-during", "read-only"]
    plan = [kinds[i % len(kinds)] for i in range(len(kinds) * 6)] + ["crash"]
    rng.shuffle(plan)
    presets = ["serializable", "snapshot", "repeatable_read", "write_serializable", "delta"]
    seen_kinds: dict[str, int] = {}
    for i, kind in enumerate(plan):
        k = 1000 + i
        preset = presets[i % len(presets)]
        if kind == "commit":
            txn = lh.begin(preset)
            O.run_op(txn, O.add(rng.choice(TABLES), 1, 1))
            txn.commit()
        elif kind == "rollback":
            txn = lh.begin(preset if preset != "delta" else "serializable")
            O.run_op(txn, O.add("kv", 1, 100))
            txn.rollback()
        elif kind == "abort":  # a transaction that fails on a conflict (first committer wins)
            a, b = lh.begin("snapshot"), lh.begin("snapshot")
            O.run_op(a, O.read("kv", 2))
            O.run_op(b, O.read("kv", 2))
            O.run_op(a, O.add("kv", 2, 1))
            O.run_op(b, O.add("kv", 2, 1))
            fa = a.commit_async()
            with pytest.raises(lv_core.LvError):
                b.commit()
            fa.result(timeout=60)
        elif kind == "multi":
            txn = lh.begin(rng.choice(["serializable", "repeatable_read"]))
            O.run_op(txn, O.add("kv", 1, -2))
            O.run_op(txn, O.add("kv2", 1, 2))
            txn.commit()
        elif kind == "shift":
            _shift_pair(lh)
        elif kind == "plain":
            _plain_append(lh, rng.choice(TABLES), k)
        elif kind == "pending":
            _pending_then_commit(lh, readers, rng.choice(["serializable", "repeatable_read"]), k)
        elif kind == "plain-during":
            _plain_writer_during_marker(lh, k)
        elif kind == "read-only":
            preset = rng.choice(["serializable", "repeatable_read"])
            for attempt in range(3):  # serializable aborts a reader once when the log lags commits made outside it
                txn = lh.begin(preset)
                O.run_op(txn, O.read("kv", 1))
                O.run_op(txn, O.read("kv2", 1))
                try:
                    txn.commit()
                    break
                except lv_core.TransactionAborted:
                    assert attempt < 2
        else:
            _crash_and_recover(lh, readers, k)
        seen_kinds[kind] = seen_kinds.get(kind, 0) + 1
        readers.check(f"step {i}: {kind}")
    assert len(plan) >= 50 and set(seen_kinds) == set(kinds) | {"crash"}
    assert readers.checks >= 2 * len(plan)
    # No thread outlives its work. The shared pools keep idle workers (bounded by lv_core.concurrency,
    # and shared with every earlier test in this process), so only threads outside them count.
    pools = ("lv-requests", "lv-tasks", "lv-waits")
    left = [t.name for t in threading.enumerate() if t not in threads_before and not t.name.startswith(pools)]
    assert len(left) <= 2, left
