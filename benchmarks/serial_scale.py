"""Serializable commits on disjoint tables: does throughput grow with the number of committers?

    python -m benchmarks.serial_scale [--base OLD_TREE] [--procs 1,8] [--seconds 15] [--latency-ms 20]

Each of k processes updates one row of its own table (t0..t7: no two processes share a table) in
``serializable`` transactions, back to back, for ``--seconds``; every request of every process
waits ``--latency-ms`` (a local folder with injected latency, as S3 costs). All validations go
through the warehouse's one validation lock, so this measures how much of a commit runs under it.
Reports commits per second for each k and the ratio k=max / k=1 (issue 21 asks >= 3 at 8), per source
tree when ``--base`` is given (trees interleaved per k, side by side in one run). Writes
``benchmarks/results/serial_scale.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import tree_process

HERE = Path(__file__).absolute().parents[1]
OUT = HERE / "benchmarks" / "results" / "serial_scale.json"
TABLES = 8


def child(wh: str, index: int, start_at: float, seconds: float, latency_s: float) -> None:
    """One committer: serializable single-row updates of table t<index> until the time is up."""
    from benchmarks.common import StoreSpec, open_lakehouse
    from lv_core.errors import TransactionAborted
    from tests.helpers.bank import add_kv

    lh, _store = open_lakehouse(StoreSpec("local", "local", latency_s), wh, lease_s=30.0)
    table = f"t{index}"
    while time.time() < start_at:
        time.sleep(0.005)
    end = start_at + seconds
    commits = aborts = 0
    while time.time() < end:
        txn = lh.begin("serializable", timeout_s=30)
        try:
            add_kv(txn, table, 1, 1.0)
            txn.commit()
            commits += 1
        except TransactionAborted:
            aborts += 1
    lh.close()
    print(json.dumps({"commits": commits, "aborts": aborts}))


def _setup(wh: str) -> None:
    import lv_core
    from tests.helpers.bank import add_kv, make_kv

    lh = lv_core.connect(wh)
    for i in range(TABLES):
        make_kv(lh, f"t{i}", {1: 0.0})
    warm = lh.begin("serializable")  # every table enters the global version log once
    for i in range(TABLES):
        add_kv(warm, f"t{i}", 1, 0.0)
    warm.commit()
    lh.close()


def run_one(tree: Path, procs: int, seconds: float, latency_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lv-serial-") as tmp:
        wh = str(Path(tmp) / "wh")
        _setup(wh)
        start_at = time.time() + 3.0 + 0.3 * procs  # every child imported and connected by then
        with tree_process(tree) as (cwd, env):
            env = {**env, "PYTHONPATH": f"{cwd}:{HERE}"}  # tests.helpers from this checkout
            ps = [subprocess.Popen([sys.executable, "-m", "benchmarks.serial_scale", "--child", wh, str(i),
                                    repr(start_at), repr(seconds), repr(latency_s)],
                                   cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for i in range(procs)]
            outs = [p.communicate(timeout=seconds + 120) for p in ps]
    results = []
    for (out, err), p in zip(outs, ps, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"committer failed: {err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    commits = sum(r["commits"] for r in results)
    return {"procs": procs, "commits": commits, "aborts": sum(r["aborts"] for r in results),
            "commits_per_s": round(commits / seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1], int(argv[2]), float(argv[3]), float(argv[4]), float(argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the 'before' source tree (a checkout or git worktree)")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    trees = {"after": Path(args.head)} if not args.base else {"before": Path(args.base), "after": Path(args.head)}
    ks = [int(k) for k in args.procs.split(",")]
    res: dict[str, Any] = {"seconds": args.seconds, "latency_ms": args.latency_ms, "runs": {t: {} for t in trees}}
    for k in ks:
        for name, tree in trees.items():
            r = run_one(tree, k, args.seconds, args.latency_ms / 1000.0)
            res["runs"][name][str(k)] = r
            print(name, r, flush=True)
    lo, hi = str(min(ks)), str(max(ks))
    res["ratio"] = {name: round(runs[hi]["commits_per_s"] / max(runs[lo]["commits_per_s"], 1e-9), 2)
                    for name, runs in res["runs"].items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    _plot(res, Path(args.out).with_suffix(".png"))
    print(json.dumps(res["ratio"]))


def _plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(res["runs"])
    ks = list(next(iter(res["runs"].values())))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([j + i * width for j in range(len(ks))], [res["runs"][name][k]["commits_per_s"] for k in ks],
               width, label=f"{name} (x{res['ratio'][name]})")
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(ks))], [f"{k} process(es)" for k in ks])
    ax.set_ylabel("serializable commits/s")
    ax.set_title(f"Disjoint tables, {res['latency_ms']:g} ms per request")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
