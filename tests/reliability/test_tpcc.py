"""TPC-C under concurrency (paper section 6.5, Table 4): 8 client processes run all five transaction
types on one warehouse for a short while (benchmarks/tpcc.py, operations API, local folder store),
then TPC-C's consistency conditions are checked on the tables as delta-rs reads them.

``serializable`` must keep every condition and never leave half of an aborted transaction behind;
the same workload under ``delta`` (every statement commits on its own) must break at least one,
which shows that the check can fail.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.slow

CLIENTS = 8
SECONDS = 20.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    from benchmarks.tpcc import run

    data = run(systems=["serializable", "delta"], clients=[CLIENTS], seconds=SECONDS, timeout_s=60.0,
               workdir=str(tmp_path_factory.mktemp("tpcc")))
    return {r["system"]: r for r in data["runs"]}


def test_serializable_keeps_tpcc_consistency_conditions(runs: dict[str, dict[str, Any]]) -> None:
    r = runs["serializable"]
    assert "error" not in r, r.get("error")
    assert r["committed"] > 0, r["per_type"]
    assert r["per_type"]["new_order"]["committed"] + r["per_type"]["payment"]["committed"] > 0
    assert r["conditions_failed"] == [], {c: v["example"] for c, v in r["conditions"].items() if not v["ok"]}
    assert sum(p["partial"] for p in r["per_type"].values()) == 0, r["per_type"]


def test_delta_violates_tpcc_consistency_conditions(runs: dict[str, dict[str, Any]]) -> None:
    r = runs["delta"]
    assert "error" not in r, r.get("error")
    assert r["committed"] > 0
    assert r["conditions_failed"], "plain Delta kept every condition: the check or the workload is too weak"
