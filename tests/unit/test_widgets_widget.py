"""TransactionWidget without a browser: parts, classes, live updates from threads, throttling, bundles.

A recording comm (the ``comms`` fixture, tests/unit/conftest.py) stands in for the kernel (as
ipywidgets' own tests do), so every state update the frontend would receive is counted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import lv_core
from lv_core import events as ev
from tests.helpers.bank import add_kv, make_kv
from tests.unit.test_widgets_model import A, B, began, stream, waiting_stream

ipywidgets = pytest.importorskip("ipywidgets")

from widgets.txn_widget import TransactionWidget, known_names  # noqa: E402


class FakeTxn:
    """The attributes a TransactionWidget reads: id, name, state, events."""

    def __init__(self, txn: str = A, name: str | None = "T2") -> None:
        self.id, self.name, self.state = txn, name, "active"
        self.events = ev.EventStream()

    def emit(self, *events: ev.Event) -> None:
        for e in events:
            self.events.emit(e)


def until(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.01)


def descendants(w: Any) -> list[Any]:
    out = []
    for c in getattr(w, "children", ()):
        out += [c, *descendants(c)]
    return out


def _updates(comms: list[tuple[str, Any]], widget: Any) -> list[dict]:
    return [d["state"] for cid, d in comms if cid == widget.model_id and d.get("method") == "update"]


def test_constructor_renders_replayed_events_with_classes(comms):
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w = TransactionWidget(txn)
    try:
        assert "lv-txn" in w._dom_classes and "lv-state-waiting" in w._dom_classes
        parts = {c: p for p in descendants(w) for c in p._dom_classes}
        assert {"lv-style", "lv-toggle", "lv-summary", "lv-progress", "lv-cancel", "lv-details", "lv-why",
                "lv-header", "lv-markers", "lv-dag", "lv-validation", "lv-timeline", "lv-result"} <= set(parts)
        assert 'data-state="waiting"' in parts["lv-summary"].value and "waiting on " in parts["lv-summary"].value
        assert 'data-state="waiting"' in parts["lv-header"].value
        assert 'data-table="bank_x"' in parts["lv-markers"].value
        assert w.view.state == "waiting" and w.renders == 1
        assert w._lv_timer is not None  # ticking: elapsed times move while waiting
    finally:
        w.close()
    assert w._lv_timer is None and txn.events._subscribers == []


def test_live_updates_from_a_background_thread_are_throttled(comms):
    txn = FakeTxn()
    txn.emit(began())
    w = TransactionWidget(txn, min_interval_s=0.1, tick_s=0)
    header = w.part("header")
    before = len(_updates(comms, header))
    n = 400

    def busy() -> None:  # a busy transaction: 400 operations in ~0.5 s
        for i in range(n):
            txn.emit(ev.OperationDone(A, step=i, op="insert", table="kv", sublog="physical"))
            if i % 8 == 0:
                time.sleep(0.01)

    t0 = time.monotonic()
    th = threading.Thread(target=busy)
    th.start()
    th.join()
    until(lambda: w.view.steps == n)
    took = time.monotonic() - t0
    time.sleep(0.25)  # let a last scheduled flush run
    renders = len(_updates(comms, header)) - before
    assert 2 <= renders <= took / 0.1 + 3, (renders, took)  # batched: far fewer renders than events
    assert f"{n} steps" in header.value
    w.close()


def test_wait_then_commit_from_another_thread_flips_state(comms):
    txn = FakeTxn()
    w = TransactionWidget(txn, min_interval_s=0.05, tick_s=0.05)
    txn.state = "committing"
    events = stream(*waiting_stream(), start=time.time() - 1.0)
    threading.Thread(target=txn.emit, args=tuple(events)).start()
    until(lambda: "lv-state-waiting" in w._dom_classes)
    result = w.part("result")
    header = w.part("header")
    n = len(_updates(comms, header))
    until(lambda: len(_updates(comms, header)) >= n + 3)  # ticks: the elapsed time keeps moving
    threading.Thread(target=txn.emit, args=tuple(stream(
        ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
        ev.Committed(A, versions={"bank_x": 4, "bank_y": 3}, redo_count=0, elapsed_s=2.0), start=2000.0))).start()
    until(lambda: 'data-outcome="committed"' in result.value)
    assert "lv-state-committed" in w._dom_classes and "lv-state-waiting" not in w._dom_classes
    assert "Committed: bank_x@4, bank_y@3" in result.value
    until(lambda: txn.events._subscribers == [])  # done: the widget stops listening
    assert w._lv_timer is None
    w.close()


def test_mimebundle_has_widget_view_and_static_fallbacks(comms):
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w = TransactionWidget(txn)
    data = w._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id
    assert data["text/plain"].startswith("Transaction T2 [waiting]")
    assert '<div class="lv-txn lv-static lv-state-waiting"' in data["text/html"]
    assert "waiting on " in data["text/html"]
    w.close()


def test_names_of_other_transactions_come_from_their_widgets(comms):
    other = FakeTxn(B, name="T1")
    other.emit(began(B, name="T1"))
    w1 = TransactionWidget(other)
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w2 = TransactionWidget(txn)
    assert known_names()[B] == "T1"
    assert "waiting on T1@3" in w2.to_html() and "T2 -> T1 at bank_x@3 (waiting)" in w2.to_text()
    w1.close()
    w2.close()


def test_a_broken_render_does_not_break_the_transaction(comms, monkeypatch):
    txn = FakeTxn()
    w = TransactionWidget(txn, min_interval_s=0.01, tick_s=0)
    import widgets.txn_widget as tw

    calls = []

    def boom(view, now=None):
        calls.append(1)
        raise RuntimeError("render bug")

    monkeypatch.setattr(tw, "render_parts", boom)
    txn.emit(began())  # the stream swallows subscriber errors; the timer thread logs them
    until(lambda: calls)
    assert txn.events.history[-1].kind == "Began"
    w.close()


def test_real_transactions_widget_follows_a_background_commit(comms, tmp_path):
    """lv_core: T2's widget shows it waiting behind T1, then committed, with no manual refresh."""
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    make_kv(lh, "bank_x", {1: 1000.0, 2: 1000.0})
    t1 = lh.begin("repeatable_read", name="T1", timeout_s=20)
    t2 = lh.begin("repeatable_read", name="T2", timeout_s=20)
    add_kv(t1, "bank_x", 1, -50)
    add_kv(t2, "bank_x", 1, +70)
    w1, w2 = TransactionWidget(t1), TransactionWidget(t2)
    v1 = t1.marker_versions()["bank_x"]
    fut = t2.commit_async()
    until(lambda: "lv-state-waiting" in w2._dom_classes)
    markers = w2.part("markers")
    assert f"waiting on T1@{v1}" in markers.value
    dag = w2.part("dag")
    assert "lv-edge-waiting" in dag.value and f"bank_x@{v1}" in dag.value
    t1.commit()
    fut.result(timeout=30)
    until(lambda: "lv-state-committed" in w2._dom_classes)
    until(lambda: "lv-state-committed" in w1._dom_classes)  # its own render timer: not ordered with w2's
    assert w2.view.result.redo_count == 1
    w1.close()
    w2.close()


def test_cell_hook_resends_background_renders_from_the_cell_thread(comms):
    """A headless executor only records messages sent while a cell runs: the post_execute hook
    re-sends what background threads rendered, so saved notebooks hold the final state."""
    from widgets.txn_widget import _LIVE, flush_live_widgets

    txn = FakeTxn()
    w = TransactionWidget(txn, min_interval_s=0.01, tick_s=0)
    result = w.part("result")
    threading.Thread(target=txn.emit, args=tuple(stream(
        began(), ev.Committed(A, versions={"kv": 3}, redo_count=0, elapsed_s=0.1)))).start()
    until(lambda: 'data-outcome="committed"' in result.value)  # rendered by the timer thread
    assert w in _LIVE
    n = len(comms)
    flush_live_widgets()  # what IPython runs after each cell, in the kernel's main thread
    resent = [(cid, d["state"]) for cid, d in comms[n:] if d.get("method") == "update"]
    assert any(cid == result.model_id and 'data-outcome="committed"' in st.get("value", "") for cid, st in resent)
    assert any(cid == w.model_id and "lv-state-committed" in st.get("_dom_classes", ()) for cid, st in resent)
    assert w not in _LIVE  # done and re-sent: no more work after later cells
    n = len(comms)
    flush_live_widgets()
    assert len(comms) == n
    w.close()
