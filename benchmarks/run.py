"""Run the benchmarks and write benchmarks/results/*.json, PNG plots and benchmarks/RESULTS.md.

    python benchmarks/run.py                 # the reduced default (about 35 min on 2 cores)
    python benchmarks/run.py --profile full  # the paper's sizes (hours on 2 cores)
    python benchmarks/run.py --profile smoke --out /tmp/x   # tiny sizes (the smoke test)
    python benchmarks/run.py --only requests,multitable --stores local-0ms,local-20ms

Benchmarks: ``ycsb`` (YCSB-LH workloads), ``multitable`` (commit latency vs tables), ``requests``
(exact requests per feature), ``spark`` (bank transfers through Spark; skipped when unavailable),
``cold_connect`` (cold ``%lv connect`` to the first result in fresh kernels, the tree before issue 37 vs
this one; see :mod:`benchmarks.cold_connect`), ``tpcc`` (TPC-C, sequential and 16 clients per preset, with
TPC-C's consistency conditions checked after each run; see :mod:`benchmarks.tpcc`); opt-in
(``--profile full`` or ``--only tpcds,cab``, they
need the ``bench`` extra and take long): ``tpcds`` (TPC-DS reads, :mod:`benchmarks.tpcds`) and ``cab``
(CAB-style mixed streams on TPC-H, :mod:`benchmarks.cab`).
Every parameter of a run is recorded in its JSON; seeds are fixed. ``results/run.json`` records the newest
run and, per benchmark, the run that wrote its results (``--only`` rewrites only those), which RESULTS.md
names section by section.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, ClientPool, S3Server, environment, log, store_spec, write_json  # noqa: E402

BENCHMARKS = ("requests", "ycsb", "multitable", "spark", "cold_connect", "tpcc", "tpcds", "cab")
#: Not run unless named with --only or the profile is "full": they need the bench extra and take long.
OPT_IN = ("tpcds", "cab")

PROFILES: dict[str, dict[str, Any]] = {
    # Reduced for a 2-core machine shared with other work (see RESULTS.md).
    "default": {
        "stores": ["local-0ms", "local-20ms", "s3"],
        "ycsb": {
            "records": 1000, "ops": 120, "bundle": 0, "max_retries": 10, "timeout_s": 60, "max_seconds": 25,
            # grid 1 (paper Figure 8): every workload and client count, LV[R] vs delta vs delta-rs
            "concurrency": {"stores": ["local-0ms"], "workloads": ["A", "B", "C", "D", "F"], "clients": [1, 4, 8, 16],
                            "variants": [["delta-rs", "single"], ["delta", "single"], ["LV[R]", "single"],
                                         ["LV[R]", "bundled"]], "per_file": [1]},
            # grid 2 (paper Figure 9 and the presets): every system and mode, 8 clients
            "presets": {"workloads": ["A", "C"], "clients": [8], "per_file_by_store": {"local-0ms": [1, 100]},
                        "per_file": [1]},
        },
        "multitable": {"ks": [1, 2, 4, 8, 16, 32], "clients": 8, "txns": 2, "timeout_s": 30.0, "max_retries": 1,
                       "runs": [["R+CT", "local-20ms"], ["R+CT", "local-0ms"], ["R", "local-20ms"]]},
        "requests": {"ks": [1, 2, 4, 8]},
        "spark": {"rounds": 30, "warmup": 3},  # 10 swung the ratio by +-0.1 (notes/earlier_targets.md)
        "cold_connect": {"runs": 3},
        "tpcc": {"clients": [1, 16], "seconds": 45, "customers": 30, "items": 100, "latency_ms": 0.0},
        "tpcds": {"scale": 0.1, "reps": 3, "warmup": 1},
        "cab": {"scale": 0.1, "ops": 6, "rounds": 2},
    },
    # The paper's sizes: 1,000 operations per run, every combination.
    "full": {
        "stores": ["local-0ms", "local-20ms", "s3"],
        "ycsb": {
            "records": 1000, "ops": 1000, "bundle": 0, "max_retries": 10, "timeout_s": 120, "max_seconds": 600,
            "concurrency": {"stores": ["local-0ms", "local-20ms", "s3"], "workloads": ["A", "B", "C", "D", "F"],
                            "clients": [1, 4, 8, 16],
                            "variants": [["delta-rs", "single"], ["delta", "single"], ["LV[R]", "single"],
                                         ["LV[R]", "bundled"]], "per_file": [1, 100]},
            "presets": {"workloads": ["A", "B", "C", "D", "F"], "clients": [1, 4, 8, 16], "per_file": [1, 100]},
        },
        "multitable": {"ks": [1, 2, 4, 8, 16, 32], "clients": 8, "txns": 5,
                       "runs": [["R+CT", "local-20ms"], ["R+CT", "local-0ms"], ["R", "local-20ms"],
                                ["R+CT+I", "local-20ms"], ["delta", "local-20ms"], ["R+CT", "s3"]]},
        "requests": {"ks": [1, 2, 4, 8, 16, 32]},
        "spark": {"rounds": 30, "warmup": 3},
        "cold_connect": {"runs": 5},
        "tpcc": {"clients": [1, 16], "seconds": 300, "customers": 30, "items": 100, "latency_ms": 20.0},
        "tpcds": {"scale": 1.0, "reps": 3, "warmup": 1},
        "cab": {"scale": 1.0, "ops": 20, "rounds": 3},
    },
    # Tiny sizes: every code path once (tests/integration/test_bench_smoke.py).
    "smoke": {
        "stores": ["local-0ms", "s3"],
        "ycsb": {
            "records": 40, "ops": 6, "bundle": 0, "max_retries": 10, "timeout_s": 30, "max_seconds": 20,
            "concurrency": {"stores": ["local-0ms"], "workloads": ["A", "D", "F"], "clients": [1, 2],
                            "variants": [["delta-rs", "single"], ["LV[R]", "single"], ["LV[R]", "bundled"]],
                            "per_file": [1]},
            "presets": {"workloads": ["A"], "clients": [2], "per_file_by_store": {"local-0ms": [1, 10]},
                        "per_file": [1]},
        },
        "multitable": {"ks": [1, 2], "clients": 2, "txns": 1, "timeout_s": 20.0, "max_retries": 3,
                       "runs": [["R+CT", "local-0ms"], ["R+CT", "s3"]]},
        "requests": {"ks": [1, 2]},
        "spark": {"rounds": 1, "warmup": 0},
        "cold_connect": {"runs": 1},
        "tpcc": {"clients": [1, 2], "seconds": 5, "customers": 10, "items": 30, "latency_ms": 0.0,
                 "systems": ["delta", "serializable"]},
        "tpcds": {"scale": 0.01, "reps": 1, "warmup": 0, "queries": [3, 7]},
        "cab": {"scale": 0.01, "ops": 2, "rounds": 1, "readers": 1, "writers": 1},
    },
}


def ycsb_matrix(cfg: dict[str, Any], stores: list[str]) -> list[dict[str, Any]]:
    """The list of YCSB runs (deduplicated): grid 1 then grid 2."""
    from benchmarks.ycsb import SINGLE_ONLY, SYSTEMS

    runs: list[dict[str, Any]] = []
    seen: set[tuple] = set()

    def add(**r: Any) -> None:
        key = tuple(sorted((k, v) for k, v in r.items() if k != "grid"))
        if key not in seen and r["store"] in stores:
            seen.add(key)
            runs.append(r)

    c = cfg["concurrency"]
    for store in c["stores"]:
        for per_file in c["per_file"]:
            for wl in c["workloads"]:
                for clients in c["clients"]:
                    for system, mode in c["variants"]:
                        if system == "delta-rs" and store.startswith("local-") and store != "local-0ms":
                            continue  # delta-rs cannot be slowed down on a local folder: same as local-0ms
                        add(grid="concurrency", store=store, per_file=per_file, workload=wl, clients=clients,
                            system=system, mode=mode)
    p = cfg["presets"]
    for store in stores:
        for per_file in p.get("per_file_by_store", {}).get(store, p["per_file"]):
            for wl in p["workloads"]:
                for clients in p["clients"]:
                    for system in SYSTEMS:
                        if system == "delta-rs" and store.startswith("local-") and store != "local-0ms":
                            continue  # delta-rs cannot be slowed down on a local folder: same as local-0ms
                        for mode in (["single"] if system in SINGLE_ONLY else ["single", "bundled"]):
                            add(grid="presets", store=store, per_file=per_file, workload=wl, clients=clients,
                                system=system, mode=mode)
    return runs


def run_ycsb(cfg: dict[str, Any], stores: list[str], s3: S3Server | None, seed: int, workdir: str,
             out: Path) -> dict[str, Any]:
    from benchmarks.ycsb import YcsbRunner

    runs = ycsb_matrix(cfg, stores)
    params = {k: v for k, v in cfg.items() if k not in ("concurrency", "presets")} | {"seed": seed}
    pool = ClientPool(2)
    rows: list[dict[str, Any]] = []
    runners: dict[str, YcsbRunner] = {}
    t0 = time.monotonic()
    try:
        for i, r in enumerate(runs):
            if r["store"] not in runners:
                spec = store_spec(r["store"], s3)
                runners[r["store"]] = YcsbRunner(pool, spec, f"{workdir}/ycsb-{r['store']}", params,
                                                 s3 if spec.kind == "s3" else None)
            res = runners[r["store"]].run(system=r["system"], workload=r["workload"], clients=r["clients"],
                                          mode=r["mode"], per_file=r["per_file"])
            res["grid"] = r["grid"]
            rows.append(res)
            if "error" in res:
                log(f"ycsb {i + 1}/{len(runs)} {r}: ERROR {res['error'][:300]}")
                pool.close()
                pool = ClientPool(2)
                for rn in runners.values():
                    rn.pool = pool
            else:
                log(f"ycsb {i + 1}/{len(runs)} {r['store']} {r['workload']} c={r['clients']} "
                    f"{r['system']}/{r['mode']} per_file={r['per_file']}: {res['throughput_ops_s']} ops/s, "
                    f"aborts={res['aborts']} redos={res['redos']}")
            if (i + 1) % 10 == 0:  # partial results survive an interrupted run
                write_json(out / "ycsb.json", {"params": params, "matrix": cfg, "runs": rows, "partial": True})
    finally:
        for rn in runners.values():
            rn.close()
        pool.close()
    data = {"params": params, "matrix": {k: cfg[k] for k in ("concurrency", "presets")}, "runs": rows,
            "duration_s": round(time.monotonic() - t0, 1)}
    write_json(out / "ycsb.json", data)
    return data


def run_multitable(cfg: dict[str, Any], stores: list[str], s3: S3Server | None, workdir: str,
                   out: Path) -> dict[str, Any]:
    from benchmarks import multitable

    pool = ClientPool(cfg["clients"])
    rows = []
    t0 = time.monotonic()
    try:
        n = 0
        for system, store in cfg["runs"]:
            if store not in stores:
                continue
            spec = store_spec(store, s3)
            for k in cfg["ks"]:
                n += 1
                loc = f"{workdir}/mt-{n:03d}" if spec.kind == "local" else f"{Path(workdir).name}-mt-{n:03d}"
                r = multitable.run_one(pool, spec, loc, system=system, k=k, clients=cfg["clients"], txns=cfg["txns"],
                                       timeout_s=cfg.get("timeout_s", 120.0), max_retries=cfg.get("max_retries", 3))
                rows.append(r)
                if "error" in r:
                    log(f"multitable {system} {store} k={k}: ERROR {r['error'][:300]}")
                    pool.close()
                    pool = ClientPool(cfg["clients"])
                else:
                    log(f"multitable {system} {store} k={k}: commit p50 {r['commit_latency_ms']['p50']} ms, "
                        f"txn p50 {r['txn_latency_ms']['p50']} ms, {r['requests_per_txn']} requests/txn")
    finally:
        pool.close()
    data = {"params": cfg, "runs": rows, "ratios": multitable.ratios(rows),
            "duration_s": round(time.monotonic() - t0, 1)}
    write_json(out / "multitable.json", data)
    return data


def run_requests(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    from benchmarks import reqcount

    t0 = time.monotonic()
    data = reqcount.run(tuple(cfg["ks"]))
    data["targets"] = reqcount.targets(data)
    data["duration_s"] = round(time.monotonic() - t0, 1)
    write_json(out / "requests.json", data)
    log(f"requests: {len(data['systems'])} systems counted")
    return data


def run_spark(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    from benchmarks import spark_e2e

    t0 = time.monotonic()
    try:
        data = spark_e2e.run(rounds=cfg["rounds"], warmup=cfg["warmup"])
    except Exception as e:
        data = {"skipped": f"failed: {type(e).__name__}: {str(e)[:500]}"}
    data["duration_s"] = round(time.monotonic() - t0, 1)
    write_json(out / "spark.json", data)
    log(f"spark: {data.get('skipped') or data.get('target')}")
    return data


def run_cold_connect(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    from benchmarks import cold_connect

    t0 = time.monotonic()
    try:
        data = cold_connect.main(["--runs", str(cfg["runs"]), "--out", str(out / "cold_connect.json")])
    except Exception as e:  # no git history or no kernel: say so in the report, go on
        data = {"skipped": f"failed: {type(e).__name__}: {str(e)[:500]}"}
        write_json(out / "cold_connect.json", data)
    log(f"cold_connect: {data.get('skipped') or data.get('summary')} in {time.monotonic() - t0:.0f} s")
    return data


def run_tpcc(cfg: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    from benchmarks import tpcc
    from benchmarks.tpcc_report import plot

    data = tpcc.run(systems=cfg.get("systems", list(tpcc.SYSTEMS)), clients=cfg["clients"], seconds=cfg["seconds"],
                    customers=cfg["customers"], items=cfg["items"], latency_ms=cfg["latency_ms"], seed=seed)
    write_json(out / "tpcc.json", data)
    plot(data, out / "tpcc.png")
    log(f"tpcc: {len(data['runs'])} runs in {data['duration_s']} s")
def run_workload(name: str, cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    """``tpcds`` or ``cab`` (their own modules' ``run``), skipped with the reason when the bench extra is
    missing."""
    import importlib

    mod = importlib.import_module(f"benchmarks.{name}")
    t0 = time.monotonic()
    kw = dict(cfg)
    if "queries" in kw:
        kw["queries"] = tuple(kw["queries"])
    try:
        data = mod.run(**kw)
    except Exception as e:
        data = {"skipped": f"failed: {type(e).__name__}: {str(e)[:500]}"}
    finally:  # each workload starts its own embedded Spark server, with its own settings (driver memory)
        from lv_core.engine.session import stop_spark

        stop_spark()
    data["duration_s"] = round(time.monotonic() - t0, 1)
    write_json(out / f"{name}.json", data)
    if data.get("complete") or data.get("samples"):
        mod.plot(data, out / f"{name}.png")
    log(f"{name}: {data.get('skipped') or 'done'} in {data['duration_s']} s")
    return data


def merge_run_meta(prev: dict[str, Any] | None, meta: dict[str, Any]) -> dict[str, Any]:
    """``run.json`` after a run: ``meta`` (the newest run) plus ``by_benchmark``, for every benchmark whose
    results are in the folder, the run that wrote them. A ``--only`` run rewrites only its benchmarks'
    files, so the others keep the record of the run that wrote theirs (a ``run.json`` older than
    ``by_benchmark`` is itself that record for the benchmarks it lists)."""
    by: dict[str, dict[str, Any]] = {}
    if prev:
        own = {k: v for k, v in prev.items() if k != "by_benchmark"}
        by = dict(prev.get("by_benchmark") or {b: own for b in prev.get("benchmarks", [])})
    this = {k: v for k, v in meta.items() if k != "by_benchmark"}
    by.update({b: this for b in meta["benchmarks"]})
    return {**this, "by_benchmark": by}


def git_commit() -> str | None:
    """The commit of the tree the benchmarks run from, with ``+dirty`` when it has uncommitted changes
    outside the results and notes (None: not a git checkout)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":!benchmarks/results", ":!benchmarks/RESULTS.md", ":!benchmarks/notes"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="default")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(BENCHMARKS)} (default: all "
                                                 f"but {', '.join(OPT_IN)}, which only --profile full adds)")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark end-to-end benchmark")
    ap.add_argument("--stores", default=None,
                    help="comma-separated: local-0ms, local-20ms, s3 (default: the profile's)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (JSON + PNG)")
    ap.add_argument("--report", default=None, help="RESULTS.md to write (default: benchmarks/RESULTS.md when --out is "
                                                   "the default folder, else <out>/RESULTS.md)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workdir", default=None, help="scratch folder for warehouses (default: a temporary folder)")
    ap.add_argument("--report-only", action="store_true", help="regenerate RESULTS.md and plots from existing JSON")
    args = ap.parse_args(argv)

    prof = PROFILES[args.profile]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = Path(args.report) if args.report else (
        ROOT / "benchmarks" / "RESULTS.md" if out.resolve() == RESULTS.resolve() else out / "RESULTS.md")
    default = [b for b in BENCHMARKS if b not in OPT_IN or args.profile == "full"]
    only = [b.strip() for b in args.only.split(",") if b.strip()] if args.only else default
    bad = set(only) - set(BENCHMARKS)
    if bad:
        ap.error(f"unknown benchmark(s) {', '.join(sorted(bad))}")
    if args.no_spark and "spark" in only:
        only.remove("spark")
    stores = args.stores.split(",") if args.stores else list(prof["stores"])

    from benchmarks import report as rep

    if args.report_only:
        rep.write_report(out, report)
        return 0
    t0 = time.monotonic()
    meta = {"profile": args.profile, "benchmarks": only, "stores": stores, "seed": args.seed,
            "environment": environment(), "commit": git_commit(), "argv": sys.argv[1:] if argv is None else argv}
    s3 = None
    needs_s3 = "s3" in stores and ({"ycsb", "multitable"} & set(only))
    workdir = args.workdir or tempfile.mkdtemp(prefix="lv-bench-")
    try:
        if needs_s3:
            s3 = S3Server()
            log(f"S3 test server (moto, serialised) at {s3.endpoint}, bucket {s3.bucket}")
        if "requests" in only:
            run_requests(prof["requests"], out)
        if "multitable" in only:
            run_multitable(prof["multitable"], stores, s3, workdir, out)
        if "ycsb" in only:
            run_ycsb(prof["ycsb"], stores, s3, args.seed, workdir, out)
        if "spark" in only:
            run_spark(prof["spark"], out)
        if "cold_connect" in only:
            run_cold_connect(prof["cold_connect"], out)
        if "tpcc" in only:
            run_tpcc(prof["tpcc"], args.seed, out)
        for name in OPT_IN:
            if name in only:
                run_workload(name, prof[name], out)
    finally:
        if s3 is not None:
            s3.stop()
        if not args.workdir:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    meta["duration_s"] = round(time.monotonic() - t0, 1)
    meta["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prev = out / "run.json"
    write_json(prev, merge_run_meta(json.loads(prev.read_text()) if prev.exists() else None, meta))
    rep.write_report(out, report)
    log(f"done in {meta['duration_s']} s: {out} and {report}")
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the S3 server and clients
    sys.exit(main())
