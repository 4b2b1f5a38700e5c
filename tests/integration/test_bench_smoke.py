"""Smoke tests of benchmarks/: every benchmark runs with tiny sizes and writes its results and report.

They check that the benchmarks still run against the current code (not the numbers). The local tier
runs the request counts, YCSB (every system, both modes, inserts and read-modify-writes) and the
multi-table benchmark on a local folder in well under a minute; the S3 tier runs YCSB and multi-table
on the moto S3 test server; the Spark tier runs the bank transfers once per preset.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _run(out: Path, *args: str) -> None:
    from benchmarks import run

    assert run.main(["--profile", "smoke", "--out", str(out), *args]) == 0


def test_local_benchmarks_run_and_report(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _run(out, "--only", "requests,ycsb,multitable", "--stores", "local-0ms")
    ycsb = json.loads((out / "ycsb.json").read_text())
    errors = [r for r in ycsb["runs"] if "error" in r]
    assert not errors, errors[:2]
    systems = {(r["system"], r["mode"]) for r in ycsb["runs"]}
    assert {("delta-rs", "single"), ("delta", "single"), ("LV[R]", "bundled"), ("serializable", "single")} <= systems
    assert all(r["ops_done"] > 0 for r in ycsb["runs"])
    assert all(r["client_requests_per_op"] > 0 for r in ycsb["runs"] if r["system"] != "delta-rs")
    assert {r["workload"] for r in ycsb["runs"]} >= {"A", "D", "F"}

    req = json.loads((out / "requests.json").read_text())
    assert req["targets"]["read-only LV[I] transactions make 0 LIST"]["met"]
    assert req["systems"]["delta"]["read"]["writes"] == 0  # the baseline writes nothing to read

    mt = json.loads((out / "multitable.json").read_text())
    assert [r["k"] for r in mt["runs"]] == [1, 2]
    assert all("error" not in r and r["committed"] >= 1 for r in mt["runs"]), mt["runs"]

    report = (out / "RESULTS.md").read_text()
    for section in ("## Targets", "Figure 14", "Figure 10", "YCSB-LH"):
        assert section in report
    assert (out / "requests.png").exists() and (out / "multitable.png").exists()


@pytest.mark.s3
def test_s3_benchmarks_count_requests_on_the_server(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _run(out, "--only", "ycsb,multitable", "--stores", "s3")
    ycsb = json.loads((out / "ycsb.json").read_text())
    assert ycsb["runs"] and not [r for r in ycsb["runs"] if "error" in r]
    by_system = {r["system"]: r for r in ycsb["runs"]}
    assert by_system["delta-rs"]["server_requests_per_op"] > 0  # delta-rs is counted by the server
    lv = by_system["LV[R]"]
    assert lv["server_requests_per_op"] >= lv["client_requests_per_op"] > 0
    mt = json.loads((out / "multitable.json").read_text())
    assert all("error" not in r and r["committed"] >= 1 for r in mt["runs"]), mt["runs"]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_bank_transfer_benchmark(tmp_path: Path) -> None:
    from benchmarks import spark_e2e

    ok, why = spark_e2e.available()
    if not ok:
        pytest.skip(why)
    res = spark_e2e.run(rounds=1, warmup=0, accounts=10, per_file=5)
    if res.get("skipped"):
        pytest.skip(res["skipped"])
    assert set(res["presets"]) == set(spark_e2e.PRESETS)
    assert all(v["n"] == 1 for v in res["presets"].values()), res


def test_logscan_benchmark_before_and_after(tmp_path: Path) -> None:
    """benchmarks/logscan.py with 50 commits: this tree finds the latest version in O(1) requests."""
    from benchmarks import logscan

    logscan.main(["--commits", "50", "--latency-ms", "0", "--base", str(ROOT), "--out", str(tmp_path)])
    res = json.loads((tmp_path / "logscan.json").read_text())
    assert res["after"]["probe_behind_all"]["total"] == 2 and res["after"]["probe_cold"]["total"] == 3
    assert (tmp_path / "logscan.png").stat().st_size > 0


@pytest.mark.spark
@pytest.mark.s3
@pytest.mark.slow
def test_scale_benchmark_runs_on_both_paths(tmp_path: Path) -> None:
    from benchmarks import scale

    scale.main(["--rows", "2000", "--files", "2", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "scale.json").read_text())
    assert res["stores"]["local"]["data_path"] == "direct" and res["stores"]["s3"]["data_path"] == "stream"
    assert set(res["ratios"]["s3 stream / local direct"]) == set(scale.OPS)


@pytest.mark.slow
def test_tpcc_benchmark_runs_and_reports(tmp_path: Path) -> None:
    """benchmarks/tpcc.py through run.py (smoke profile: 2 clients, 5 s per run): every run checked and reported."""
    out = tmp_path / "results"
    _run(out, "--only", "tpcc")
    data = json.loads((out / "tpcc.json").read_text())
    assert [(r["system"], r["clients"]) for r in data["runs"]] == [("delta", 1), ("delta", 2), ("serializable", 1),
                                                                  ("serializable", 2)]
    assert not [r for r in data["runs"] if "error" in r]
    assert all(r["committed"] > 0 and set(r["conditions"]) >= {"1", "2", "3", "4"} for r in data["runs"])
    assert [r["conditions_failed"] for r in data["runs"] if r["system"] == "serializable"] == [[], []]
    assert (out / "tpcc.png").stat().st_size > 0
    assert "## TPC-C (paper section 6.5, Table 4)" in (out / "RESULTS.md").read_text()
