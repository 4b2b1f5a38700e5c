"""``run.py --only`` rewrites only its benchmarks' results, so ``run.json`` must keep, per benchmark, the
run that wrote each file: RESULTS.md labels every section and earlier target with it (it used to label
all of them with the newest run, whatever it ran)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report_sections import bench_runs, run_label  # noqa: E402
from benchmarks.run import merge_run_meta  # noqa: E402

OLD = {"profile": "default", "benchmarks": ["requests", "ycsb", "multitable", "spark"], "seed": 42,
       "finished_utc": "2026-11-21T14:50:53Z", "argv": []}
NEW = {"profile": "default", "benchmarks": ["requests", "multitable", "spark"], "seed": 42,
       "finished_utc": "2026-11-27T15:17:34Z", "argv": ["--only", "requests,multitable,spark"], "commit": "abc+dirty"}


def test_only_run_keeps_the_earlier_run_of_the_benchmarks_it_did_not_run() -> None:
    merged = merge_run_meta(OLD, NEW)
    by = bench_runs(merged)
    assert by["ycsb"]["finished_utc"] == "2026-11-21T14:50:53Z"
    assert {b: by[b]["finished_utc"] for b in NEW["benchmarks"]} == dict.fromkeys(NEW["benchmarks"],
                                                                                   NEW["finished_utc"])
    assert merged["finished_utc"] == NEW["finished_utc"]  # the top level is the newest run
    # a later run again keeps what it did not rewrite, and records nest no deeper
    later = {**NEW, "benchmarks": ["spark"], "finished_utc": "2026-11-28T00:00:00Z"}
    by2 = bench_runs(merge_run_meta(merged, later))
    assert by2["ycsb"] == by["ycsb"] and by2["requests"] == by["requests"]
    assert by2["spark"]["finished_utc"] == "2026-11-28T00:00:00Z"
    assert all("by_benchmark" not in r for r in by2.values())


def test_run_label_names_the_run() -> None:
    label = run_label(bench_runs(merge_run_meta(OLD, NEW))["ycsb"])
    assert "2026-11-21T14:50:53Z" in label and "`python benchmarks/run.py`" in label
    assert "--only requests,multitable,spark" in run_label(NEW) and "`abc+dirty`" in run_label(NEW)
    assert run_label(None).startswith("Run: not recorded")
