"""Lakehouse inspector: the scan (markers, leases, global DAG, global version log, stuck transactions),
its static rendering, and the widget's Refresh / Recover buttons."""

from __future__ import annotations

import time

import pytest

import lv_core
from lv_core.protocol.layout import short_id
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
    assert f"edge T2 ({short_id(t2.id)}) -> T1 ({short_id(t1.id)}) at bank_x@{x1}" in text
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


# ------------------------------------------------------------------ live, saved copy, names (issue 37)
def _wait_for(cond, timeout_s: float = 20.0) -> bool:
    """Wait until ``cond()`` holds (the inspector's background thread has no event to await)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def test_live_policy_backs_off_while_nothing_changes():
    from widgets.inspector import LivePolicy

    p = LivePolicy(interval_s=5, idle_interval_s=30, min_gap_s=1)
    pauses = [5.0]
    for _ in range(4):
        pauses.append(p.next_pause(pauses[-1], changed=False))
    assert pauses == [5, 10, 20, 30, 30]
    assert p.next_pause(30, changed=True) == 5


def test_txn_label_names_and_full_id_on_hover():
    from widgets.render_inspector import txn_label, txn_ref

    tid = "20260101T000000-0123456789abcdef"
    assert txn_label(tid) == short_id(tid) == "01234567"
    assert txn_label(tid, {tid: "transfer"}) == "transfer (01234567)"
    ref = txn_ref(tid, {tid: "a<b"})
    assert f'title="{tid}"' in ref and "a&lt;b (01234567)" in ref
    assert txn_ref(None) == "–"


def test_global_log_rows_show_names_and_short_ids(lh):
    gvl = pytest.importorskip("lv_core.protocol.gvl")
    a, b = "20250101T000000-aaaaaaaaaaaaaaaa", "20250101T000000-bbbbbbbbbbbbbbbb"
    log = gvl.GlobalLog(lh.store)
    s0 = log.publish(gvl.EMPTY, {"bank_x": 2}, a)
    log.publish(s0, {"bank_x": 3}, b)
    scan = scan_lakehouse(lh)
    html = inspector_html(scan, {a: "first"})
    assert f'title="{a}" data-txn="{a}">first (aaaaaaaa)</span>' in html  # the history row, named
    assert f'title="{b}" data-txn="{b}">bbbbbbbb</span>' in html  # the head, unnamed: short id
    assert a not in inspector_text(scan, {a: "first"}).replace(f'"{a}"', "")  # text: never the full id
    assert "global version 0 by first (aaaaaaaa)" in inspector_text(scan, {a: "first"})


def test_names_other_clients_recorded_are_used(lh):
    """Where a marker carries its owner's name (``LiveMarker.name``), the inspector shows it."""
    import dataclasses

    t = lh.begin("repeatable_read", timeout_s=20)
    add_kv(t, "bank_x", 1, 1)
    scan = scan_lakehouse(lh)
    if "name" not in {f.name for f in dataclasses.fields(LiveMarker)}:  # markers without names (yet)
        scan.markers = [dataclasses.replace(m) for m in scan.markers]
        for m in scan.markers:
            object.__setattr__(m, "name", "other-kernel")
        scan.names = {m.txn: "other-kernel" for m in scan.markers}
    else:
        scan.names = scan.names or {t.id: "other-kernel"}
    html = inspector_html(scan)
    assert f"{scan.names[t.id]} ({short_id(t.id)})" in html
    t.rollback()


def test_fingerprint_ignores_clocks_and_sees_commits(lh):
    a = scan_lakehouse(lh)
    b = scan_lakehouse(lh, now=time.time() + 5)
    assert a.fingerprint() == b.fingerprint()  # nothing happened
    txn = lh.begin("repeatable_read", timeout_s=20)
    add_kv(txn, "bank_x", 1, 1)
    c = scan_lakehouse(lh)
    assert c.fingerprint() != b.fingerprint()  # a marker
    txn.commit()
    assert scan_lakehouse(lh).fingerprint() not in (b.fingerprint(), c.fingerprint())  # a new version


def test_requests_per_refresh(tmp_path):
    """What one rescan costs, on 2 tables with 2 versions each (no checkpoint, no global version log):
    13 requests, 11 GETs and 2 LISTs (the warehouse, the transaction folders)."""
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.storage.local import LocalStore

    writer = lv_core.connect(str(tmp_path / "wh"))
    make_kv(writer, "bank_x", {1: 1.0})
    make_kv(writer, "bank_y", {3: 1.0})
    store = InstrumentedStore(LocalStore(tmp_path / "wh"))
    reader = lv_core.Lakehouse(store)
    scan_lakehouse(reader)
    store.reset()
    scan_lakehouse(reader)
    counts = {k: v for k, v in store.counts().items() if v}
    total = store.total()
    assert counts == {"GET": 11, "LIST": 2}, counts  # an idle notebook at the default 30 s: 26 a minute
    print(f"requests per inspector refresh (2 tables x 2 versions): {total} {counts}")


def test_displayed_inspector_updates_itself_and_keeps_a_saved_copy(lh, comms, monkeypatch):
    """Displayed: two outputs (widget view, static copy with display id); another client's commit
    shows without Refresh; the copy is sent again when the lakehouse changed, not for clocks."""
    import IPython.display as ipd

    shown: list[tuple[dict, dict]] = []
    updates: list[tuple[dict, dict]] = []

    def fake_display(obj, raw=False, display_id=None, metadata=None, **kw):
        assert raw
        shown.append((obj, {"display_id": display_id, "metadata": metadata}))

    def fake_update(obj, raw=False, display_id=None, metadata=None, **kw):
        updates.append((obj, {"display_id": display_id, "metadata": metadata}))

    monkeypatch.setattr(ipd, "display", fake_display)
    monkeypatch.setattr(ipd, "update_display", fake_update)
    w = LakehouseInspector(lh, interval_s=0.1, idle_interval_s=0.4, min_gap_s=0.05).refresh()
    w._ipython_display_()
    try:
        assert len(shown) == 2
        view, (copy, opts) = shown[0][0], shown[1]
        assert "application/vnd.jupyter.widget-view+json" in view
        assert opts["display_id"] and opts["metadata"] == {"lv_inspector_saved": w.model_id}
        assert f'lv-saved-{w.model_id}' in copy["text/html"] and "<style data-lv-saved-style>" in copy["text/html"]
        assert f"lv-insp-{w.model_id}" in w._dom_classes and w.live
        parts = {c: p for p in w.children for c in p._dom_classes}
        assert 'data-live="on"' in w.live_status.value
        v0 = lh.version("bank_x")
        _wait_for(lambda: w.scans >= 3)
        assert updates == []  # rescans that found nothing new: no update of the saved copy
        other = lv_core.connect(lh.url.removeprefix("file://"))  # another client of the warehouse
        t = other.begin("repeatable_read", timeout_s=20)
        add_kv(t, "bank_x", 1, 5)
        t.commit()
        assert _wait_for(lambda: f'data-table="bank_x" data-version="{v0 + 1}"' in parts["lv-tables"].value)
        assert _wait_for(lambda: len(updates) >= 1)
        assert f'data-version="{v0 + 1}"' in updates[-1][0]["text/html"]
        assert updates[-1][1]["display_id"] == opts["display_id"]
    finally:
        w.close()
    assert not w.live
    n = w.scans
    time.sleep(0.5)  # closed: no more scans (nothing to await: absence of activity)
    assert w.scans == n


def test_a_newer_inspector_stops_the_older_one(lh, comms, monkeypatch):
    import IPython.display as ipd

    monkeypatch.setattr(ipd, "display", lambda *a, **k: None)
    old = LakehouseInspector(lh, idle_interval_s=60).refresh().start()
    new = LakehouseInspector(lh, idle_interval_s=60).refresh().start()
    try:
        assert new.live and not old.live
        assert 'data-live="off"' in old.live_status.value and "newer inspector" in old.live_status.value
        new.nudge()  # what a cell's post_execute does
        assert _wait_for(lambda: new.scans >= 2)
    finally:
        old.close()
        new.close()


def test_static_conversion_keeps_the_saved_copy_only():
    import nbformat

    from widgets.inspector import saved_style
    from widgets.nbstatic import make_static

    mid = "abc123"
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%lv inspect")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {
            "model_id": mid, "version_major": 2, "version_minor": 0}, "text/plain": "Lakehouse inspector"}),
        nbformat.v4.new_output("display_data", data={"text/html": f'{saved_style(mid)}<div class="lv-saved-{mid}">'
                                                                  "SAVED</div>", "text/plain": "x"},
                               metadata={"lv_inspector_saved": mid}),
    ]
    nb.cells = [cell]
    assert make_static(nb) == 1
    assert len(cell.outputs) == 1
    assert cell.outputs[0]["data"]["text/html"] == f'<div class="lv-saved-{mid}">SAVED</div>'


def test_own_transaction_events_nudge_without_waiting_for_the_poll(lh, comms, monkeypatch):
    """A transaction of this kernel (one its widgets show) commits in the background: the inspector
    rescans at once, long before its idle poll (60 s here) would."""
    import IPython.display as ipd

    from widgets.txn_widget import remember

    monkeypatch.setattr(ipd, "display", lambda *a, **k: None)
    w = LakehouseInspector(lh, interval_s=60, idle_interval_s=60, min_gap_s=0.0).refresh()
    txn = lh.begin("repeatable_read", name="MINE", timeout_s=20)
    remember(txn)
    w.start()
    try:
        n = w.scans
        add_kv(txn, "bank_x", 1, 1)  # a marker placed: nudged
        assert _wait_for(lambda: w.scans > n, timeout_s=10)
        assert _wait_for(lambda: any(m.txn == txn.id for m in (w.scan.markers if w.scan else [])), timeout_s=10)
        assert f"owner MINE ({short_id(txn.id)})" in w.to_text()  # this kernel's name for it
        txn.commit_async().result(timeout=20)  # ends in the background
        assert _wait_for(lambda: w.scan is not None and not w.scan.markers, timeout_s=10)
    finally:
        w.close()


def test_poller_stops_when_the_lakehouse_cannot_be_read(lh, comms, monkeypatch):
    """A store that went away (the S3 server stopped): the poller gives up after a few tries and says so."""
    from lv_core.errors import StorageError
    from widgets import inspector

    w = LakehouseInspector(lh, interval_s=0.05, idle_interval_s=0.05, min_gap_s=0.0).refresh()

    def gone(*_a, **_k):
        raise StorageError("connection refused")

    monkeypatch.setattr(lh, "scan_markers", gone)
    w.start()
    try:
        assert _wait_for(lambda: not w.live, timeout_s=10)
        assert w.scans >= 1 + inspector.MAX_FAILURES
        assert "could not be read 3 times in a row" in w.live_status.value
        assert "listing tables failed" in w.scan.errors[0]  # what the summary shows
    finally:
        w.close()
