"""Issue 18 before/after in one run: markers in the log (rewritten) vs markers beside it (never).

    python -m benchmarks.immutable_log --base /path/to/old/checkout [--rounds 2] [--ops 120]

For each of two source trees (``--base``: before, ``--head``: after, default this one), in child
processes with that tree's ``lv_core`` on ``PYTHONPATH``, interleaved round by round:

- ``log``: a sequential mix on a store with 20 ms per request (single-row updates, read-only
  transactions, rollbacks, two-table transfers) per preset: Delta log versions created per committed
  writer and per transaction, exact requests per transaction, commit latency;
- ``ycsb``: YCSB A (50% read / 50% update, zipfian), 1,000 records one per file, 20 ms per request,
  1 and 8 client processes, for ``delta``, LV[R] and ``serializable``: throughput, aborts, requests
  per operation.

Writes ``benchmarks/results/immutable_log.json`` and ``immutable_log.png`` and prints the ratios
(after / before) measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SYSTEMS = ("delta", "LV[R]", "serializable")
LOG_PRESETS = {"LV[R]": {"preset": "repeatable_read", "features": ["R"]},
               "repeatable_read": {"preset": "repeatable_read"},
               "serializable": {"preset": "serializable"}}


# ------------------------------------------------------------------------------ child side
def _log_mix(system: str, n: int, workdir: str) -> dict[str, Any]:
    """Sequential mix on a 20 ms store; counts log versions, requests and commit latency."""
    import pyarrow as pa

    from benchmarks.common import StoreSpec, open_lakehouse, percentile
    from lv_core.engine import arrow_ops
    from tests.helpers import oracle as O

    spec = StoreSpec("local-20ms", "local", 0.020)
    loc = os.path.join(workdir, f"log-{system}")
    lh, store = open_lakehouse(spec, loc, latency=False)
    for t in ("a", "b"):
        lh.create_table(t, "id BIGINT, val DOUBLE")
        txn = lh.begin("delta")
        for k in range(4):
            txn.execute(arrow_ops.append(t, pa.table({"id": pa.array([k], pa.int64()),
                                                      "val": pa.array([100.0], pa.float64())})))
        txn.commit()
    lh.close()
    lh, store = open_lakehouse(spec, loc, latency=True)
    cfg = LOG_PRESETS[system]
    before = {t: lh.version(t) for t in ("a", "b")}
    store.reset()
    kinds = ["update", "update", "read", "rollback", "transfer"]
    commit_ms: list[float] = []
    writers = txns = 0
    for i in range(n):
        kind = kinds[i % len(kinds)]
        txn = lh.begin(cfg["preset"], features=cfg.get("features"))
        if kind == "update":
            O.run_op(txn, O.add("a", i % 4, 1))
        elif kind == "read":
            O.run_op(txn, O.read("a", i % 4))
        elif kind == "rollback":
            O.run_op(txn, O.add("a", i % 4, 1))
            txn.rollback()
            txns += 1
            continue
        else:
            O.run_op(txn, O.add("a", i % 4, -1))
            O.run_op(txn, O.add("b", i % 4, 1))
        t0 = time.monotonic()
        txn.commit()
        commit_ms.append((time.monotonic() - t0) * 1000)
        txns += 1
        writers += kind != "read"
    counts = store.counts()
    # one more writer resolves the last rollback's version (an empty commit), as it would in use
    after = {t: lh.version(t) for t in ("a", "b")}
    lh.close()
    versions = sum(after[t] - before[t] for t in after)
    return {"system": system, "txns": txns, "writers": writers, "log_versions": versions,
            "versions_per_writer": round(versions / writers, 3), "versions_per_txn": round(versions / txns, 3),
            "requests_per_txn": round(sum(counts.values()) / txns, 2), "requests": counts,
            "commit_ms_p50": round(percentile(commit_ms, 50) or 0, 1),
            "commit_ms_mean": round(sum(commit_ms) / len(commit_ms), 1)}


def _ycsb(system: str, clients: int, ops: int, workdir: str) -> dict[str, Any]:
    from benchmarks.common import ClientPool, store_spec
    from benchmarks.ycsb import YcsbRunner

    params = {"records": 1000, "ops": ops, "seed": 42, "bundle": 10, "max_retries": 10, "timeout_s": 60.0,
              "max_seconds": 240.0, "ops_split": True}
    pool = ClientPool(clients)
    try:
        runner = YcsbRunner(pool, store_spec("local-20ms"), os.path.join(workdir, "ycsb"), params)
        try:
            return runner.run(system=system, workload="A", clients=clients, mode="single", per_file=1)
        finally:
            runner.close()
    finally:
        pool.close()


def child(task: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lv-imm-") as workdir:
        if task["kind"] == "log":
            return _log_mix(task["system"], task["n"], workdir)
        return _ycsb(task["system"], task["clients"], task["ops"], workdir)


# ------------------------------------------------------------------------------ parent side
def _run(tree: Path, task: dict[str, Any]) -> dict[str, Any]:
    code = ("import json, importlib.util as u; "  # this module by path: the old tree does not have it
            f"s = u.spec_from_file_location('lv_immutable_bench', {str(Path(__file__).resolve())!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); "
            f"print(json.dumps(m.child(json.loads({json.dumps(json.dumps(task))}))))")
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the 'before' source tree")
    ap.add_argument("--head", default=str(HERE))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ops", type=int, default=120, help="YCSB operations per configuration")
    ap.add_argument("--log-txns", type=int, default=40)
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results" / "immutable_log.json"))
    ap.add_argument("--only", choices=("log", "ycsb"), help="run one part only")
    args = ap.parse_args(argv)
    trees = {"before": Path(args.base).resolve(), "after": Path(args.head).resolve()}
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        tasks = [{"kind": "log", "system": s, "n": args.log_txns} for s in LOG_PRESETS] if args.only != "ycsb" else []
        if args.only != "log":
            tasks += [{"kind": "ycsb", "system": s, "clients": c, "ops": args.ops} for c in (1, 8) for s in SYSTEMS]
        for task in tasks:
            for label in (("before", "after") if rnd % 2 == 0 else ("after", "before")):  # interleaved
                res = _run(trees[label], task)
                rows.append({"round": rnd, "tree": label, "task": task, "result": res})
                print(label, task, {k: res.get(k) for k in ("throughput_ops_s", "aborts", "client_requests_per_op",
                                                             "versions_per_writer", "requests_per_txn",
                                                             "commit_ms_p50", "error")}, flush=True)
    summary = summarize(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rows": rows, "summary": summary},
                              indent=1) + "\n")
    plot(summary, out.with_suffix(".png"))
    print(json.dumps(summary, indent=1))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(xs: list[float]) -> float | None:
        xs = [x for x in xs if x is not None]
        return round(sum(xs) / len(xs), 3) if xs else None

    out: dict[str, Any] = {"log": {}, "ycsb": {}}
    for system in LOG_PRESETS:
        per = {}
        for tree in ("before", "after"):
            rs = [r["result"] for r in rows if r["tree"] == tree and r["task"]["kind"] == "log"
                  and r["task"]["system"] == system and "error" not in r["result"]]
            per[tree] = {k: mean([r[k] for r in rs]) for k in ("versions_per_writer", "versions_per_txn",
                                                                "requests_per_txn", "commit_ms_p50", "commit_ms_mean")}
        per["ratio_commit_ms_p50"] = _ratio(per["after"]["commit_ms_p50"], per["before"]["commit_ms_p50"])
        out["log"][system] = per
    for c in (1, 8):
        for system in SYSTEMS:
            per = {}
            for tree in ("before", "after"):
                rs = [r["result"] for r in rows if r["tree"] == tree and r["task"]["kind"] == "ycsb"
                      and r["task"]["system"] == system and r["task"]["clients"] == c and "error" not in r["result"]]
                per[tree] = {"ops_s": mean([r["throughput_ops_s"] for r in rs]),
                             "aborts": mean([r["aborts"] for r in rs]),
                             "requests_per_op": mean([r.get("client_requests_per_op") for r in rs])}
            per["ratio_ops_s"] = _ratio(per["after"]["ops_s"], per["before"]["ops_s"])
            out["ycsb"][f"{system}, {c} client(s)"] = per
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["ycsb"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = range(len(keys))
    for i, tree in enumerate(("before", "after")):
        vals = [summary["ycsb"][k][tree]["ops_s"] or 0 for k in keys]
        ax1.bar([p + i * 0.4 for p in x], vals, width=0.4, label=tree)
    ax1.set_xticks([p + 0.2 for p in x], keys, rotation=30, ha="right", fontsize=7)
    ax1.set_ylabel("YCSB A ops/s (20 ms store)")
    ax1.legend()
    lk = list(summary["log"])
    for i, tree in enumerate(("before", "after")):
        vals = [summary["log"][k][tree]["requests_per_txn"] or 0 for k in lk]
        ax2.bar([p + i * 0.4 for p in range(len(lk))], vals, width=0.4, label=tree)
    ax2.set_xticks([p + 0.2 for p in range(len(lk))], lk, fontsize=8)
    ax2.set_ylabel("requests per transaction (mix)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
