"""Large-table operations through the Spark data plane (issue 20 items 4 and 6), as ratios in one run.

    python -m benchmarks.scale --rows 1000000 --files 16 [--stores local,s3] [--out benchmarks/results]
                               [--base /old/checkout [--head .] [--rounds N]]

Both stores run in one process standing for the notebook kernel (one embedded Spark server; its
peak RSS, ``ru_maxrss``, covers both), each operation on one store right after the other (load from
elsewhere on a shared machine hits both alike): ``local`` is a local folder (the ``direct`` path:
Spark reads and writes the files), ``s3`` the moto S3 test server in its own process (the embedded
server has no S3 connector: the ``stream`` path, Spark's Python workers move the files).
Operations on ``t (id BIGINT, k INT, v DOUBLE, s STRING)``, ``--rows`` rows in ``--files`` files, ids
contiguous per file:

- ``insert_select``: ``INSERT INTO t SELECT ... FROM range(rows)``;
- ``count``: ``SELECT count(*), sum(v) FROM t``;
- ``update_scattered``: ``UPDATE ... WHERE id % 100 = 0`` (1% of the rows, in every file);
- ``update_contiguous`` / ``delete_contiguous``: 1% of the rows, in one file (data skipping);
- ``merge``: ``MERGE`` of 1% of the rows (half matched, half new).

Local baselines in the same process, each right after the operation it is compared with:
``plain_parquet_write`` (Spark writes the same rows as plain Parquet, no Delta, no transaction) and
``full_rewrite`` (Spark reads all of it and writes it all back with one column changed: what an UPDATE
without file-level skipping would cost). With ``--base``, the same runs for an older source tree
(``lv_core`` imported from it; each tree in its own process, Spark server and S3 server, alternating
which goes first per round), per-operation
medians over the rounds, and after/before per operation.
Ratios: ``insert_select / plain_parquet_write``, ``update_scattered / full_rewrite``,
``update_contiguous / update_scattered``, and per operation ``s3 / local``.
Writes ``results/scale.json`` and ``results/scale.png`` (``--name`` changes the file names).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import tree_process

HERE = Path(__file__).resolve().parents[1]
OPS = ("insert_select", "count", "update_scattered", "update_contiguous", "delete_contiguous", "merge")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_stores(kinds: list[str], rows: int, files: int, locations: dict[str, str],
               s3: dict[str, str] | None) -> dict[str, Any]:
    """Every operation on each store, interleaved (op 1 on every store, then op 2, ...) so that load
    from elsewhere on the machine hits both sides alike; one process, one embedded Spark server."""
    import lv_core
    from lv_core.engine import api

    lhs = {k: lv_core.connect(locations[k], storage_options=s3) if k == "s3" else lv_core.connect(locations[k])
           for k in kinds}
    out: dict[str, Any] = {"rss_mb_start": round(_rss_mb(), 1), "stores": {k: {"seconds": {}} for k in kinds}}
    one = rows // 100
    steps = [
        ("insert_select", f"INSERT INTO t SELECT id, CAST(id % 1000 AS INT), id * 0.5, concat('row-', id) "
                          f"FROM range(0, {rows}, 1, {files})"),
        ("count", "SELECT count(*), sum(v) FROM t"),
        ("update_scattered", "UPDATE t SET v = v + 1 WHERE id % 100 = 0"),
        ("update_contiguous", f"UPDATE t SET v = v + 1 WHERE id < {one}"),
        ("delete_contiguous", f"DELETE FROM t WHERE id >= {rows - one}"),
        ("merge", f"MERGE INTO t USING (SELECT id, 1.0 AS v FROM range({rows - 2 * one}, {rows})) s "
                  "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
                  "WHEN NOT MATCHED THEN INSERT (id, k, v, s) VALUES (s.id, 0, s.v, 'new')"),
    ]
    for k, lh in lhs.items():
        # Warm-up, untimed: the Spark server starts, the data path is chosen, Python workers spawn.
        lh.sql("CREATE TABLE w (id BIGINT, k INT, v DOUBLE, s STRING)")
        lh.sql("INSERT INTO w SELECT id, 0, 0.0, 'w' FROM range(0, 1000, 1, 2)")
        lh.sql("UPDATE w SET v = 1.0 WHERE id < 10")
        lh.sql("SELECT count(*), sum(v) FROM w").collect()
        lh.sql("CREATE TABLE t (id BIGINT, k INT, v DOUBLE, s STRING)")
        out["stores"][k]["data_path"] = api.engine(lh).data_path
    plain = os.path.join(locations["local"], "_plain") if "local" in locations else ""
    for name, sql in steps:
        for k, lh in lhs.items():
            t0 = time.perf_counter()
            lh.sql(sql).collect()
            out["stores"][k]["seconds"][name] = round(time.perf_counter() - t0, 3)
        if "local" in lhs and name in ("insert_select", "update_scattered"):  # its baseline, right after it
            out["stores"]["local"]["seconds"].update(_baseline(lhs["local"].spark, name, plain, rows, files))
    for k, lh in lhs.items():
        got = lh.sql("SELECT count(*) FROM t").collect()
        assert got[0][0] == rows, (k, got)
    out["rss_mb_peak"] = round(_rss_mb(), 1)
    for lh in lhs.values():
        lh.close()
    return out


def _baseline(spark: Any, after: str, base: str, rows: int, files: int) -> dict[str, float]:
    """Plain Spark doing the same work without Delta or transactions: after ``insert_select``, writing
    the same rows as Parquet; after ``update_scattered``, reading them all and writing them all back
    with the column changed (an UPDATE without file-level skipping)."""
    if after == "insert_select":
        spark.range(10).write.parquet("file:" + base + "/warm")
        frame = spark.range(0, rows, 1, files).selectExpr("id", "CAST(id % 1000 AS INT) AS k", "id * 0.5 AS v",
                                                          "concat('row-', id) AS s")
        t0 = time.perf_counter()
        frame.write.parquet("file:" + base + "/a")
        return {"plain_parquet_write": round(time.perf_counter() - t0, 3)}
    t0 = time.perf_counter()
    changed = "CASE WHEN id % 100 = 0 THEN v + 1 ELSE v END AS v"
    spark.read.parquet("file:" + base + "/a").selectExpr("id", "k", changed, "s").write.parquet("file:" + base + "/b")
    return {"full_rewrite": round(time.perf_counter() - t0, 3)}


def _child(kinds: list[str], rows: int, files: int, locations: dict[str, str],
           s3: dict[str, str] | None, tree: str | None = None) -> dict[str, Any]:
    """One measuring process; ``tree``: import ``lv_core`` from that source tree (a before/after run)."""
    cmd = [sys.executable, "-m", "benchmarks.scale", "--child", ",".join(kinds), "--rows", str(rows),
           "--files", str(files), "--location", json.dumps(locations)]
    here = contextlib.nullcontext((str(HERE), {**os.environ, "PYTHONPATH": str(HERE)}))
    with here if tree is None else tree_process(tree) as (cwd, env):
        if s3:
            env["LV_BENCH_S3"] = json.dumps(s3)  # the child's options: never on a command line
        res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def ratios(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    loc = res["stores"].get("local", {}).get("seconds", {})
    if loc:
        for a, b in (("insert_select", "plain_parquet_write"), ("update_scattered", "full_rewrite"),
                     ("update_contiguous", "update_scattered"), ("delete_contiguous", "update_scattered"),
                     ("update_contiguous", "full_rewrite"), ("delete_contiguous", "full_rewrite")):
            out[f"{a} / {b} (local)"] = round(loc[a] / loc[b], 2)
    s3 = res["stores"].get("s3", {}).get("seconds", {})
    if loc and s3:
        out["s3 stream / local direct"] = {op: round(s3[op] / loc[op], 2) for op in OPS}
    return out


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One run made of the per-operation medians of ``runs`` (peak RSS: the largest)."""
    first = runs[0]
    stores = {k: {"data_path": st["data_path"],
                  "seconds": {op: statistics.median(r["stores"][k]["seconds"][op] for r in runs)
                              for op in st["seconds"]}} for k, st in first["stores"].items()}
    return {"stores": stores, "rss_mb_peak": max(r["rss_mb_peak"] for r in runs),
            "rss_mb_start": first["rss_mb_start"]}


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.8))
    series = []
    for tree, run in ([("before", res["before"]), ("after", res)] if "before" in res else [("", res)]):
        for kind, st in run["stores"].items():
            series.append((f"{kind} ({st['data_path']}){' ' + tree if tree else ''}", st["seconds"]))
    names = list(OPS) + ["plain_parquet_write", "full_rewrite"]
    width = 0.8 / max(1, len(series))
    for i, (label, secs) in enumerate(series):
        ax.bar([x + i * width for x in range(len(names))], [secs.get(n, 0.0) for n in names], width=width,
               label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(names))])
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("seconds")
    ax.set_title(f"{res['rows']:,} rows in {res['files']} files; kernel peak RSS {res['rss_mb_peak']:.0f} MB "
                 "(both stores, one process)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--stores", default="local,s3")
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results"))
    ap.add_argument("--name", default="scale", help="result file names: NAME.json, NAME.png")
    ap.add_argument("--base", help="a 'before' source tree: both trees run, alternating, --rounds times")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (with --base; default: this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--location", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        s3 = json.loads(os.environ["LV_BENCH_S3"]) if "LV_BENCH_S3" in os.environ else None
        print(json.dumps(run_stores(args.child.split(","), args.rows, args.files, json.loads(args.location), s3)))
        return
    from benchmarks.common import S3Server, environment, s3_options

    kinds = args.stores.split(",")
    res: dict[str, Any] = {"rows": args.rows, "files": args.files, "machine": environment(),
                           "load_average_before": os.getloadavg()}
    trees: list[tuple[str, str | None]] = [("before", args.base), ("after", args.head)] if args.base else [
        ("after", None)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _t in trees}
    for r in range(args.rounds):
        for name, tree in (trees if r % 2 == 0 else trees[::-1]):  # who goes first alternates per round
            # a fresh S3 server per run: moto keeps every object in memory, a second run would share it
            server = S3Server() if "s3" in kinds else None
            try:
                with tempfile.TemporaryDirectory(prefix="lv-bench-scale-") as tmp:
                    locations = {"local": os.path.join(tmp, "wh")}
                    if server is not None:
                        locations["s3"] = f"s3://{server.bucket}/wh-{name}-{r}"
                    got = _child(kinds, args.rows, args.files, locations,
                                 s3_options(server.endpoint) if server else None, tree)
            finally:
                if server is not None:
                    server.stop()
            print(name, json.dumps(got["stores"]), flush=True)
            runs[name].append(got)
    res["load_average_after"] = os.getloadavg()
    res.update(_median_run(runs["after"]))
    res["ratios"] = ratios(res)
    if args.base:
        res["base"], res["head"], res["rounds"], res["runs"] = args.base, args.head, args.rounds, runs
        res["before"] = _median_run(runs["before"])
        res["before"]["ratios"] = ratios(res["before"])
        res["after_over_before"] = {k: {op: round(v / res["before"]["stores"][k]["seconds"][op], 2)
                                        for op, v in st["seconds"].items()} for k, st in res["stores"].items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
    plot(res, out / f"{args.name}.png")
    print(json.dumps({k: res[k] for k in ("ratios", "after_over_before") if k in res}, indent=1))
    if args.base:
        print(json.dumps({"before ratios": res["before"]["ratios"]}, indent=1))


if __name__ == "__main__":
    main()
