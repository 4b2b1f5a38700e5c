"""Browser tier: the live widgets in a real JupyterLab, asserted in headless Chromium.

One JupyterLab server and one browser for the whole run (fixtures in conftest.py).
``two_txns.ipynb`` runs two interleaved transactions through the Python API: T2's commit waits
behind T1 in the background; the page shows T2's marker row waiting on T1, the waiting edge in
T2's DAG SVG and both in the inspector; then a later cell commits T1 and T2's widget flips from
waiting to committed without its cell running again. ``validation_display.ipynb`` replays a
recorded LV[I] R1 failure. Screenshots land in ``test-artifacts/browser/``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.integration.browser_utils import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

WAIT_S = 30.0  # generous: 2 shared cores


def _widget(page: Any, name: str) -> Any:
    """The transaction widget of the transaction called ``name``."""
    return page.locator(f'.jp-OutputArea-output .lv-txn:has(.lv-h[data-name="{name}"])')


def test_background_commit_waits_then_flips_to_committed(notebook: Any) -> None:
    from playwright.sync_api import expect

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    nb = notebook("two_txns.ipynb")
    page = nb.page
    timings["open"] = nb.opened_s

    # Step 1: make the tables, T1, T2, T2's background commit, the inspector (cells 0-4).
    t = time.monotonic()
    nb.run_all_above(5)
    nb.wait_cells_done([0, 1, 2, 3, 4], timeout_s=90)
    timings["cells 0-4"] = time.monotonic() - t
    assert nb.errors() == []
    counts = nb.execution_counts()
    assert counts == [1, 2, 3, 4, 5, None, None]

    t1, t2 = _widget(page, "T1"), _widget(page, "T2")
    expect(t2.locator(".lv-header .lv-h")).to_have_attribute("data-state", "waiting", timeout=WAIT_S * 1000)
    timings["waiting shown"] = time.monotonic() - t
    expect(t2).to_have_class(re.compile(r"\blv-state-waiting\b"))
    # The marker row: T2 holds bank_x@4, behind T1's marker bank_x@3.
    row = t2.locator('.lv-markers tr.lv-marker-row[data-table="bank_x"]')
    expect(row).to_have_attribute("data-state", "waiting")
    expect(row).to_have_attribute("data-version", "4")
    expect(row).to_contain_text("waiting on T1@3")
    expect(t2.locator('.lv-markers tr.lv-marker-row[data-table="bank_y"]')).to_have_attribute("data-state", "placed")
    # The waiting edge in T2's DAG (Graphviz SVG): T2 -> T1 labelled bank_x@3.
    edge = t2.locator(".lv-dag svg g.edge.lv-edge-waiting")
    expect(edge).to_have_count(1)
    expect(edge.locator("text")).to_have_text("bank_x@3")
    expect(t2.locator(".lv-dag svg g.node.lv-node-self")).to_contain_text("T2")
    expect(t2.locator(".lv-dag svg g.node.lv-node-pending")).to_contain_text("T1")
    expect(t2.locator(".lv-result .lv-result-inner")).to_have_attribute("data-outcome", "running")
    expect(t2.locator(".lv-timeline")).to_contain_text("edge → T1 at bank_x@3: its marker comes first")
    expect(t2.locator(".lv-timeline")).to_contain_text("waiting for T1: its marker bank_x@3 is pending")
    # T1 is untouched: active, its marker placed.
    expect(t1.locator(".lv-header .lv-h")).to_have_attribute("data-state", "active")
    expect(t1.locator('.lv-markers tr.lv-marker-row[data-table="bank_x"]')).to_have_attribute("data-state", "placed")
    # The inspector sees the same: three live markers, and the edge T2 -> T1 in the global DAG.
    insp = page.locator(".jp-OutputArea-output .lv-inspector:not(.lv-static)")  # not its saved copy
    expect(insp.locator("tr.lv-live-marker")).to_have_count(3)
    expect(insp.locator('tr.lv-live-marker[data-table="bank_x"][data-version="3"]')).to_contain_text("T1")
    expect(insp.locator(".lv-global-dag svg g.edge")).to_have_count(1)
    expect(insp.locator(".lv-global-dag svg g.edge text")).to_have_text("bank_x@3")
    expect(insp.locator(".lv-gvl")).to_contain_text("not in use")
    nb.screenshot("two_txns-1-waiting")
    nb.screenshot("two_txns-1-T2-widget", t2)
    nb.screenshot("two_txns-1-inspector", insp)

    # Step 2: a later cell commits T1; T2's widget (cell 2) flips by itself.
    t = time.monotonic()
    nb.run_cell(5)
    expect(t2.locator(".lv-header .lv-h")).to_have_attribute("data-state", "committed", timeout=WAIT_S * 1000)
    timings["flip to committed"] = time.monotonic() - t
    nb.wait_cells_done([5], timeout_s=WAIT_S)
    assert nb.errors() == []
    assert nb.execution_counts() == [1, 2, 3, 4, 5, 6, None]  # T2's cell (2) did not run again
    expect(t2).to_have_class(re.compile(r"\blv-state-committed\b"))
    result = t2.locator(".lv-result .lv-result-inner")
    expect(result).to_have_attribute("data-outcome", "committed")
    expect(result).to_contain_text("Committed: bank_x@4, bank_y@3 · 1 redo")
    expect(t2.locator('.lv-markers tr.lv-marker-row[data-table="bank_x"]')).to_have_attribute("data-state", "committed")
    expect(t2.locator(".lv-dag svg g.edge.lv-edge-resolved")).to_have_count(1)
    expect(t2.locator(".lv-dag svg g.edge.lv-edge-waiting")).to_have_count(0)
    expect(t2.locator(".lv-timeline")).to_contain_text("redo from step 1 (attempt 1)")
    expect(t1.locator(".lv-header .lv-h")).to_have_attribute("data-state", "committed")
    expect(t1.locator(".lv-result .lv-result-inner")).to_contain_text("Committed: bank_x@3")

    # Step 3: the inspector's Refresh button rescans: no markers are left.
    insp.locator("button.lv-refresh").click()
    expect(insp.locator(".lv-live-markers")).to_contain_text("no pending markers", timeout=WAIT_S * 1000)
    expect(insp.locator(".lv-global-dag")).to_contain_text("no transactions hold markers")
    nb.screenshot("two_txns-2-committed")
    expect(t2).to_have_class(re.compile(r"\blv-static\b"))  # its output is now the final state
    t2.locator("summary").click()
    expect(t2.locator(".lv-why .lv-why-item[data-kind='redo']")).to_have_attribute("data-other", "T1")
    nb.screenshot("two_txns-2-T2-widget", t2)
    timings["total"] = time.monotonic() - t0
    (ARTIFACTS / "two_txns-timings.txt").write_text("".join(f"{k}: {v:.2f} s\n" for k, v in timings.items()))


def test_validation_r1_failure_display(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook("validation_display.ipynb")
    page = nb.page
    nb.run_all_above(1)
    nb.wait_cells_done([0], timeout_s=60)
    w = _widget(page, "T3")
    expect(w.locator(".lv-header .lv-h")).to_have_attribute("data-state", "validating", timeout=WAIT_S * 1000)
    expect(w.locator(".lv-validation .lv-val-none")).to_contain_text("runs at commit")
    nb.run_cell(1)  # the recorded validation outcome and abort arrive; the widget's cell is not re-run
    val = w.locator(".lv-validation .lv-val")
    expect(val).to_have_attribute("data-failed-rule", "R1", timeout=WAIT_S * 1000)
    expect(val).to_have_attribute("data-compatible", "false")
    row = val.locator('tr.lv-val-row[data-table="bank_x"]')
    expect(row.locator("td")).to_have_text(["bank_x (written)", "3", "5", "7", "5", "1", re.compile("FAIL"),
                                            re.compile("pass"), re.compile("pass")])
    r1 = row.locator('td.lv-rule[data-rule="R1"]')
    expect(r1).to_have_attribute("data-passed", "false")
    expect(r1).to_contain_text("r=3 < h-slack=5")
    expect(w.locator(".lv-result .lv-result-inner")).to_have_attribute("data-rule", "R1")
    expect(w.locator(".lv-result")).to_contain_text("What to do: retry the transaction to read current data")
    expect(w.locator(".lv-header .lv-h")).to_have_attribute("data-state", "aborted")
    nb.wait_cells_done([1], timeout_s=WAIT_S)
    assert nb.errors() == [] and nb.execution_counts() == [1, 2]
    expect(w).to_have_class(re.compile(r"\blv-static\b"))  # ended in its cell: the final state, static
    w.locator("summary").click()
    expect(w.locator(".lv-why .lv-why-item")).to_have_attribute("data-rule", "R1 (outdated read)")
    nb.screenshot("validation-r1", w)
