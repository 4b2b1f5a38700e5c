"""Spark end to end: bank transfers through the Spark data plane under each preset vs ``delta``.

Per preset two tables ``bank_x_<preset>`` and ``bank_y_<preset>`` of ``accounts`` rows (``per_file``
per data file); a transfer moves an amount from an account of bank_x to one of bank_y in one transaction: two UPDATE
statements (``txn.sql`` when the SQL layer is there, else ``txn.update``), executed by Spark
Connect (the embedded local server), then commit. One client, sequential; presets are interleaved
round by round (rotating the order) so that they are measured side by side under the same machine
load. The first ``warmup`` rounds are not measured (JVM warm-up). Reported: latency per transfer
(p50, mean) and the ratio of each preset to ``delta`` (target: serializable <= 1.10).

Skipped, with the reason in the results, when ``Transaction.update`` does not exist yet or Spark
cannot start.
"""

from __future__ import annotations

import random
import tempfile
import time
from typing import Any

from benchmarks.common import mean, ms, percentile

PRESETS = ["delta", "repeatable_read", "serializable", "snapshot", "write_serializable"]


def available() -> tuple[bool, str]:
    from lv_core.txn.transaction import Transaction

    if not hasattr(Transaction, "update"):
        return False, "Transaction.update (the Spark data plane) is not available in this build"
    try:
        from lv_core.engine import api  # noqa: F401
    except Exception as e:
        return False, f"the Spark engine cannot be imported: {type(e).__name__}: {e}"
    return True, ""


def _tables(preset: str) -> tuple[str, str]:
    """Each preset transfers between tables of its own: interleaved on shared tables, a preset would
    read versions another one just wrote (and redo), which is not its own cost."""
    return f"bank_x_{preset}", f"bank_y_{preset}"


def _transfer(txn: Any, preset: str, a: int, b: int, amount: float) -> None:
    x, y = _tables(preset)
    if hasattr(txn, "sql"):
        try:
            txn.sql(f"UPDATE {x} SET balance = balance - {amount} WHERE id = {a}")
            txn.sql(f"UPDATE {y} SET balance = balance + {amount} WHERE id = {b}")
            return
        except NotImplementedError:
            pass
    txn.update(x, set={"balance": f"balance - {amount}"}, where=f"id = {a}")
    txn.update(y, set={"balance": f"balance + {amount}"}, where=f"id = {b}")


def run(*, rounds: int = 10, warmup: int = 2, accounts: int = 100, per_file: int = 10, seed: int = 7,
        latency_s: float = 0.0, presets: list[str] | None = None) -> dict[str, Any]:
    ok, why = available()
    params = {"rounds": rounds, "warmup": warmup, "accounts": accounts, "per_file": per_file, "seed": seed,
              "latency_ms": latency_s * 1000.0}
    if not ok:
        return {"skipped": why, "params": params}
    import pyarrow as pa

    from lv_core import Lakehouse
    from lv_core.delta.writer import write_data_files
    from lv_core.errors import TransactionAborted
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.storage.local import LocalStore
    from lv_core.txn.ops import Operation, OpResult
    from lv_core.txn.transaction import Transaction

    presets = presets or PRESETS
    tmp = tempfile.mkdtemp(prefix="lv-bench-spark-")
    store = InstrumentedStore(LocalStore(tmp), latency=latency_s or None)
    lh = Lakehouse(store)
    for t in [t for p in presets for t in _tables(p)]:
        lh.create_table(t, "id BIGINT, balance DOUBLE")
        data = pa.table({"id": pa.array(range(accounts), pa.int64()), "balance": pa.array([1000.0] * accounts)})

        def load(ctx: Any, t: str = t, data: pa.Table = data) -> OpResult:
            return OpResult(value=data.num_rows, adds={t: write_data_files(
                ctx.store, t, ctx.snapshot(t), data, max_rows_per_file=per_file,
                new_path=lambda v: ctx.new_path(t, v))})

        txn = lh.begin("delta")
        txn.execute(Operation("load", (t,), load, blind=True))
        txn.commit()
    try:
        t0 = time.monotonic()
        from lv_core.engine import api

        api.engine(lh)  # start (or connect to) Spark
        startup = time.monotonic() - t0
    except Exception as e:
        return {"skipped": f"Spark could not start: {type(e).__name__}: {str(e)[:300]}", "params": params}
    rng = random.Random(seed)
    lat: dict[str, list[float]] = {p: [] for p in presets}
    commit_lat: dict[str, list[float]] = {p: [] for p in presets}  # the commit() call alone (less Spark noise)
    reqs: dict[str, int] = {p: 0 for p in presets}
    aborts: dict[str, int] = {p: 0 for p in presets}
    errors: list[str] = []
    for rnd in range(warmup + rounds):
        order = presets[rnd % len(presets):] + presets[:rnd % len(presets)]
        for p in order:
            a, b, amount = rng.randrange(accounts), rng.randrange(accounts), float(rng.randrange(1, 100))
            store.reset()
            t1 = time.monotonic()
            txn = lh.begin(p, timeout_s=120)
            try:
                _transfer(txn, p, a, b, amount)
                tc = time.monotonic()
                txn.commit()
                tc = time.monotonic() - tc
            except TransactionAborted:
                aborts[p] += 1
                continue
            except Exception as e:
                errors.append(f"{p}: {type(e).__name__}: {str(e)[:300]}")
                try:
                    txn.rollback()
                except Exception:
                    pass
                continue
            if rnd >= warmup:
                lat[p].append(time.monotonic() - t1)
                commit_lat[p].append(tc)
                reqs[p] += store.total()
        if len(errors) > 3 * len(presets):
            break
    rows = {}
    base = mean(lat.get("delta", [])) if "delta" in lat else None
    base50 = percentile(lat.get("delta", []), 50) if "delta" in lat else None
    for p in presets:
        xs = lat[p]
        m, p50 = mean(xs), percentile(xs, 50)
        rows[p] = {"n": len(xs), "p50_ms": ms(p50), "mean_ms": ms(m), "p99_ms": ms(percentile(xs, 99)),
                   "aborts": aborts[p], "requests_per_txn": round(reqs[p] / len(xs), 2) if xs else None,
                   "commit_p50_ms": ms(percentile(commit_lat[p], 50)), "commit_mean_ms": ms(mean(commit_lat[p])),
                   "mean_ratio_vs_delta": round(m / base, 3) if m and base else None,
                   "p50_ratio_vs_delta": round(p50 / base50, 3) if p50 and base50 else None}
    try:
        data_path = api.engine(lh).data_path
    except Exception:
        data_path = None
    lh.close()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    out = {"params": params, "spark_startup_s": round(startup, 2), "data_path": data_path,
           "statement_api": "txn.sql" if hasattr(Transaction, "sql") else "txn.update",
           "presets": rows, "errors": errors[:10]}
    s = rows.get("serializable", {})
    if s.get("mean_ratio_vs_delta") is not None:
        out["target"] = {"serializable_vs_delta_mean": s["mean_ratio_vs_delta"], "target": "<= 1.10",
                         "met": s["mean_ratio_vs_delta"] <= 1.10}
    return out
