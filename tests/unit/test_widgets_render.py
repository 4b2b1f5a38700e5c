"""Static rendering of the transaction view: HTML parts, Graphviz SVG, text; escaping everywhere."""

from __future__ import annotations

import re
import shutil

import pytest

from lv_core import events as ev
from tests.unit.test_widgets_model import NAMES, A, B, began, stream, waiting_stream
from widgets import dag_svg
from widgets.model import fold
from widgets.render import fmt_s, render_html, render_parts, render_text

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` not installed")

R1_FAIL = {"bank_x": {"r": 3, "h": 5, "w": 6, "l": 5, "written_logs": 0, "read": True, "written": True,
                      "rules": {"R1": {"applies": True, "passed": False, "detail": "r=3 < h-slack=5"},
                                "R2": {"applies": True, "passed": True, "detail": "w=6 > h=5"},
                                "R3": {"applies": True, "passed": True, "detail": "l+written_logs+1=5+0+1=6 == w=6"}}}}


def _r1_view():
    return fold(stream(
        began(), ev.MarkerPlaced(A, table="bank_x", version=6), ev.SnapshotRead(A, table="bank_x", version=3, files=1),
        ev.Validated(A, compatible=False, gvl_version=None, tables=R1_FAIL, failed_rule="R1"),
        ev.MarkerFreed(A, table="bank_x", version=6, reason="R1"),
        ev.Aborted(A, reason="R1 (outdated read): table 'bank_x' was read at version 3, but version 5 is "
                             "committed, more than the allowed slack of 0 version(s) newer. Help: retry the "
                             "transaction to read current data, or allow older reads with a larger `slack`.",
                   rule="R1")))


def test_parts_carry_state_as_data_attributes():
    parts = render_parts(fold(waiting_stream(), names=NAMES), now=1003.0)
    assert set(parts) == {"summary", "progress", "why", "header", "markers", "dag", "validation", "timeline",
                          "result"}
    assert 'data-state="waiting"' in parts["summary"] and "waiting on T1" in parts["summary"]
    assert "bank_x@4 bank_y@3" in parts["summary"] and parts["progress"] == "" and parts["why"] == ""
    assert 'data-state="waiting"' in parts["header"] and 'data-name="T2"' in parts["header"]
    assert f'data-txn="{A}"' in parts["header"] and "serializable" in parts["header"]
    assert "features CT+I+R" in parts["header"] and "3.00 s" in parts["header"]  # elapsed at now
    row = re.search(r'<tr class="lv-marker-row" data-table="bank_x"[^>]*>.*?</tr>', parts["markers"]).group(0)
    assert 'data-version="4"' in row and 'data-state="waiting"' in row
    assert "waiting on T1@3" in row and "(for 2.20 s)" in row
    assert 'data-outcome="running"' in parts["result"] and "waiting for other transactions" in parts["result"]
    assert 'data-validated="false"' in parts["validation"] and "runs at commit" in parts["validation"]
    assert 'data-kind="Waiting"' in parts["timeline"] and "+0.80 s" in parts["timeline"]


def test_r1_failure_shows_rule_numbers_and_what_to_do():
    view = _r1_view()
    html = render_html(view)
    assert 'data-compatible="false"' in html and 'data-failed-rule="R1"' in html
    cell = re.search(r'<td class="lv-rule lv-rule-fail" data-rule="R1"[^>]*>.*?</td>', html).group(0)
    assert 'data-passed="false"' in cell and "r=3 &lt; h-slack=5" in cell and "FAIL" in cell
    row = re.search(r'<tr class="lv-val-row" data-table="bank_x".*?</tr>', html).group(0)
    assert [c for c in re.findall(r"<td>(\d+|–)</td>", row)] == ["3", "5", "6", "5", "0"]  # r h w l written_logs
    assert 'data-rule="R2"' in row and "lv-rule-pass" in row
    assert "incompatible: R1 failed on bank_x" in html
    assert 'data-outcome="aborted" data-rule="R1"' in html
    assert "What to do: retry the transaction to read current data" in html
    text = render_text(view)
    assert "validation: INCOMPATIBLE (R1)" in text and "r=3 h=5 w=6 l=5 written_logs=0" in text
    assert "R1: r=3 < h-slack=5" in text and "what to do: retry the transaction" in text


def test_compatible_validation_shows_global_version():
    ok = {"t": {"r": 1, "h": 1, "w": 2, "l": 1, "written_logs": 0,
                "rules": {n: {"applies": True, "passed": True, "detail": ""} for n in ("R1", "R2", "R3")}}}
    html = render_parts(fold(stream(began(), ev.Validated(A, compatible=True, gvl_version=7, tables=ok))))["validation"]
    assert 'data-compatible="true"' in html and "compatible → global version 7" in html
    assert html.count("lv-rule-pass") == 1 + 3  # summary + three rules


def test_everything_is_escaped():
    evil = "<script>alert('x')</script>"
    view = fold(stream(
        ev.Began(A, preset=evil, features=("R",), name=evil),
        ev.MarkerPlaced(A, table=evil, version=1),
        ev.EdgeAdded(A, to_txn=evil, table=evil, version=0),
        ev.Waiting(A, table=evil, version=0, on_txn=evil),
        ev.Aborted(A, reason=evil + " Help: " + evil, rule=evil)))
    html = render_html(view)
    assert "<script" not in html and "alert('x')" not in html
    assert "&lt;script&gt;" in html
    assert evil in render_text(view)  # text/plain is never interpreted as HTML


@needs_dot
def test_dag_svg_waiting_edge_cycle_and_shift():
    svg = render_parts(fold(waiting_stream(), names=NAMES))["dag"]
    assert "<svg" in svg and "<?xml" not in svg and "<!--" not in svg and "&#45;" not in svg
    assert 'data-edges="1"' in svg
    edge = re.search(r'<g id="edge\d+" class="edge lv-edge lv-edge-waiting">.*?</g>', svg, re.S).group(0)
    assert ">bank_x@3<" in edge and "#c77700" in edge
    assert re.search(r'class="node lv-node lv-node-waiting lv-node-self">.*?>T2<', svg, re.S)
    assert re.search(r'class="node lv-node lv-node-pending">.*?>T1<', svg, re.S)
    cyc = fold(stream(
        began(B, name="T1", features=("CT", "R")),
        ev.MarkerPlaced(B, table="bank_x", version=3),
        ev.EdgeAdded(B, to_txn=A, table="bank_y", version=3),
        ev.CycleFound(B, edges=((B, A, "bank_y@3"), (A, B, "bank_x@3"))),
        ev.MarkerFreed(B, table="bank_x", version=3, reason="shift"),
        ev.MarkerPlaced(B, table="bank_x", version=5, shift=True),
        ev.Shifted(B, moves=(("bank_x", 3, 5),), reason="cycle")), names={A: "T2"})
    svg = render_parts(cyc)["dag"]
    assert svg.count("lv-edge-cycle") == 2 and "#d32f2f" in svg
    assert "lv-edge-inverted" in svg and "bank_x@3 (shifted)" in svg
    assert "marker shift (cycle): bank_x @3 → @5" in svg
    assert 'data-cycles="1"' in svg and 'data-shifts="1"' in svg


def test_dag_without_graphviz_falls_back_to_text(monkeypatch):
    def broken(_source: str) -> str:
        raise dag_svg.GraphvizUnavailable("dot not found")

    monkeypatch.setattr(dag_svg, "_pipe", broken)
    html = render_parts(fold(waiting_stream(), names=NAMES))["dag"]
    assert "<svg" not in html and 'class="lv-dag-text"' in html
    assert "T2 → T1 <code>bank_x@3</code> (waiting)" in html


@needs_dot
def test_no_edges_is_the_transaction_alone():
    html = render_parts(fold(stream(began(), ev.MarkerPlaced(A, table="kv", version=1))))["dag"]
    assert 'data-edges="0"' in html and "<svg" in html and "no dependencies" in html
    assert re.search(r'class="node lv-node lv-node-active lv-node-self">.*?>T2<', html, re.S)


def test_text_rendering_of_a_committed_transaction():
    from tests.unit.test_widgets_model import waiting_stream as ws
    events = ws() + stream(ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
                           ev.Redo(A, from_step=1, attempt=1),
                           ev.Requests(A, counts={"GET": 3, "PUT": 2}),
                           ev.Committed(A, versions={"bank_x": 4, "bank_y": 3}, redo_count=1, elapsed_s=0.5),
                           start=1001.0)
    text = render_text(fold(events, names=NAMES))
    lines = text.splitlines()
    assert lines[0].startswith("Transaction T2 [committed] preset serializable (features CT+I+R), 0.50 s")
    assert "    bank_x               @4      committed, read at 3" in lines
    assert "    T2 -> T1 at bank_x@3 (resolved)" in lines
    assert "  redo: from step 1 (attempt 1)" in lines and "  requests: GET 3, PUT 2" in lines
    assert lines[-1] == "  result: committed bank_x@4, bank_y@3, 1 redo(s)"


def test_fmt_s():
    assert [fmt_s(x) for x in (None, 0.0456, 12.34, 125)] == ["–", "0.05 s", "12.3 s", "2 min 05 s"]
