"""The widget's compact parts and live helpers: status line, progress and Cancel, "why", the live DAG
from a marker scan, and the final state replacing the saved output."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lv_core import events as ev
from lv_core.protocol.scan import LiveMarker
from tests.unit.test_widgets_model import NAMES, A, B, C, began, stream, waiting_stream
from widgets.cancel import default_cancel, early_clicks
from widgets.live_dag import neighbourhood
from widgets.model import fold
from widgets.render import render_html, render_parts, render_text
from widgets.summary import progress_html, summary_html, whys

D = "20250101T000000-dddddddddddddddd"


def _committed() -> list[ev.Event]:
    return waiting_stream() + stream(
        ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
        ev.ConflictFound(A, table="bank_x", version=3, step=1, files=("part-1.parquet",)),
        ev.Redo(A, from_step=1, attempt=1),
        ev.Requests(A, counts={"GET": 3, "PUT": 2}),
        ev.Committed(A, versions={"bank_x": 4, "bank_y": 3}, redo_count=1, elapsed_s=0.5), start=1001.0)


def test_status_line_holds_outcome_preset_tables_time_requests():
    view = fold(_committed(), names=NAMES)
    html = summary_html(view)
    assert 'data-state="committed"' in html and 'data-name="T2"' in html
    for bit in (">T2<", ">committed<", ">serializable<", ">bank_x@4 bank_y@3<", ">0.50 s<", ">5 requests<",
                ">1 redo<"):
        assert bit in html, bit
    waiting = summary_html(fold(waiting_stream(), names=NAMES), now=1003.0)
    assert ">waiting on T1<" in waiting and ">bank_x@4 bank_y@3<" in waiting


def test_static_html_is_collapsed_to_the_status_line_and_text_explains():
    view = fold(_committed(), names=NAMES)
    html = render_html(view)
    assert '<details><summary class="lv-summary"><span class="lv-sum"' in html  # no JS needed to expand
    assert html.index("</summary>") < html.index('class="lv-marker-table"')
    text = render_text(view)
    assert "  why: redo conflict by T1: committed bank_x@3,; which changed what step 1 read (1 file)" in text


def test_progress_line_until_the_statement_finishes():
    events = stream(began(), ev.Progress(A, statement=2, stage="stage 3", done=40, total=100, elapsed_s=12.5))
    view = fold(events)
    html = progress_html(view)
    assert 'data-statement="2"' in html and 'data-done="40"' in html and "statement 2 · stage 3" in html
    assert "40/100 tasks · 40% · 12.5 s" in html and 'style="width:40.0%"' in html
    assert summary_html(view).count(">running<") == 1
    unknown = fold(stream(began(), ev.Progress(A, statement=1, stage="stage 0", done=0, total=0, elapsed_s=0.0)))
    assert "lv-bar-busy" in progress_html(unknown)
    # every known task done, the statement still running (a last task, another operation): the line stays
    last = progress_html(fold(events + stream(ev.Progress(A, statement=2, stage="running", done=99, total=100,
                                                          elapsed_s=20.0, running=1), start=1005)))
    assert "99/100 tasks (1 running) · 99% · 20.0 s" in last and 'class="lv-bar-run" style="width:1.0%"' in last
    assert "statement 2 · running" in progress_html(fold(events + stream(
        ev.Progress(A, statement=2, stage="running", done=100, total=100, elapsed_s=21.0), start=1005)))
    assert progress_html(fold(events + stream(ev.Progress(A, statement=2, stage="done", done=0, total=0,
                                                          elapsed_s=22.0), start=1005))) == ""
    assert progress_html(fold(events + stream(ev.Aborted(A, reason="rolled back by the user", rule="rollback"),
                                              start=1005))) == ""
    assert view.timeline[-1].kind == "Began"  # progress is not a timeline entry


def test_why_of_a_validation_abort_names_the_other_transaction_and_its_change():
    rules = {"R1": {"applies": True, "passed": False, "detail": "version 5 changed what was read"},
             "R2": {"applies": True, "passed": True, "detail": ""}, "R3": {"applies": True, "passed": True}}
    table = {"r": 3, "h": 5, "w": 6, "l": 5, "written_logs": 0, "rules": rules,
             "changes": [{"version": 5, "txn": B, "why": "deleted rows it read", "files": ["a.parquet"]}]}
    view = fold(stream(began(), ev.Validated(A, compatible=False, gvl_version=None, tables={"bank_x": table},
                                             failed_rule="R1"),
                       ev.Aborted(A, reason=f"R1 (outdated read): ... by transaction {B}. Help: retry.", rule="R1")),
                names=NAMES)
    [why] = whys(view)
    assert (why.kind, why.rule, why.other) == ("abort", "R1 (outdated read)", "T1")
    assert why.changed == "T1 changed bank_x@5: deleted rows it read"
    assert why.detail == "version 5 changed what was read"
    html = render_parts(view)["why"]
    assert 'data-kind="abort" data-rule="R1 (outdated read)" data-other="T1"' in html
    assert "What to do: retry." in html
    assert "by transaction T1" in render_parts(view)["result"]  # ids become names


def test_why_of_a_timeout_and_of_a_redo():
    timeout = fold(waiting_stream() + stream(ev.Aborted(
        A, reason=f"timed out after 2s waiting for transaction {B} (marker bank_x@3). Help: commit it.",
        rule="timeout"), start=1002), names=NAMES)
    [why] = whys(timeout)
    assert (why.rule, why.other, why.help) == ("timeout (wait timed out)", "T1", "commit it.")
    assert why.detail == "timed out after 2s waiting for transaction T1 (marker bank_x@3)."
    [redo] = whys(fold(_committed(), names=NAMES))
    assert (redo.kind, redo.other, redo.changed) == ("redo", "T1", "committed bank_x@3,")
    assert not whys(fold(waiting_stream(), names=NAMES)) and render_parts(fold(waiting_stream()))["why"] == ""
    unknown = fold(waiting_stream() + stream(ev.Aborted(A, reason="commit failed: boom", rule="unknown"), start=1002))
    assert ">outcome unknown<" in summary_html(unknown) and 'data-state="unknown"' in summary_html(unknown)


def test_live_neighbourhood_from_markers():
    markers = [LiveMarker("bank_x", 3, A), LiveMarker("bank_x", 4, B, predecessors=((A, "bank_x", 3),)),
               LiveMarker("bank_x", 5, C),  # no predecessor list (LV[R] only): waits for the marker before it
               LiveMarker("other", 1, D)]  # unrelated
    dag = neighbourhood(A, markers)
    assert dag.nodes == {B: "live", C: "live"}
    assert sorted((e.src, e.dst, e.label) for e in dag.edges) == [(B, A, "bank_x@3"), (C, B, "bank_x@4")]
    view = fold(stream(began(), ev.MarkerPlaced(A, table="bank_x", version=3)), names=NAMES)
    view.live_nodes, view.live_edges = dag.nodes, dag.edges
    html = render_parts(view)["dag"]
    assert 'data-others="2"' in html and "lv-dag-empty" not in html


def test_early_clicks_run_before_the_main_thread_gets_the_message():
    class Comm:
        def _reply_subshell_for(self, data: Any, default: Any) -> Any:
            return default

    class Button:
        comm = Comm()

    clicked = threading.Event()
    button = Button()
    assert early_clicks(button, clicked.set)
    hook = button.comm._reply_subshell_for
    assert hook({"method": "update", "state": {}}, "main") == "main" and not clicked.is_set()
    assert hook({"method": "custom", "content": {"event": "click"}}, None) is None
    assert clicked.wait(5)
    assert not early_clicks(object(), clicked.set)  # no such hook: clicks wait for the cell


def test_default_cancel():
    calls: list[str] = []

    class Spark:
        def interruptAll(self) -> list[str]:  # noqa: N802 - Spark's name
            calls.append("interruptAll")
            return []

    class Lakehouse:
        started = 0

        @property
        def spark(self) -> Spark:
            Lakehouse.started += 1  # a real lakehouse starts Spark here
            return Spark()

    class Txn:
        def cancel(self) -> None:  # lv_core's Transaction.cancel: interrupts its own operations by tag
            calls.append("txn")

    default_cancel(Txn(), Lakehouse())()  # type: ignore[misc]
    cancel = default_cancel(object(), Lakehouse())
    assert cancel is not None and Lakehouse.started == 0  # choosing the default starts nothing
    cancel()
    assert calls == ["txn", "interruptAll"] and default_cancel(object(), None) is None


ipywidgets = pytest.importorskip("ipywidgets")


def test_widget_shows_progress_and_cancel_button(comms):
    from tests.unit.test_widgets_widget import FakeTxn
    from widgets.txn_widget import TransactionWidget

    txn = FakeTxn()
    txn.emit(began(), ev.Progress(A, statement=1, stage="stage 0", done=1, total=4, elapsed_s=1.0))
    cancelled: list[int] = []
    w = TransactionWidget(txn, cancel=lambda: cancelled.append(1), tick_s=0)
    try:
        box = next(c for c in w.children if "lv-progress-box" in c._dom_classes)
        assert box.layout.display == "" and w.cancel_button.layout.display == ""
        assert "1/4 tasks" in w.part("progress").value
        assert w.cancel() and not w.cancel() and cancelled == [1]  # once
        assert w.cancel_button.disabled and w.cancel_button.description == "Cancelling…"
        txn.emit(ev.Aborted(A, reason="rolled back by the user", rule="rollback"))
        w.flush()
        assert box.layout.display == "none" and w.cancel_button.layout.display == "none"
    finally:
        w.close()
    hidden = TransactionWidget(FakeTxn(), cancel=None)
    assert hidden.cancel_button.layout.display == "none" and not hidden.cancel()
    hidden.close()


def test_final_state_replaces_the_displayed_fallbacks(comms, monkeypatch):
    import IPython.display

    from tests.unit.test_widgets_widget import FakeTxn
    from widgets.txn_widget import TransactionWidget

    shown: list[tuple[str, dict, str]] = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False, display_id=None: shown.append(("display", data, display_id)))
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda data, raw=False, display_id=None: shown.append(("update", data, display_id)))
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w = TransactionWidget(txn, tick_s=0)
    try:
        w._ipython_display_()
        [(kind, data, did)] = shown
        assert kind == "display" and did and "[waiting]" in data["text/plain"]
        assert "application/vnd.jupyter.widget-view+json" in data
        txn.emit(*stream(ev.Committed(A, versions={"bank_x": 4}, redo_count=0, elapsed_s=1.0), start=2000))
        w.flush()  # in the main thread: the update goes out at once
        assert [k for k, _, _ in shown] == ["display", "update"]
        _, final, final_id = shown[1]
        assert final_id == did and "[committed]" in final["text/plain"]
        assert 'data-outcome="committed"' in final["text/html"] and "<details>" in final["text/html"]
        assert "application/vnd.jupyter.widget-view+json" not in final  # static: needs no kernel
        assert not w.send_final()  # once
    finally:
        w.close()


def test_new_tables_share_one_note_instead_of_a_sentence_per_rule():
    new = {n: {"applies": False, "passed": True, "detail": "table not in the global log yet: added at version 1 "
               "(always compatible)"} for n in ("R1", "R2", "R3")}
    tables = {t: {"r": None, "h": 0, "w": 1, "l": None, "written_logs": 0, "new_table": True, "rules": new}
              for t in ("t1", "t2", "t3")}
    html = render_parts(fold(stream(began(), ev.Validated(A, compatible=True, gvl_version=1, tables=tables))))
    assert html["validation"].count("not in the global log") == 1 and "(t1, t2, t3)" in html["validation"]
    assert html["validation"].count('colspan="3"') == 3


def test_widget_scans_for_other_transactions_and_backs_off(comms):
    from tests.unit.test_widgets_widget import FakeTxn
    from widgets.txn_widget import SCAN_MAX_S, TransactionWidget

    class Table:
        def __init__(self, markers: list[LiveMarker]) -> None:
            self.markers = markers

    class Lakehouse:
        scans: list[list[str]] = []
        markers = [LiveMarker("kv", 3, A), LiveMarker("kv", 4, B)]

        def scan_markers(self, tables: list[str], now: float) -> list[Table]:
            self.scans.append(list(tables))
            return [Table(self.markers)]

    lh = Lakehouse()
    txn = FakeTxn()
    txn.emit(began(), ev.MarkerPlaced(A, table="kv", version=3))
    w = TransactionWidget(txn, lakehouse=lh, scan_s=0.05, tick_s=0, cancel=None)
    try:
        assert lh.scans == []  # the constructor does no I/O
        w._lv_scanned = 0.0
        w.flush(scan=True)
        assert lh.scans == [["kv"]] and w.view.live_nodes == {B: "live"}
        assert 'data-others="1"' in w.part("dag").value
        for _ in range(12):  # nothing changes: the pause doubles up to the bound
            w._lv_scanned = 0.0
            w.flush(scan=True)
        assert w._lv_scan_every == SCAN_MAX_S
        txn.emit(ev.MarkerPlaced(A, table="kv2", version=1))  # news: look again soon
        assert w._lv_scan_every == 0.05
    finally:
        w.close()


def test_why_of_a_conflict_abort_names_the_committer():
    events = waiting_stream() + stream(
        ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
        ev.ConflictFound(A, table="bank_x", version=3, step=1),
        ev.Aborted(A, reason=f"gave up after 0 redo(s): bank_x@3 by {B} keeps invalidating step 1 (rows it "
                             "updated). Help: retry the transaction.", rule="conflict"), start=1001.0)
    redo, abort = whys(fold(events, names=NAMES))
    assert (redo.kind, abort.kind, abort.rule, abort.other) == ("redo", "abort", "conflict (conflicting commit)", "T1")
    assert abort.changed == "T1 committed bank_x@3, which invalidated step 1"
    assert abort.detail.startswith("gave up after 0 redo(s): bank_x@3 by T1 keeps invalidating step 1")


def test_real_widget_finds_who_waits_for_its_transaction(comms, tmp_path):
    """No lakehouse given: the widget scans the transaction's own store (not counted as its requests)."""
    import lv_core
    from tests.helpers.bank import add_kv, make_kv
    from tests.unit.test_widgets_widget import until
    from widgets.txn_widget import TransactionWidget

    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    make_kv(lh, "bank_x", {1: 1000.0})
    t1 = lh.begin("repeatable_read", name="T1", timeout_s=20)
    t2 = lh.begin("repeatable_read", name="T2", timeout_s=20)
    add_kv(t1, "bank_x", 1, -50)
    add_kv(t2, "bank_x", 1, +70)
    w1 = TransactionWidget(t1, scan_s=0.05, tick_s=0)
    try:
        requests = t1.requests()
        fut = t2.commit_async()
        until(lambda: 'data-others="1"' in w1.part("dag").value)
        v1 = t1.marker_versions()["bank_x"]
        assert f"bank_x@{v1}" in w1.part("dag").value and "lv-edge-waiting" in w1.part("dag").value
        assert t1.requests() == requests  # the scans are the widget's, not T1's
        t1.commit()
        fut.result(timeout=30)
        until(lambda: 'data-others="0"' in w1.part("dag").value)
    finally:
        w1.close()


def test_red_is_for_errors_only_a_redo_that_committed_and_a_users_cancel_are_not():
    from widgets.model import STATE_COLOURS
    from widgets.summary import why_html

    redone = fold(_committed(), names=NAMES)
    assert redone.tone == "ok" and 'lv-why-panel lv-why-ok' in why_html(redone)
    assert STATE_COLOURS["aborted"] not in summary_html(redone)
    cancelled = fold(stream(began(), ev.Aborted(A, reason="cancelled during statement 1", rule="interrupt")))
    assert cancelled.tone == "neutral" and 'lv-why-neutral' in why_html(cancelled)
    header = render_parts(cancelled)["header"]
    assert STATE_COLOURS["aborted"] not in summary_html(cancelled) + header and STATE_COLOURS["unknown"] in header
    aborted = fold(stream(began(), ev.Aborted(A, reason="read kv@3 is outdated", rule="R1")))
    assert aborted.tone == "error" and 'lv-why-error' in why_html(aborted)
    assert STATE_COLOURS["aborted"] in summary_html(aborted)
