"""Abort rates of the black-box list-append workload, two source trees side by side in one run (issue 34).

    python -m benchmarks.listappend --base /path/to/old/checkout [--rounds 1] [--out benchmarks/results/listappend.json]

The workload is :mod:`lv_core.blackbox` (client processes reading whole lists and appending unique
integers over several tables; its checker judges every run from the values alone). Each tree runs it in
a subprocess whose ``PYTHONPATH`` holds a copy of that tree's ``lv_core`` with this tree's
``lv_core/blackbox`` laid over it (a tree older than the checker has none), so the workload and the
judge are the same and only the protocol differs. Trees alternate within each round (machines here are
noisy). Per preset and table mode (``known``: a validated transaction made the global version log know
the tables before the clients start; ``fresh``: every transaction of a client moves to tables new to
it): transactions, committed, aborted (by rule), abort rate, throughput, and the anomalies found.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "benchmarks" / "results"
PRESETS = ("serializable", "snapshot", "write_serializable", "repeatable_read", "delta")
MODES = {"known": {"generations": 1}, "fresh": {"generations": 24}}
BASE_SPEC = {"tables": 2, "keys": 2, "txns": 24, "max_ops": 4, "read_share": 0.5, "latency_s": 0.005, "lease_s": 5.0}
CLIENTS = 4

_CODE = """
import json, sys, tempfile
from pathlib import Path
from lv_core.blackbox.runner import run
from lv_core.blackbox.workload import Spec
spec = Spec(**json.loads(sys.argv[1]))
d = Path(tempfile.mkdtemp(prefix="lv-la-"))
r = run(str(d / "wh"), spec, d / "work", clients=int(sys.argv[2]), fresh=sys.argv[3] == "fresh")
print(json.dumps({"stats": dict(r.stats), "seconds": r.seconds,
                  "anomalies": {k: len(v) for k, v in r.report.anomalies.items() if v},
                  "violations": sorted(r.violations())}))
"""


def _overlay(tree: Path, into: Path) -> Path:
    """A folder holding ``tree``'s lv_core with this tree's blackbox package laid over it."""
    dst = into / "lv_core"
    shutil.copytree(tree / "lv_core", dst, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(dst / "blackbox", ignore_errors=True)
    shutil.copytree(HERE / "lv_core" / "blackbox", dst / "blackbox", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def _one(path: Path, spec: dict[str, Any], mode: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    out = subprocess.run([sys.executable, "-c", _CODE, json.dumps(spec), str(CLIENTS), mode], cwd=path, env=env,
                         capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the 'before' source tree")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default=str(RESULTS / "listappend.json"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lv-la-trees-"))
    trees = {"before": _overlay(Path(args.base), work / "before"), "after": _overlay(Path(args.head), work / "after")}
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for preset in args.presets.split(","):
            for mode in args.modes.split(","):
                spec = {**BASE_SPEC, **MODES[mode], "preset": preset, "seed": 7 + rnd}
                for name, path in trees.items():
                    res = _one(path, spec, mode)
                    rows.append({"round": rnd, "preset": preset, "mode": mode, "tree": name, **res})
                    s = res["stats"]
                    print(f"{preset:18} {mode:5} {name:6} txns={s['txns']} committed={s['committed']} "
                          f"aborted={s['aborted']} rate={s['abort_rate']:.3f} {s['txns'] / res['seconds']:.1f} txn/s "
                          f"anomalies={res['anomalies']} violations={res['violations']}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    doc = {"spec": BASE_SPEC, "clients": CLIENTS, "modes": MODES, "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    _plot(rows, Path(args.out).with_suffix(".png"))
    shutil.rmtree(work, ignore_errors=True)


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["preset"], r["mode"]) for r in rows}, key=lambda k: (PRESETS.index(k[0]), k[1]))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.4
    for i, tree in enumerate(("before", "after")):
        vals = []
        for k in keys:
            got = [r["stats"]["abort_rate"] for r in rows if (r["preset"], r["mode"]) == k and r["tree"] == tree]
            vals.append(sum(got) / len(got) if got else 0.0)
        ax.bar([j + (i - 0.5) * width for j in range(len(keys))], vals, width, label=tree)
    ax.set_xticks(range(len(keys)), [f"{p}\n{m}" for p, m in keys], fontsize=7)
    ax.set_ylabel("abort rate")
    ax.set_title(f"list-append abort rate, {CLIENTS} clients (before vs after, one run)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
