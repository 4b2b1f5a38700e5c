"""Multi-table transactions (paper section 6.4, Figure 10): commit latency vs the number of tables.

Every transaction inserts one row into each of k tables (k = 1..32); ``clients`` client processes
run ``txns`` transactions each, all on the same k tables, so every transaction finds the others'
markers in every table and LV[CT] tracks dependencies across all of them. Reported per k: commit
latency (the ``commit()`` call: waiting for predecessors, decision record, marker overwrites,
clean-up) and whole-transaction latency (begin to end of commit: also marker placement, data and
sublog writes of each insert), p50/p99/mean, and requests per transaction. Target: commit latency
at 32 tables / at 1 table <= 2 with 20 ms injected per request.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

from benchmarks.common import (
    ClientPool,
    StoreSpec,
    add_counts,
    mean,
    ms,
    open_lakehouse,
    percentile,
    raw_store,
    remove_warehouse,
)

SYSTEMS: dict[str, dict[str, Any]] = {
    "R+CT": {"preset": "repeatable_read"},
    "R": {"preset": "repeatable_read", "features": ["R"]},
    "delta": {"preset": "delta"},
    "R+CT+I": {"preset": "serializable"},
}


def table_names(k: int) -> list[str]:
    return [f"mt{i:02d}" for i in range(k)]


def client_run(args: dict[str, Any], ready: Callable[[], float]) -> dict[str, Any]:
    import pyarrow as pa

    from lv_core.engine import arrow_ops
    from lv_core.errors import LvError, TransactionAborted

    spec = StoreSpec(**args["store"])
    sysdef = SYSTEMS[args["system"]]
    lh, store = open_lakehouse(spec, args["location"], lease_s=30.0)
    tables = table_names(args["k"])
    for t in tables:  # warm the snapshot cache
        lh.snapshot(t)
    store.reset()
    start = ready()
    time.sleep(max(0.0, start - time.time()))
    t_start = time.time()
    commit_lat: list[float] = []
    txn_lat: list[float] = []
    aborts: Counter[str] = Counter()
    redos = waits = 0
    for i in range(args["txns"]):
        row = args["client"] * 1_000_000 + i
        for _attempt in range(args["max_retries"] + 1):
            t0 = time.monotonic()
            txn = lh.begin(sysdef["preset"], features=sysdef.get("features"), timeout_s=args["timeout_s"])
            try:
                for t in tables:
                    txn.execute(arrow_ops.append(t, pa.table({"id": pa.array([row], pa.int64()),
                                                              "val": pa.array([float(i)], pa.float64())})))
                tc = time.monotonic()
                res = txn.commit()
            except TransactionAborted as e:
                aborts[e.rule] += 1
                continue
            except LvError as e:
                aborts[type(e).__name__] += 1
                if txn.state == "active":
                    txn.rollback()
                continue
            t1 = time.monotonic()
            commit_lat.append(t1 - tc)
            txn_lat.append(t1 - t0)
            redos += res.redo_count
            waits += res.waits
            break
    t_end = time.time()
    counts = store.counts()
    lh.close()
    return {"commit_lat": commit_lat, "txn_lat": txn_lat, "aborts": dict(aborts), "redos": redos, "waits": waits,
            "requests": counts, "t_start": t_start, "t_end": t_end}


def run_one(pool: ClientPool, spec: StoreSpec, location: str, *, system: str, k: int, clients: int, txns: int,
            timeout_s: float = 120.0, max_retries: int = 3) -> dict[str, Any]:
    from lv_core import Lakehouse

    lh = Lakehouse(raw_store(spec, location))
    for t in table_names(k):
        lh.create_table(t, "id BIGINT, val DOUBLE")
    lh.close()
    args = [{"store": spec.to_json(), "location": location, "system": system, "k": k, "client": c, "txns": txns,
             "timeout_s": timeout_s, "max_retries": max_retries} for c in range(clients)]
    cfg = {"system": system, "k": k, "clients": clients, "txns_per_client": txns, "store": spec.name}
    try:
        res = pool.run("benchmarks.multitable:client_run", args,
                       timeout_s=timeout_s * txns * (max_retries + 1) + 120)
    except Exception as e:
        return {**cfg, "error": f"{type(e).__name__}: {str(e)[-2000:]}"}
    finally:
        remove_warehouse(spec, location)
    commit = [x for r in res for x in r["commit_lat"]]
    whole = [x for r in res for x in r["txn_lat"]]
    aborts: Counter[str] = Counter()
    requests: dict[str, int] = {}
    for r in res:
        aborts.update(r["aborts"])
        requests = add_counts(requests, r["requests"])
    elapsed = max(r["t_end"] for r in res) - min(r["t_start"] for r in res)
    return {**cfg,
            "committed": len(commit), "aborts": sum(aborts.values()), "aborts_by_rule": dict(aborts),
            "redos": sum(r["redos"] for r in res), "waits": sum(r["waits"] for r in res),
            "elapsed_s": round(elapsed, 3),
            "throughput_txn_s": round(len(commit) / elapsed, 3) if elapsed > 0 else None,
            "commit_latency_ms": {"p50": ms(percentile(commit, 50)), "p99": ms(percentile(commit, 99)),
                                  "mean": ms(mean(commit))},
            "txn_latency_ms": {"p50": ms(percentile(whole, 50)), "p99": ms(percentile(whole, 99)),
                               "mean": ms(mean(whole))},
            "requests": requests,
            "requests_per_txn": round(sum(requests.values()) / len(commit), 2) if commit else None}


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (system, store): commit latency at the largest k / at k = 1 (p50 and mean)."""
    out: dict[str, Any] = {}
    groups: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in rows:
        if "error" not in r and r.get("committed"):
            groups.setdefault((r["system"], r["store"]), {})[r["k"]] = r
    for (system, store), by_k in groups.items():
        if 1 not in by_k or len(by_k) < 2:
            continue
        kmax = max(by_k)
        a, b = by_k[1], by_k[kmax]
        out[f"{system} @ {store}"] = {
            "k_max": kmax,
            "commit_p50_ratio": round(b["commit_latency_ms"]["p50"] / a["commit_latency_ms"]["p50"], 2),
            "commit_mean_ratio": round(b["commit_latency_ms"]["mean"] / a["commit_latency_ms"]["mean"], 2),
            "txn_p50_ratio": round(b["txn_latency_ms"]["p50"] / a["txn_latency_ms"]["p50"], 2),
        }
    return out
