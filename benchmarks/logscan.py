"""Finding and reading a long Delta log: exact requests and time, before vs after, in one run.

    python -m benchmarks.logscan [--commits 1000] [--latency-ms 5] [--base-rev REV | --base PATH]

A table of ``--commits`` versions (one ``add`` each, no checkpoint) is written once; then each source
tree (``--base``: a checkout, or ``--base-rev``: a git revision extracted with ``git archive``; and
this tree) runs the same reads in its own subprocess (its own ``lv_core`` on ``PYTHONPATH``) through
an ``InstrumentedStore`` with ``--latency-ms`` before every request (modelling S3 round trips):

- ``lakehouse_version_cold``: ``Lakehouse.version()`` on a fresh Lakehouse;
- ``probe_cold``: ``DeltaLog.latest_version_by_probe()`` (what the global version log and hidden
  reads call for a table they have no hint for);
- ``probe_behind_1`` / ``probe_behind_100`` / ``probe_behind_all``: the same from a hint 1, 100 or
  all versions behind;
- ``snapshot_cold``: ``Lakehouse.snapshot()`` on a fresh Lakehouse (find the latest, read every commit);
- ``snapshot_list`` / ``snapshot_probe``: ``DeltaLog.snapshot(method=...)``.

Request counts are exact; times are one run each (median of ``--repeat``). Writes
``results/logscan.json`` and ``results/logscan.png``.
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
from typing import Any, Callable

HERE = Path(__file__).resolve().parents[1]
SCENARIOS = ("lakehouse_version_cold", "probe_cold", "probe_behind_1", "probe_behind_100", "probe_behind_all",
             "snapshot_cold", "snapshot_list", "snapshot_probe")


def build_table(root: str, commits: int) -> None:
    """Table ``t``: CREATE TABLE then ``commits - 1`` commits of one ``add`` each."""
    from lv_core.delta import AddFile, CommitInfo, commit, create_table
    from lv_core.storage.local import LocalStore

    store = LocalStore(root)
    create_table(store, "t", "id BIGINT")
    for v in range(1, commits):
        add = AddFile(path=f"part-{v:06d}.parquet", partition_values={}, size=1, modification_time=0)
        commit(store, "t", v, [CommitInfo.create("WRITE", {"mode": "Append"}), add])


def measure(root: str, latency_ms: float, repeat: int) -> dict[str, Any]:
    """Run every scenario on the table under ``root`` with this interpreter's ``lv_core``."""
    from lv_core import Lakehouse
    from lv_core.delta import DeltaLog
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.storage.local import LocalStore

    st = InstrumentedStore(LocalStore(root), latency=latency_ms / 1000.0)
    latest = DeltaLog(LocalStore(root), "t").latest_version_by_list()

    def fresh(call: Callable[[Any], Any]) -> Callable[[], Any]:
        def run() -> Any:
            lh = Lakehouse(st)
            st.reset()
            try:
                return call(lh)
            finally:
                lh.close()
        return run

    log = DeltaLog(st, "t")
    calls: dict[str, Callable[[], Any]] = {
        "lakehouse_version_cold": fresh(lambda lh: lh.version("t")),
        "probe_cold": log.latest_version_by_probe,
        "probe_behind_1": lambda: log.latest_version_by_probe(latest - 1),
        "probe_behind_100": lambda: log.latest_version_by_probe(max(0, latest - 100)),
        "probe_behind_all": lambda: log.latest_version_by_probe(0),
        "snapshot_cold": fresh(lambda lh: lh.snapshot("t").version),
        "snapshot_list": lambda: log.snapshot(method="list").version,
        "snapshot_probe": lambda: log.snapshot(method="probe").version,
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        times = []
        for _ in range(repeat):
            st.reset()
            t0 = time.perf_counter()
            got = call()
            times.append(time.perf_counter() - t0)
            counts = {k: v for k, v in st.counts().items() if v}
        assert got == latest, (name, got, latest)
        out[name] = {"requests": counts, "total": sum(counts.values()), "seconds": sorted(times)[len(times) // 2]}
    return out


def _run_tree(tree: Path, root: str, latency_ms: float, repeat: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--measure", root, "--latency-ms", str(latency_ms), "--repeat", str(repeat)]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # that tree's lv_core; this file runs as a script
    res = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"{tree}: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _extract(rev: str, dst: str) -> Path:
    """``git archive REV`` of this repository into ``dst`` (no worktree, no change to the repository)."""
    arch = subprocess.run(["git", "-C", str(HERE), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dst], input=arch, check=True)
    return Path(dst)


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(SCENARIOS)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric, label in ((axes[0], "total", "requests (log scale)"),
                              (axes[1], "seconds", f"seconds at {res['latency_ms']} ms/request (log scale)")):
        xs = range(len(names))
        for off, side in ((-0.2, "before"), (0.2, "after")):
            ax.bar([x + off for x in xs], [max(res[side][n][metric], 1e-4) for n in names], width=0.4, label=side)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(f"Delta log of {res['commits']} commits (no checkpoint): before vs after")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--base", help="the 'before' source tree")
    ap.add_argument("--base-rev", default="23d68b9~1", help="or a git revision of this repository (git archive)")
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results"))
    ap.add_argument("--measure", metavar="WAREHOUSE", help=argparse.SUPPRESS)  # the per-tree subprocess
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.latency_ms, args.repeat)))
        return
    with tempfile.TemporaryDirectory(prefix="lv-bench-log-") as tmp:
        root = os.path.join(tmp, "wh")
        build_table(root, args.commits)
        base = Path(args.base) if args.base else _extract(args.base_rev, tempfile.mkdtemp(dir=tmp))
        before = _run_tree(base.resolve(), root, args.latency_ms, args.repeat)
        after = _run_tree(HERE, root, args.latency_ms, args.repeat)
    res = {"commits": args.commits, "latency_ms": args.latency_ms, "repeat": args.repeat,
           "base": args.base or f"git:{args.base_rev}", "before": before, "after": after}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "logscan.json").write_text(json.dumps(res, indent=1))
    plot(res, out / "logscan.png")
    print(f"{'scenario':<24} {'req before':>10} {'req after':>10} {'s before':>9} {'s after':>9}")
    for n in SCENARIOS:
        b, a = before[n], after[n]
        print(f"{n:<24} {b['total']:>10} {a['total']:>10} {b['seconds']:>9.3f} {a['seconds']:>9.3f}")


if __name__ == "__main__":
    main()
