"""``lv doctor --isolation`` / ``%lv selftest``: the black-box self-test on a local folder (client
processes), its text and HTML reports, and a found cycle drawn with Graphviz."""

from __future__ import annotations

import pytest

from lv_core.blackbox import MicroOp, Outcome, Txn, check
from lv_core.cli import main as lv
from lv_core.doctor.selftest import _svg, selftest


# The self-test removes its scratch tables (their logs included) when it is done: exempt from the
# log-immutability watcher, which would see those logs disappear.
@pytest.mark.plants_log_files
def test_lv_doctor_isolation_on_a_local_folder(tmp_path, capsys):
    assert lv(["doctor", str(tmp_path / "wh"), "--isolation", "--clients", "2", "--txns", "4"]) == 0
    out = capsys.readouterr().out
    for preset in ("serializable", "snapshot", "write_serializable", "repeatable_read"):
        assert f"PASS  {preset}" in out
    assert "every preset kept its promise" in out
    leftovers = [p for p in (tmp_path / "wh").rglob("*") if p.is_file()]
    assert leftovers == []  # the scratch warehouse is removed


@pytest.mark.plants_log_files
def test_selftest_report_as_html(tmp_path):
    rep = selftest(str(tmp_path / "wh"), presets=("serializable",), clients=2, txns=4)
    assert rep.ok and "<table>" in rep.to_html() and "serializable" in rep.to_html()


def test_a_cycle_is_drawn():
    """Write skew (G2-item) between two transactions, drawn as SVG by Graphviz (installed by make)."""
    t1 = Txn("T1", 1, (MicroOp.read("x", ()), MicroOp.append("y", 1)), Outcome.OK)
    t2 = Txn("T2", 2, (MicroOp.read("y", ()), MicroOp.append("x", 2)), Outcome.OK)
    report = check([t1, t2], {"x": (2,), "y": (1,)})
    anomaly = report.anomalies["G2-item"][0]
    svg = _svg(report.cycle_dot(anomaly))
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg
    assert "T1" in svg and "T2" in svg
