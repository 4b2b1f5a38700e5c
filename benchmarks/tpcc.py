"""TPC-C on Delta tables through LakeVilla's operations API (paper section 6.5, Table 4).

    PYTHONPATH=. python -m benchmarks.tpcc [--clients 16] [--seconds 60] [--presets delta,LV[R],...]

All five transaction types with TPC-C's mix (45% New-Order, 43% Payment, 4% each Order-Status,
Delivery, Stock-Level), one warehouse (as the paper), scaled down (``benchmarks/tpcc_txns.py``:
10 districts, 30 customers per district, 100 items), on a local folder store (``--latency-ms``
injects a delay before every request, as the other benchmarks' ``local-20ms``). Per system, a
sequential run (one client) and a concurrent one (``--clients`` client *processes*, each its own
Lakehouse as separate kernels would be), each on a fresh copy of the loaded warehouse for
``--seconds``; then TPC-C's consistency conditions are checked on the tables as delta-rs reads them
(``benchmarks/tpcc_check.py``).

Each client draws transactions from a seeded generator and runs each once: an aborted transaction
is counted (by type and rule) and not retried, so committed + aborted = attempted. Under ``delta``
every statement commits on its own: a statement that fails Delta's conflict check ends the
transaction with its earlier statements already committed, and LV[R] alone commits each table on
its own (docs/PROTOCOL.md), so an abort can leave tables published before it: both are counted as
``partial`` (aborted, yet some of its writes committed).

Writes ``benchmarks/results/tpcc.json`` and ``tpcc.png``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import (
    RESULTS,
    ClientPool,
    StoreSpec,
    clone_warehouse,
    environment,
    log,
    open_lakehouse,
    remove_warehouse,
    write_json,
)

#: system -> how it begins transactions (paper names: LV[DL] is ``delta``)
SYSTEMS: dict[str, dict[str, Any]] = {
    "delta": {"preset": "delta", "features": None},
    "LV[R]": {"preset": "repeatable_read", "features": ["R"]},
    "LV[CT]": {"preset": "repeatable_read", "features": ["R", "CT"]},
    "LV[I]": {"preset": "serializable", "features": ["I"]},
    "serializable": {"preset": "serializable", "features": None},
}
#: Table 4 of the paper: what each system showed (sequential, 16 clients) and its throughput
PAPER_TABLE4 = {
    "delta": {"sequential": "no aborts (4.22)", "concurrent": "impossible (consistency violations)"},
    "LV[R]": {"sequential": "no aborts (3.42)", "concurrent": "impossible (consistency violations)"},
    "LV[CT]": {"sequential": "no aborts (3.49)", "concurrent": "aborts occurred (2.79)"},
    "LV[I]": {"sequential": "no aborts (3.67)", "concurrent": "aborts occurred (2.81)"},
}
EXPECT_CORRECT = {"LV[CT]", "LV[I]", "serializable"}


def client_run(args: dict[str, Any], ready: Callable[[], float]) -> dict[str, Any]:
    """One TPC-C client process (called through ClientPool): transactions until the deadline."""
    from benchmarks.tpcc_txns import PROGRAMS, TYPES, choose
    from lv_core.errors import LvError, TransactionAborted

    sys_ = SYSTEMS[args["system"]]
    lh, store = open_lakehouse(StoreSpec(**args["store"]), args["location"], lease_s=30.0)
    rng = random.Random(f"{args['seed']}/tpcc/{args['client']}")
    warm = lh.begin("delta")  # warm-up outside the measurement: code paths and the snapshot cache
    PROGRAMS["order_status"](warm, random.Random(0), args["customers"], args["items"])
    warm.commit()
    store.reset()
    start = ready()
    time.sleep(max(0.0, start - time.time()))
    t_start = time.time()
    deadline = time.monotonic() + args["seconds"]
    per: dict[str, Counter[str]] = {t: Counter() for t in TYPES}
    rules: Counter[str] = Counter()
    lat: dict[str, list[float]] = {t: [] for t in TYPES}
    samples: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        kind = choose(rng)
        t0 = time.monotonic()
        txn = lh.begin(sys_["preset"], features=sys_["features"], timeout_s=args["timeout_s"])
        try:
            PROGRAMS[kind](txn, rng, args["customers"], args["items"])
            txn.commit()
            per[kind]["committed"] += 1
            lat[kind].append(time.monotonic() - t0)
        except TransactionAborted as e:
            per[kind]["aborted"] += 1
            rules[e.rule] += 1
            if len(samples.setdefault(e.rule, [])) < 2:  # why, for the report (first two per rule)
                samples[e.rule].append(f"{kind}: {e.reason[:300]}")
            if txn.book.autocommitted or txn.book.published:  # some of its tables committed regardless
                per[kind]["partial"] += 1
        except (LvError, LookupError) as e:  # a timeout, or a row a broken database lost or doubled
            per[kind]["error"] += 1
            rules[type(e).__name__] += 1
        finally:
            if txn.state == "active":
                try:
                    txn.rollback()
                except LvError:
                    pass
    t_end = time.time()
    counts = store.counts()
    lh.close()
    return {"client": args["client"], "per_type": {k: dict(v) for k, v in per.items()}, "rules": dict(rules),
            "abort_samples": samples, "lat": lat, "t_start": t_start, "t_end": t_end, "requests": counts}


# --------------------------------------------------------------------------------- orchestration
def summarize(cfg: dict[str, Any], clients: list[dict[str, Any]], conditions: dict[str, Any]) -> dict[str, Any]:
    """One run: committed/aborted/partial/error per type, throughput, request counts, conditions."""
    from benchmarks.common import add_counts, mean, ms, percentile
    from benchmarks.tpcc_check import failed
    from benchmarks.tpcc_txns import TYPES

    per: dict[str, dict[str, int]] = {}
    for t in TYPES:
        c: Counter[str] = Counter()
        for cl in clients:
            c.update(cl["per_type"][t])
        per[t] = {k: c.get(k, 0) for k in ("committed", "aborted", "partial", "error")}
    rules: Counter[str] = Counter()
    requests: dict[str, int] = {}
    samples: dict[str, list[str]] = {}
    for cl in clients:
        rules.update(cl["rules"])
        for rule, why in cl.get("abort_samples", {}).items():
            samples[rule] = (samples.get(rule, []) + why)[:3]
        requests = add_counts(requests, cl["requests"])
    elapsed = max(c["t_end"] for c in clients) - min(c["t_start"] for c in clients)
    committed = sum(p["committed"] for p in per.values())
    attempted = committed + sum(p["aborted"] + p["error"] for p in per.values())
    lat = {t: [x for cl in clients for x in cl["lat"][t]] for t in TYPES}
    bad = failed(conditions)
    return {**cfg, "elapsed_s": round(elapsed, 2), "committed": committed, "attempted": attempted,
            "aborted": sum(p["aborted"] for p in per.values()), "errors": sum(p["error"] for p in per.values()),
            "abort_rate": round(1 - committed / attempted, 4) if attempted else 0.0,
            "throughput_txn_s": round(committed / elapsed, 3) if elapsed > 0 else None,
            "tpmC": round(per["new_order"]["committed"] * 60 / elapsed, 1) if elapsed > 0 else None,
            "per_type": per, "rules": dict(rules), "abort_samples": samples,
            "latency_ms": {t: {"p50": ms(percentile(v, 50)), "mean": ms(mean(v)), "n": len(v)}
                           for t, v in lat.items()},
            "requests": requests,
            "requests_per_txn": round(sum(requests.values()) / committed, 1) if committed else None,
            "conditions": conditions, "conditions_failed": bad, "consistent": not bad}


def run_one(pool: ClientPool, spec: StoreSpec, template: str, location: str, system: str, clients: int,
            params: dict[str, Any]) -> dict[str, Any]:
    """One system at one client count on a fresh copy of the loaded warehouse, then the check."""
    from benchmarks.tpcc_check import check, read_tables

    cfg = {"system": system, "preset": SYSTEMS[system]["preset"], "features": SYSTEMS[system]["features"],
           "clients": clients, "seconds": params["seconds"], "store": spec.name}
    clone_warehouse(spec, template, location)
    try:
        args = [{"store": spec.to_json(), "location": location, "system": system, "client": i,
                 "seed": params["seed"], "customers": params["customers"], "items": params["items"],
                 "seconds": params["seconds"], "timeout_s": params["timeout_s"]} for i in range(clients)]
        try:
            results = pool.run("benchmarks.tpcc:client_run", args,
                               timeout_s=params["seconds"] + params["timeout_s"] + 300)
        except Exception as e:  # one broken configuration does not stop the benchmark
            return {**cfg, "error": f"{type(e).__name__}: {str(e)[-2000:]}"}
        return summarize(cfg, results, check(read_tables(location)))
    finally:
        remove_warehouse(spec, location)


def run(*, systems: list[str], clients: list[int], seconds: float, customers: int = 30, items: int = 100,
        latency_ms: float = 0.0, seed: int = 42, timeout_s: float = 60.0, workdir: str | None = None,
        pool: ClientPool | None = None) -> dict[str, Any]:
    """Every system at every client count; the JSON the report reads."""
    import shutil

    from benchmarks.common import raw_store
    from benchmarks.tpcc_txns import load
    from lv_core import Lakehouse

    spec = StoreSpec(f"local-{latency_ms:g}ms", "local", latency_ms / 1000.0)
    work = workdir or tempfile.mkdtemp(prefix="lv-tpcc-")
    own_pool = pool is None
    pool = pool or ClientPool(max(clients))
    params = {"seconds": seconds, "customers": customers, "items": items, "seed": seed, "timeout_s": timeout_s}
    out: dict[str, Any] = {"benchmark": "tpcc", "scale": {"warehouses": 1, "districts": 10,
                                                          "customers_per_district": customers, "items": items},
                           "params": {**params, "latency_ms": latency_ms, "systems": systems, "clients": clients},
                           "environment": environment(), "paper_table4": PAPER_TABLE4, "runs": []}
    t0 = time.monotonic()
    try:
        template = f"{work}/template"
        lh = Lakehouse(raw_store(spec, template))
        load(lh, customers, items, seed)
        lh.close()
        n = 0
        for system in systems:
            for c in clients:
                n += 1
                r = run_one(pool, spec, template, f"{work}/run-{n:03d}", system, c, params)
                out["runs"].append(r)
                log(f"tpcc {system} x{c}: " + (r.get("error") or
                    f"{r['committed']}/{r['attempted']} committed, {r['throughput_txn_s']} txn/s, "
                    f"failed conditions {r['conditions_failed'] or 'none'}"))
    finally:
        if own_pool:
            pool.close()
        if not workdir:
            shutil.rmtree(work, ignore_errors=True)
    out["duration_s"] = round(time.monotonic() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16, help="client processes of the concurrent run")
    ap.add_argument("--seconds", type=float, default=60.0, help="duration of each run")
    ap.add_argument("--presets", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--customers", type=int, default=30, help="customers per district")
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--latency-ms", type=float, default=0.0, help="injected delay before every store request")
    ap.add_argument("--no-sequential", action="store_true", help="only the concurrent run")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=str(RESULTS), help="folder for tpcc.json and tpcc.png")
    args = ap.parse_args(argv)
    systems = [s.strip() for s in args.presets.split(",") if s.strip()]
    bad = [s for s in systems if s not in SYSTEMS]
    if bad:
        ap.error(f"unknown preset(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    clients = ([] if args.no_sequential else [1]) + [args.clients]
    data = run(systems=systems, clients=clients, seconds=args.seconds, customers=args.customers, items=args.items,
               latency_ms=args.latency_ms, seed=args.seed)
    out = Path(args.out)
    write_json(out / "tpcc.json", data)
    from benchmarks.tpcc_report import plot

    plot(data, out / "tpcc.png")
    log(f"tpcc: {out / 'tpcc.json'} and tpcc.png in {data['duration_s']} s")
    return data


if __name__ == "__main__":
    main()
