"""Commit latency vs the number of tables, uncontended, two source trees side by side (issue 21).

    python -m benchmarks.commit_latency --base /path/to/old/checkout [--head .] [--rounds 3]

One transaction at a time inserts one row into each of k tables (``repeatable_read``: LV[R]+LV[CT])
on a local store with 20 ms per request; the ``commit()`` call is timed (median of ``--reps``
transactions per round). The trees run in child processes with their own ``lv_core`` (as
:mod:`benchmarks.aborts`), alternating round by round. Writes ``results/commit_latency.json`` with
the median per tree and k and the ratio k_max / 1 (target: <= 1.5), and the store floor (k parallel
PUT-creates with nothing around them, measured in every round between the trees).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import tree_process

HERE = Path(__file__).resolve().parents[1]


def measure(ks: list[int], reps: int, latency_s: float) -> dict[int, float]:
    """Median commit latency (ms) per k, in this process's ``lv_core``."""
    import pyarrow as pa

    import lv_core
    from lv_core.engine import arrow_ops as aops
    from lv_core.storage.instrumented import KINDS, InstrumentedStore
    from lv_core.txn.cleaner import drain

    out: dict[int, float] = {}
    for k in ks:
        root = tempfile.mkdtemp(prefix="lv-commitlat-")
        store = InstrumentedStore(lv_core.connect(root).store, latency={kind: latency_s for kind in KINDS})
        lh = lv_core.Lakehouse(store)
        for i in range(k):
            lh.create_table(f"t{i}", "id BIGINT, v DOUBLE")
        times = []
        for r in range(reps + 1):  # the first transaction warms the caches
            txn = lh.begin("repeatable_read")
            for i in range(k):
                txn.execute(aops.append(f"t{i}", pa.table({"id": pa.array([r], pa.int64()), "v": pa.array([1.0])})))
            t0 = time.perf_counter()
            txn.commit()
            if r:
                times.append((time.perf_counter() - t0) * 1000)
            drain(60.0)
        lh.close()
        out[k] = statistics.median(times)
    return out


def store_floor(ks: list[int], reps: int, latency_s: float) -> dict[int, float]:
    """Median time (ms) of k PUT-creates of small log files (in k existing log folders) in parallel on
    the same kind of store, with no protocol around them: what a commit of k tables cannot go below here
    (the local store syncs every file, and each of its system calls is a round for the interpreter lock
    among the k threads; on S3 parallel PUTs cost about one round trip plus the client's work)."""
    from concurrent.futures import ThreadPoolExecutor

    import lv_core
    from lv_core.storage.base import CREATE
    from lv_core.storage.instrumented import KINDS, InstrumentedStore

    store = InstrumentedStore(lv_core.connect(tempfile.mkdtemp(prefix="lv-floor-")).store,
                              latency={kind: latency_s for kind in KINDS})
    out: dict[int, float] = {}
    with ThreadPoolExecutor(max(ks)) as pool:
        for k in ks:
            for i in range(k):  # the tables' log folders exist, as they do for a commit
                store.put(f"k{k}t{i}/_delta_log/00000000000000000000.json", b"{}", mode=CREATE)
            times = []
            for r in range(reps + 1):
                t0 = time.perf_counter()
                keys = [f"k{k}t{i}/_delta_log/{r + 1:020d}.json" for i in range(k)]
                list(pool.map(lambda key: store.put(key, b"{}" * 500, mode=CREATE), keys))
                if r:
                    times.append((time.perf_counter() - t0) * 1000)
            out[k] = round(statistics.median(times), 1)
    return out


def _child(tree: str, ks: list[int], reps: int, latency_s: float) -> dict[int, float]:
    code = ("import json; from benchmarks import commit_latency as c; "
            f"print(json.dumps(c.measure({ks!r}, {reps}, {latency_s})))")
    with tree_process(tree) as (shim, env):
        res = subprocess.run([sys.executable, "-c", code], cwd=shim, env=env, capture_output=True, text=True,
                             check=True)
    return {int(k): v for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the 'before' source tree")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--ks", default="1,8,32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results" / "commit_latency.json"))
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    runs: dict[str, list[dict[int, float]]] = {"before": [], "after": [], "floor": []}
    trees = [("before", args.base), ("after", args.head)]
    for rnd in range(args.rounds):  # the store floor is measured in every round too: the disk's speed drifts
        for name, tree in trees if rnd % 2 == 0 else trees[::-1]:  # neither tree always runs second
            os.sync()  # each run starts with no dirty pages of the one before it to write back
            runs[name].append(_child(tree, ks, args.reps, args.latency_ms / 1000))
        os.sync()
        runs["floor"].append(store_floor(ks, args.reps, args.latency_ms / 1000))
    summary: dict[str, Any] = {}
    for name, rs in runs.items():
        med = {k: round(statistics.median(r[k] for r in rs), 1) for k in ks}
        key = "parallel_put_create_ms_p50" if name == "floor" else "commit_ms_p50"
        summary["store_floor" if name == "floor" else name] = {
            key: med, f"ratio_{ks[-1]}_to_{ks[0]}": round(med[ks[-1]] / med[ks[0]], 2)}
    floor_top = summary["store_floor"]["parallel_put_create_ms_p50"][ks[-1]]
    for name in ("before", "after"):
        summary[name][f"above_floor_ms_{ks[-1]}"] = round(summary[name]["commit_ms_p50"][ks[-1]] - floor_top, 1)
    data = {"base": args.base, "head": args.head, "latency_ms": args.latency_ms, "reps": args.reps,
            "rounds": args.rounds, "runs": runs, "summary": summary}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    _plot(data, ks, Path(args.out).with_suffix(".png"))
    print(json.dumps(summary, indent=1))


def _plot(data: dict[str, Any], ks: list[int], path: Path) -> None:
    """Commit p50 per k for each tree, and the store floor, as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, s in data["summary"].items():
        ys = s.get("commit_ms_p50") or s["parallel_put_create_ms_p50"]
        ratio = s[f"ratio_{ks[-1]}_to_{ks[0]}"]
        ax.plot(ks, [ys[k] for k in ks], marker="o", linestyle="--" if name == "store_floor" else "-",
                label=f"{name} ({ks[-1]}/{ks[0]} = {ratio})")
    ax.set_xlabel("tables written by the transaction")
    ax.set_ylabel("commit() p50, ms")
    ax.set_title(f"Uncontended commit latency, {data['latency_ms']:g} ms per request")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
