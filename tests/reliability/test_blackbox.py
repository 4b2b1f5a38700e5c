"""Black-box isolation checking (issue 34): an Elle-style list-append workload run by client processes,
judged only from what the transactions read and appended (``lv_core.blackbox``), never from a version
the system reports; the final lists are read with ``deltalake``.

First the checker is shown to see anomalies: the ``delta`` baseline exhibits cycles and ``snapshot``
write skew (G2-item). Then every LakeVilla preset runs on tables new to the global version log (each
transaction of a client moves to tables nobody used yet) and on tables it knows, and with faults:
clients paused (SIGSTOP) past their lease, SIGKILLed and restarted, one client's clock skewed, store
faults and lost responses. ``serializable``, ``write_serializable`` and ``repeatable_read`` must show no
anomaly of any kind, ``snapshot`` nothing but write skew. A failure prints the run (seed, faults) and
the witness cycle with every transaction's operations.

``make test`` runs a short run of each; the slow tier runs every preset under every fault schedule.
"""

from __future__ import annotations

import pytest

from lv_core.blackbox.runner import Faults, RunResult, run
from lv_core.blackbox.workload import Spec

pytestmark = pytest.mark.timeout(900)

CYCLES = {"G0", "G1c", "G-single", "G2-item"}
SHORT = {"txns": 12, "tables": 2, "keys": 2, "latency_s": 0.005, "lease_s": 5.0}
#: every transaction of a client on tables nobody used before it (new to the global version log)
FRESH = {"txns": 12, "tables": 2, "keys": 1, "generations": 12, "latency_s": 0.01, "lease_s": 5.0}
LAKEVILLA = ["serializable", "write_serializable", "repeatable_read", "snapshot"]


def _run(tmp_path, preset: str, *, fresh: bool = True, faults: Faults | None = None, clients: int = 3,
         **spec) -> RunResult:
    r = run(str(tmp_path / "wh"), Spec(preset=preset, **spec), tmp_path / "work", clients=clients,
            faults=faults or Faults(), fresh=fresh)
    print(r.summary(), f"{r.seconds:.1f}s", dict(r.stats["abort_rules"]))
    assert not r.crashes, "a client died of an error:\n" + "\n".join(r.crashes)
    return r


def _assert_clean(r: RunResult) -> None:
    bad = r.violations()
    assert not bad, f"{r.summary()}\nevents: {r.events}\n{r.report.explain(1)}"
    assert r.stats["committed"] > 0


def test_the_checker_sees_the_delta_baselines_anomalies(tmp_path):
    """Plain Delta (each statement commits on its own) shows dependency cycles: the checker can see them."""
    for seed in (1, 2, 3):
        r = _run(tmp_path / str(seed), "delta", seed=seed, **{**SHORT, "read_share": 0.6})
        if r.report.kinds & CYCLES:
            print(r.report.explain(1))
            return
    pytest.fail("three delta runs showed no dependency cycle: the checker (or the workload) cannot see anomalies")


def test_snapshot_shows_write_skew_and_nothing_else(tmp_path):
    """Snapshot isolation allows write skew (G2-item) and nothing else: the checker finds it, and only it."""
    found = False
    for seed in (1, 2, 3, 4):
        r = _run(tmp_path / str(seed), "snapshot", fresh=False, clients=4, seed=seed, **{**SHORT, "keys": 1})
        _assert_clean(r)  # nothing snapshot isolation forbids
        if "G2-item" in r.report.kinds:
            found = True
            print(r.report.explain(1))
            break
    assert found, "four snapshot runs showed no write skew: the workload cannot provoke it"


@pytest.mark.parametrize("preset", LAKEVILLA)
def test_no_anomaly_on_tables_new_to_the_global_log(tmp_path, preset):
    """Issue 34, violation 1 as a workload: transactions that meet tables right after CREATE TABLE."""
    _assert_clean(_run(tmp_path, preset, clients=4, **FRESH))


@pytest.mark.parametrize("preset", LAKEVILLA)
def test_no_anomaly_on_tables_the_global_log_knows(tmp_path, preset):
    _assert_clean(_run(tmp_path, preset, fresh=False, **SHORT))


@pytest.mark.parametrize("preset", ["repeatable_read", "serializable"])
def test_no_anomaly_with_clients_paused_past_their_lease(tmp_path, preset):
    """Issue 34, violation 2 as a workload: clients stopped (SIGSTOP) for 2.5 leases while holding markers."""
    faults = Faults(pause=True, interval_s=1.0, seed=3)
    _assert_clean(_run(tmp_path, preset, faults=faults, clients=4, seed=3,
                       **{**SHORT, "txns": 24, "keys": 1, "lease_s": 1.0, "latency_s": 0.01}))


def test_no_anomaly_with_clients_killed_and_restarted(tmp_path):
    faults = Faults(kill=True, interval_s=1.5)
    r = _run(tmp_path, "serializable", faults=faults, **{**SHORT, "txns": 24, "lease_s": 1.0})
    _assert_clean(r)
    assert any("SIGKILL" in e for e in r.events)


# ------------------------------------------------------------------------------------------ slow tier
SCHEDULES = {
    "none": (Faults(), {}),
    "pause": (Faults(pause=True, interval_s=1.0), {"lease_s": 1.0}),
    "kill": (Faults(kill=True, interval_s=2.0), {"lease_s": 1.0}),
    "skew": (Faults(skew_s=60.0), {}),
    "store-faults": (Faults(), {"fault_rate": 0.01}),
    "lost-responses": (Faults(), {"lost_response_rate": 0.01}),
    "everything": (Faults(pause=True, kill=True, skew_s=-30.0, interval_s=1.5),
                   {"lease_s": 1.0, "fault_rate": 0.005, "lost_response_rate": 0.005}),
}


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "known"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("preset", LAKEVILLA)
def test_long_runs_under_every_fault_schedule(tmp_path, preset, schedule, fresh):
    faults, extra = SCHEDULES[schedule]
    spec = {**(FRESH if fresh else SHORT), "txns": 30, **extra}
    if fresh:
        spec["generations"] = 30
    _assert_clean(_run(tmp_path, preset, fresh=fresh, faults=faults, clients=4, **spec))


@pytest.mark.s3
def test_no_anomaly_on_s3_with_killed_and_paused_clients(tmp_path, s3_bucket, s3_options):
    """The S3 tier's crash/recovery run (moto and SeaweedFS): clients SIGKILLed and restarted, and paused
    past their lease, on tables new to the global log; `lv recover` and a deltalake read at the end."""
    faults = Faults(kill=True, pause=True, interval_s=2.0, seed=2)
    r = run(f"s3://{s3_bucket}/wh", Spec(preset="serializable", txns=12, tables=2, keys=1, generations=4,
                                         lease_s=1.5, seed=2), tmp_path / "work", clients=3, faults=faults,
            storage_options=s3_options)
    print(r.summary(), f"{r.seconds:.1f}s", dict(r.stats["abort_rules"]))
    assert not r.crashes, "\n".join(r.crashes)
    _assert_clean(r)
