"""Cold ``%lv connect`` to the first result in a fresh Jupyter kernel, two source trees in one run (issue 37).

    python -m benchmarks.cold_connect [--base 4278b50] [--runs 3] [--out benchmarks/results/cold_connect.json]

Each sample is a new IPython kernel (``jupyter_client``, the kernel a notebook gets) whose ``PYTHONPATH``
starts with one tree, so it imports that tree's ``lv_core`` and ``lv_magic`` and starts its own embedded
Spark server. The kernel loads the magics, then gets two cells at once, as "Run All" sends them:
``%lv connect WAREHOUSE`` and a ``%%lvsql`` cell (CREATE TABLE, INSERT, SELECT). Times are taken in this
process when the kernel's messages arrive: ``connect -> engine ready`` (the connect cell sent -> its
"Spark engine ready" line), ``engine ready -> first result`` (-> the SELECT's result), ``total``, and
``cell -> first result`` (from when the cell could start: with ``--think S`` the cell is sent S seconds
after the connect cell ended, as a user who reads and types, and the warm-up has had that time).
The base tree (``--base``: a directory, or a git revision of this repository exported with ``git
archive``) and this tree alternate (A B A B ...): the machine is shared and noisy. Anything a cell
writes to stderr is counted (server logs and stack traces must not reach a cell).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "benchmarks" / "results"
DEFAULT_BASE = "4278b50"  # the tree before issue 37's engine work
CELL = "%%lvsql\nCREATE TABLE t (id BIGINT, v DOUBLE);\nINSERT INTO t VALUES (1, 2.0);\nSELECT * FROM t"
TIMEOUT_S = 600.0


def materialise(base: str, into: Path) -> Path:
    """``base`` as a source folder: itself when it is one, else that git revision exported into ``into``."""
    if Path(base).is_dir():
        return Path(base).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", base], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _wait(kc: Any, ids: dict[str, str], until: str, deadline: float, got: dict[str, Any]) -> dict[str, Any]:
    """Follow the kernel's output until cell ``until`` is idle, noting the arrival times of the milestones."""
    got.setdefault("stderr", [])
    got.setdefault("errors", [])
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no first result within {TIMEOUT_S:.0f} s: {got}")
        msg = kc.get_iopub_msg(timeout=left)
        parent = msg["parent_header"].get("msg_id")
        kind, content, now = msg["msg_type"], msg["content"], time.monotonic()
        if parent not in ids.values():
            continue
        if kind == "stream":
            if content["name"] == "stderr":
                got["stderr"].append(content["text"])
            if parent == ids["connect"] and "Spark engine ready" in content["text"]:
                got.setdefault("ready", now)
        elif kind == "error":
            got["errors"].append(f"{content['ename']}: {content['evalue']}")
        elif kind in ("display_data", "execute_result") and parent == ids.get("cell"):
            if "lv-result" in content["data"].get("text/html", "") or kind == "execute_result":
                got.setdefault("result", now)
        elif kind == "status" and content["execution_state"] == "idle" and parent == ids[until]:
            return got


def one(tree: Path, work: Path, think_s: float = 0.0) -> dict[str, Any]:
    """One cold kernel: connect, then the first cell (at once, or ``think_s`` after the connect cell ended)."""
    from jupyter_client.manager import start_new_kernel

    path = [str(tree), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    wh = Path(tempfile.mkdtemp(prefix="wh-", dir=work))
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(wh))
    got: dict[str, Any] = {}
    try:
        kc.execute_interactive("%load_ext lv_magic", timeout=120)
        t0 = time.monotonic()
        ids = {"connect": kc.execute(f"%lv connect {wh / 'wh'}")}
        if think_s <= 0:  # Run All: the cell waits in the kernel's queue
            ids["cell"] = kc.execute(CELL)
            got["sent"] = t0
        else:  # a user reads the output and types the query
            _wait(kc, ids, "connect", t0 + TIMEOUT_S, got)
            time.sleep(think_s)
            got["sent"] = time.monotonic()
            ids["cell"] = kc.execute(CELL)
        _wait(kc, ids, "cell", t0 + TIMEOUT_S, got)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)  # the kernel's exit stops its Spark server
        shutil.rmtree(wh, ignore_errors=True)
    if "ready" not in got or "result" not in got:
        raise RuntimeError(f"the kernel gave no engine-ready line or no result: {got}")
    return {"connect_to_ready_s": round(got["ready"] - t0, 2),
            "ready_to_result_s": round(got["result"] - got["ready"], 2), "total_s": round(got["result"] - t0, 2),
            "cell_to_result_s": round(got["result"] - max(got["sent"], got["ready"]), 2),
            "stderr_chunks": len(got["stderr"]), "stderr_head": "".join(got["stderr"])[:300], "errors": got["errors"]}


METRICS = ("connect_to_ready_s", "ready_to_result_s", "total_s", "cell_to_result_s")


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median (and min, max) of each phase per tree."""
    out: dict[str, dict[str, float]] = {}
    for tree in ("before", "after"):
        got = [r for r in rows if r["tree"] == tree and "error" not in r]
        for m in METRICS:
            vals = [r[m] for r in got]
            if vals:
                out.setdefault(tree, {})[m] = round(statistics.median(vals), 2)
                out[tree][m.replace("_s", "_min_s")] = min(vals)
                out[tree][m.replace("_s", "_max_s")] = max(vals)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks.common import environment, log, write_json

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=DEFAULT_BASE, help="the 'before' tree: a folder or a git revision")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--runs", type=int, default=3, help="fresh kernels per tree")
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds between the connect cell's end and sending the first cell (default 0: Run All)")
    ap.add_argument("--out", default=str(RESULTS / "cold_connect.json"))
    args = ap.parse_args(argv)
    env = environment()  # the load average at the start
    work = Path(tempfile.mkdtemp(prefix="lv-cold-"))
    try:
        trees = {"before": materialise(args.base, work / "base"), "after": Path(args.head).resolve()}
        rows: list[dict[str, Any]] = []
        for i in range(args.runs):
            for name, tree in trees.items():
                try:
                    r = {"tree": name, "run": i, **one(tree, work, args.think)}
                    log(f"cold_connect {name} run {i + 1}/{args.runs}: ready {r['connect_to_ready_s']} s, "
                        f"first result +{r['ready_to_result_s']} s, total {r['total_s']} s, "
                        f"stderr chunks {r['stderr_chunks']}")
                except Exception as e:  # one failed sample is reported, the run goes on
                    r = {"tree": name, "run": i, "error": f"{type(e).__name__}: {str(e)[:500]}"}
                    log(f"cold_connect {name} run {i + 1}: ERROR {r['error']}")
                rows.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = {"base": args.base, "head": str(args.head), "runs": args.runs, "think_s": args.think, "cell": CELL,
            "rows": rows,
            "summary": summary(rows), "environment": env,
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, data)
    plot(data, out.with_suffix(".png"))
    return data


def plot(data: dict[str, Any], path: Path) -> None:
    """Median seconds per phase, before vs after, each sample a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, tree in enumerate(("before", "after")):
        meds = [data["summary"].get(tree, {}).get(m, 0.0) for m in METRICS]
        xs = [j + (i - 0.5) * width for j in range(len(METRICS))]
        ax.bar(xs, meds, width, label=f"{tree} (median)")
        for j, m in enumerate(METRICS):
            pts = [r[m] for r in data["rows"] if r["tree"] == tree and m in r]
            ax.scatter([xs[j]] * len(pts), pts, color="black", s=10, zorder=3)
    ax.set_xticks(range(len(METRICS)), ["connect ->\nengine ready", "engine ready ->\nfirst result", "total",
                                        "cell sent ->\nfirst result"])
    ax.set_ylabel("seconds")
    think = data.get("think_s", 0.0)
    ax.set_title(f"cold %lv connect to first result, {data['runs']} fresh kernels per tree, "
                 f"{'Run All' if not think else f'first cell {think:g} s after connect'}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    main()
