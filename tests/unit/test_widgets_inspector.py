"""Lakehouse inspector: the scan (markers, leases, global DAG, global version log, stuck transactions),
its static rendering, and the widget's Refresh / Recover buttons."""

from __future__ import annotations

import time

import pytest

import lv_core
from lv_core.protocol.lease import keeper
from lv_core.protocol.markers import read_version
from tests.helpers.bank import add_kv, make_kv
from widgets.lakehouse_scan import LiveMarker, cycle_edges, global_edges, redact_url, scan_lakehouse
from widgets.render_inspector import inspector_html, inspector_text

ipywidgets = pytest.importorskip("ipywidgets")

from widgets.inspector import LakehouseInspector, inspect_lakehouse  # noqa: E402


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    make_kv(lh, "bank_x", {1: 1000.0, 2: 1000.0})
    make_kv(lh, "bank_y", {3: 1000.0, 4: 1000.0})
    return lh


def _interleave(lh):
    t1 = lh.begin("repeatable_read", name="T1", timeout_s=20)
    t2 = lh.begin("repeatable_read", name="T2", timeout_s=20)
    add_kv(t1, "bank_x", 1, -50)
    add_kv(t2, "bank_y", 3, -70)
    add_kv(t2, "bank_x", 1, +70)  # behind T1 in bank_x
    return t1, t2


def test_pure_cycle_detection():
    assert cycle_edges([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == {("a", "b"), ("b", "c"), ("c", "a")}
    assert cycle_edges([("a", "b"), ("b", "c")]) == set()
    assert cycle_edges([("a", "a")]) == {("a", "a")}
    ms = [LiveMarker("x", 3, "T1", predecessors=(("T2", "y", 3),)),
          LiveMarker("y", 3, "T2", predecessors=(("T1", "x", 3), ("T9", "x", 1)))]
    edges, stale = global_edges(ms)
    assert [(e.src, e.dst, e.label, e.cycle) for e in edges] == [("T1", "T2", "y@3", True), ("T2", "T1", "x@3", True)]
    assert stale == 1  # T9's marker x@1 is not pending any more
    assert redact_url("s3://KEY:SECRET@bucket/wh?token=abc") == "s3://***@bucket/wh"


def test_scan_shows_tables_live_markers_and_the_global_dag(lh):
    t1, t2 = _interleave(lh)
    scan = scan_lakehouse(lh)
    assert {t.name: (t.version, t.checkpoint, t.markers) for t in scan.tables} == {
        "bank_x": (4, None, 2), "bank_y": (3, None, 1)}
    got = {(m.table, m.version): (m.txn, m.state) for m in scan.markers}
    x1 = t1.marker_versions()["bank_x"]
    assert got == {("bank_x", x1): (t1.id, "live"), ("bank_x", x1 + 1): (t2.id, "live"),
                   ("bank_y", t2.marker_versions()["bank_y"]): (t2.id, "live")}
    m = next(m for m in scan.markers if m.txn == t1.id)
    assert 0 <= m.lease_age(scan.at) < 10 and 0 < m.expires_in(scan.at) <= 10 and m.client
    assert [(e.src, e.dst, e.label, e.cycle) for e in scan.edges] == [(t2.id, t1.id, f"bank_x@{x1}", False)]
    assert scan.owners == [t1.id, t2.id] and scan.stuck == [] and not scan.errors
    assert scan.gvl.status in ("absent", "empty") and not scan.gvl.in_use
    names = {t1.id: "T1", t2.id: "T2"}
    html = inspector_html(scan, names)
    assert f'data-table="bank_x" data-version="{x1}" data-txn="{t1.id}" data-state="live"' in html
    assert "lv-global-dag" in html and f">bank_x@{x1}<" in html and 'data-edges="1"' in html
    assert "not in use" in html
    text = inspector_text(scan, names)
    assert f"edge T2 -> T1 at bank_x@{x1}" in text
    t2.rollback()
    t1.rollback()


def test_widget_constructor_does_no_io(comms):
    class NoStore:
        url = "file:///nowhere"

        def __getattr__(self, name):
            raise AssertionError(f"I/O in the constructor: {name}")

    class FakeLh:
        url = "file:///nowhere"
        store = NoStore()

        def list_tables(self):
            raise AssertionError("I/O in the constructor: list_tables")

    w = LakehouseInspector(FakeLh())
    parts = {c: p for p in w.children for c in p._dom_classes}
    assert 'data-scanned="false"' in parts["lv-summary"].value
    assert "lv-inspector" in w._dom_classes and "lv-toolbar" in parts
    w.close()


def test_refresh_button_and_static_bundle(lh, comms):
    t1, t2 = _interleave(lh)
    w = inspect_lakehouse(lh)
    parts = {c: p for p in w.children for c in p._dom_classes}
    assert parts["lv-live-markers"].value.count('class="lv-live-marker"') == 3
    assert 'data-edges="1"' in parts["lv-global-dag"].value
    fut = t2.commit_async()
    t1.commit()
    fut.result(timeout=30)
    w.refresh_button.click()  # what a click in the page does
    assert "no pending markers" in parts["lv-live-markers"].value
    assert "no transactions hold markers" in parts["lv-global-dag"].value
    data = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert '<div class="lv-inspector lv-static">' in data["text/html"]
    assert data["text/plain"].startswith("Lakehouse file://")
    w.close()


def test_expired_transaction_is_stuck_and_recover_frees_it(tmp_path, comms):
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=0.3)
    make_kv(lh, "kv", {1: 1.0})
    dead = lh.begin("repeatable_read", name="crashed", timeout_s=5)
    add_kv(dead, "kv", 1, 1)
    v = dead.marker_versions()["kv"]
    keeper().pause(dead.id)  # the client hangs: nobody renews its lease
    time.sleep(0.5)
    w = inspect_lakehouse(lh)
    scan = w.scan
    assert [(m.table, m.version, m.state) for m in scan.markers] == [("kv", v, "expired")]
    assert [(s.txn, s.markers) for s in scan.stuck] == [(dead.id, [("kv", v)])]
    assert "recover frees them" in scan.stuck[0].why and scan.stuck[0].expired_for_s > 0
    parts = {c: p for p in w.children for c in p._dom_classes}
    assert f'data-txn="{dead.id}"' in parts["lv-stuck"].value
    assert w.recover_button.button_style == "warning"
    w.recover_button.click()
    assert w.last_recovery is not None and w.last_recovery.freed == [("kv", v, dead.id)]
    assert 'data-freed="1"' in w.recover_result.value and "freed 1 expired marker(s)" in w.recover_result.value
    assert read_version(lh.store, "kv", v).kind == "freed"
    assert w.scan.markers == [] and "no pending markers" in parts["lv-live-markers"].value
    w.close()


def test_global_version_log_head_and_history(lh, comms):
    gvl = pytest.importorskip("lv_core.protocol.gvl")
    log = gvl.GlobalLog(lh.store)
    s0 = log.publish(gvl.EMPTY, {"bank_x": 2, "bank_y": 2}, "20250101T000000-aaaaaaaaaaaaaaaa")
    s1 = log.publish(s0, {"bank_x": 3}, "20250101T000000-bbbbbbbbbbbbbbbb")
    scan = scan_lakehouse(lh)
    assert scan.gvl.in_use and scan.gvl.head == s1.version == 1
    assert scan.gvl.tables == {"bank_x": 3, "bank_y": 2}
    assert [h["version"] for h in scan.gvl.history] == [0]
    html = inspector_html(scan)
    assert 'data-status="in use" data-head="1"' in html and "bank_x@3, bank_y@2" in html
    assert 'class="lv-gvl-row" data-version="0"' in html
