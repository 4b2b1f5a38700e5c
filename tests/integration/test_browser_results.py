"""Browser tier, results: a ``%%lvsql --chart bar`` cell in a real JupyterLab with headless Chromium
draws its chart (inline SVG under the result table, visible, with a size), the table shows a NULL
sum as ``NULL`` and integer sums as integers, and the saved output keeps the chart.

The notebook is ``notebooks/results_chart.ipynb`` (its first cell reaches Spark). Screenshots land in
``test-artifacts/browser/results-*.png``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.spark, pytest.mark.timeout(300)]

WAIT_MS = 30_000  # generous: 2 shared cores


def test_chart_renders_under_the_result(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook("results_chart.ipynb")
    page = nb.page
    nb.run_all()
    nb.wait_cells_done([0, 1, 2], timeout_s=240)  # cell 0 reaches Spark
    assert nb.errors() == []
    out = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-OutputArea-output")
    chart = out.locator(".lv-chart svg")
    expect(chart).to_be_visible(timeout=WAIT_MS)
    box = chart.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 100, box
    expect(out.locator(".lv-chart")).to_have_attribute("title", "bar chart of total, bonus by region (3 rows)")
    nb.screenshot("results-chart", out.first)
    # the result table under which it is drawn: NULL for eu's bonus sum, integers as integers
    rows = out.locator("table.lv-rows tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1).locator("td")).to_have_text(["eu", "3", "NULL"])
    expect(rows.nth(0).locator("td")).to_have_text(["asia", "4", "1"])
    saved = [o for o in nb.outputs(2) if "<svg" in "".join((o.get("data") or {}).get("text/html", ""))]
    assert len(saved) == 1  # the notebook file keeps the chart (static SVG, no kernel needed)
