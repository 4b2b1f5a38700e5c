"""What the browser-tier notebooks share: a fresh warehouse with two bank tables, a transfer, and a
stand-in for the data plane's Spark progress feed (imported by the notebooks' kernels, not by pytest)."""

from __future__ import annotations

import tempfile
import time
from typing import Any

import pyarrow as pa

from lv_core import events as ev


def bank(**options: Any) -> Any:
    """A lakehouse in a fresh temporary warehouse with ``bank_x`` (ids 1, 2) and ``bank_y`` (ids 3, 4)."""
    import lv_core
    from lv_core.engine import arrow_ops as ops

    lh = lv_core.connect(tempfile.mkdtemp(prefix="lv-browser-"), **options)
    for name, ids in (("bank_x", (1, 2)), ("bank_y", (3, 4))):
        lh.create_table(name, "id BIGINT, val DOUBLE")
        txn = lh.begin("delta")
        for k in ids:
            txn.execute(ops.append(name, pa.table({"id": pa.array([k], pa.int64()),
                                                   "val": pa.array([1000.0], pa.float64())})))
        txn.commit()
    return lh


def transfer(txn: Any, table: str, key: int, delta: float) -> None:
    """``UPDATE table SET val = val + delta WHERE id = key`` without Spark (arrow operations)."""
    from lv_core.engine import arrow_ops as ops

    txn.execute(ops.update(table, ops.eq("id", key), ops.add_to("val", delta),
                           logical={"sql": f"UPDATE {table} SET val = val + {delta} WHERE id = {key}"}))


class ProgressBridge:
    """Spark Connect progress reports of the running statement become ``Progress`` events of the newest
    transaction of ``lh`` (what the data plane does once it feeds progress itself)."""

    def __init__(self, lh: Any) -> None:
        self.txn: Any = None
        self.started: dict[Any, float] = {}  # operation id -> first report
        self.numbers: dict[Any, int] = {}  # operation id -> statement number (operations that run stages)
        begin = lh.begin

        def tracked(*args: Any, **kwargs: Any) -> Any:
            self.txn = begin(*args, **kwargs)
            return self.txn

        lh.begin = tracked
        lh.spark.registerProgressHandler(self)

    def __call__(self, stages: Any = None, inflight_tasks: int = 0, operation_id: Any = None, done: bool = False,
                 **_: Any) -> None:
        txn = self.txn
        t0 = self.started.setdefault(operation_id, time.time())
        st = list(stages or [])
        if txn is None or txn.state != "active" or not st:
            return
        n = self.numbers.setdefault(operation_id, len(self.numbers) + 1)
        total = sum(s.num_tasks for s in st)
        finished = sum(s.num_completed_tasks for s in st)
        stage = f"stage {max(s.stage_id for s in st)}"
        if inflight_tasks:
            stage += f", {inflight_tasks} running"
        txn.events.emit(ev.Progress(txn.id, statement=n, stage=stage, done=finished, total=total,
                                    elapsed_s=time.time() - t0))
