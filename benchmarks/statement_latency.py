"""Short SQL statements on Spark Connect, before/after in one run: latency and Spark Connect calls.

    python -m benchmarks.statement_latency [--base /path/to/old/checkout] [--rounds 3] [--n 12]

What a notebook user waits for on every cell of the tutorials: one-row UPDATE, DELETE, INSERT VALUES,
MERGE and a point SELECT, each as its own ``serializable`` transaction on a local folder, and a
two-statement transfer. Both source trees (``--base``: before, ``--head``: after, default this one) run
in child processes (:func:`benchmarks.common.tree_process`) against **one** Spark Connect server that
this process starts (``SPARK_REMOTE``), interleaved round by round, so the engine and its warm-up are
the same for both and the difference is the product's own. Per statement kind: median latency and the
exact number of Spark Connect calls (ExecutePlan, AnalyzePlan, Config, ... counted on the client's
gRPC stub). Writes ``results/statement_latency.json`` and prints after/before ratios.
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
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import RESULTS, environment, log, tree_process, write_json

HERE = Path(__file__).resolve().parents[1]
KINDS = ("update", "delete_insert", "insert", "merge", "select", "transfer")


# ------------------------------------------------------------------------------ child side
def _count_calls(spark: Any) -> Counter[str]:
    """Count every gRPC call the session's client makes, by method (ExecutePlan, AnalyzePlan, ...)."""
    calls: Counter[str] = Counter()
    stub = spark._client._stub
    for name in [n for n in dir(stub) if n[:1].isupper()]:
        method = getattr(stub, name)

        def counted(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
            calls[_n] += 1
            return _m(*a, **k)

        setattr(stub, name, counted)
    return calls


def child(task: dict[str, Any]) -> dict[str, Any]:
    import lv_core

    n, warm = task["n"], task["warmup"]
    with tempfile.TemporaryDirectory(prefix="lv-stmt-") as d:
        lh = lv_core.connect(d)  # SPARK_REMOTE: the parent's server
        lh.sql("CREATE TABLE acct (id BIGINT, v DOUBLE)")
        lh.sql("CREATE TABLE other (id BIGINT, v DOUBLE)")
        for t in ("acct", "other"):  # 10 data files of 10 rows: data skipping leaves one per statement
            for f in range(10):
                lh.sql(f"INSERT INTO {t} SELECT id, CAST(id AS DOUBLE) FROM range({f * 10}, {f * 10 + 10})")

        def txn(*sql: str, collect: bool = False) -> Callable[[int], None]:
            def run(i: int) -> None:
                with lh.transaction("serializable") as t:
                    for s in sql:
                        df = t.sql(s.format(k=i % 100, new=1000 + i))
                        if collect:
                            df.collect()
            return run

        ops = {"update": txn("UPDATE acct SET v = v + 1 WHERE id = {k}"),
               "delete_insert": txn("DELETE FROM acct WHERE id = {k}", "INSERT INTO acct VALUES ({k}, 0.0)"),
               "insert": txn("INSERT INTO other VALUES ({new}, 1.0)"),
               "merge": txn("MERGE INTO acct USING (SELECT {k} AS id, 5.0 AS v) s ON acct.id = s.id WHEN MATCHED "
                            "THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)"),
               "select": txn("SELECT v FROM acct WHERE id = {k}", collect=True),
               "transfer": txn("UPDATE acct SET v = v - 1 WHERE id = {k}", "UPDATE other SET v = v + 1 WHERE id = {k}")}
        calls = _count_calls(lh.spark)
        out: dict[str, Any] = {}
        for kind in KINDS:
            for i in range(warm):
                ops[kind](i)
            times = []
            calls.clear()
            for i in range(n):
                t0 = time.perf_counter()
                ops[kind](warm + i)
                times.append(time.perf_counter() - t0)
            out[kind] = {"ms_median": round(statistics.median(times) * 1000, 1),
                         "ms_min": round(min(times) * 1000, 1),
                         "spark_calls": round(sum(calls.values()) / n, 2),
                         "spark_calls_by_method": {k: round(v / n, 2) for k, v in sorted(calls.items())}}
        lh.close()
        return out


# ------------------------------------------------------------------------------ parent side
def _run(tree: Path, task: dict[str, Any], remote: str) -> dict[str, Any]:
    """``child(task)`` with ``tree``'s lv_core (and this checkout's benchmarks, which tree_process links)."""
    code = ("import json; from benchmarks import statement_latency as m; "
            f"print(json.dumps(m.child({task!r})))")
    with tree_process(tree) as (cwd, env):
        env = {**env, "SPARK_REMOTE": remote}
        out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr[-3000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and tree: the median over rounds of the per-round median latency; calls per statement."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        per: dict[str, Any] = {}
        for tree in ("before", "after"):
            rs = [r["result"][kind] for r in rows if r["tree"] == tree and kind in r.get("result", {})]
            if rs:
                per[tree] = {"ms_median": round(statistics.median(x["ms_median"] for x in rs), 1),
                             "spark_calls": rs[-1]["spark_calls"],
                             "spark_calls_by_method": rs[-1]["spark_calls_by_method"]}
        if "before" in per and "after" in per:
            per["after/before ms"] = round(per["after"]["ms_median"] / per["before"]["ms_median"], 3)
        out[kind] = per
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the 'before' source tree (default: only this one)")
    ap.add_argument("--head", default=str(HERE))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=12, help="measured statements per kind and round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "statement_latency.json"))
    args = ap.parse_args(argv)
    from lv_core.engine.session import get_spark, local_server, warm_up

    trees = {"before": Path(args.base), "after": Path(args.head)} if args.base else {"after": Path(args.head)}
    os.environ.pop("SPARK_REMOTE", None)  # this process owns the server the children share
    get_spark()
    warm_up()
    server = local_server()
    if server is None:
        raise SystemExit("statement_latency: Spark cannot start here (no Java?)")
    log(f"Spark Connect server {server.url.split('/;')[0]}")
    task = {"n": args.n, "warmup": args.warmup}
    rows = []
    for rnd in range(args.rounds):
        order = list(trees.items()) if rnd % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            res = _run(tree, task, server.url)
            log(f"round {rnd} {name}: " + ("error" if "error" in res else
                                           ", ".join(f"{k} {v['ms_median']} ms" for k, v in res.items())))
            rows.append({"round": rnd, "tree": name, "result": res})
    commits = {k: subprocess.run(["git", "-C", str(v), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip() for k, v in trees.items()}
    data = {"environment": environment(), "trees": {k: str(v) for k, v in trees.items()}, "commits": commits,
            "task": task,
            "rows": rows, "summary": summarize(rows)}
    write_json(Path(args.out), data)
    plot(data, Path(args.out).with_suffix(".png"))
    print(json.dumps(data["summary"], indent=1))


def plot(data: dict[str, Any], path: Path) -> None:
    """Median milliseconds per statement kind, before vs after, each round's median a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.38
    trees = [t for t in ("before", "after") if t in data["trees"]]
    for i, tree in enumerate(trees):
        xs = [j + (i - (len(trees) - 1) / 2) * width for j in range(len(KINDS))]
        ax.bar(xs, [data["summary"][k].get(tree, {}).get("ms_median", 0.0) for k in KINDS], width,
               label=f"{tree} (median of rounds)")
        for j, k in enumerate(KINDS):
            pts = [r["result"][k]["ms_median"] for r in data["rows"] if r["tree"] == tree and k in r.get("result", {})]
            ax.scatter([xs[j]] * len(pts), pts, color="black", s=10, zorder=3)
    ax.set_xticks(range(len(KINDS)), [k.replace("_", " + ") for k in KINDS])
    ax.set_ylabel("ms per transaction")
    ax.set_title("short serializable statements on one local Spark Connect server")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
