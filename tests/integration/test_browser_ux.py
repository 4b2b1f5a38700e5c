"""Browser tier, the widget's UX: status line and details, live DAG, progress and Cancel, dark theme,
the "why" panel, and saved notebooks that keep each transaction's outcome.

Real JupyterLab and headless Chromium (fixtures in conftest.py, one server for the run). The
notebooks are in ``notebooks/ux_*.ipynb``; all but ``ux_cancel`` run without Spark. Screenshots land
in ``test-artifacts/browser/ux-*.png``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

WAIT_MS = 30_000  # generous: 2 shared cores


def _widget(page: Any, name: str) -> Any:
    """The transaction widget of the transaction called ``name`` (by its status line)."""
    return page.locator(f'.jp-OutputArea-output .lv-txn:has(.lv-sum[data-name="{name}"])')


def _final_text(nb: Any, cell: int, name: str) -> str:
    """The text/plain fallback the frontend holds (and saves) for ``name``'s widget in ``cell``."""
    for out in nb.outputs(cell):
        text = (out.get("data") or {}).get("text/plain", "")
        text = "".join(text) if isinstance(text, list) else text
        if text.startswith(f"Transaction {name} "):
            return text
    return ""


def _luminance(css_colour: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _run_all(nb: Any, cells: int, timeout_s: float = 60) -> None:
    """Run cells ``0 .. cells-1`` (all of them when the notebook has no more) and wait for them."""
    if cells >= len(nb.execution_counts()):
        nb.run_all()
    else:
        nb.run_all_above(cells)
    nb.wait_cells_done(list(range(cells)), timeout_s=timeout_s)


def test_collapsed_status_line_expands_to_details(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook("ux_collapse.ipynb")
    _run_all(nb, 2)
    assert nb.errors() == []
    w = _widget(nb.page, "C1")
    summary = w.locator(".lv-summary .lv-sum")
    expect(summary).to_have_attribute("data-state", "active", timeout=WAIT_MS)
    expect(summary).to_contain_text("repeatable_read")
    expect(summary).to_contain_text("bank_x@3 bank_y@3")
    # Collapsed: one line, the details hidden.
    expect(w.locator(".lv-details")).to_be_hidden()
    box = w.bounding_box()
    assert box is not None and box["height"] < 60, box
    nb.screenshot("ux-1-collapsed", w)
    # Expanded by the toggle (in the browser alone): markers, DAG, timeline, result.
    w.locator(".lv-toggle-label").click()
    expect(w.locator(".lv-details")).to_be_visible()
    expect(w.locator(".lv-markers tr.lv-marker-row")).to_have_count(2)
    expect(w.locator(".lv-dag svg g.node.lv-node-self")).to_contain_text("C1")
    expect(w.locator(".lv-result .lv-result-inner")).to_have_attribute("data-outcome", "running")
    nb.screenshot("ux-1-expanded", w)
    w.locator(".lv-toggle-label").click()
    expect(w.locator(".lv-details")).to_be_hidden()
    # A later cell commits: the output becomes the final state, static, still one line until opened.
    nb.run_cell(2)
    expect(w).to_have_class(re.compile(r"\blv-static\b"), timeout=WAIT_MS)
    nb.wait_cells_done([2], timeout_s=30)
    expect(summary).to_have_attribute("data-state", "committed")
    expect(summary).to_contain_text("requests")
    expect(w.locator(".lv-details")).to_be_hidden()
    nb.screenshot("ux-1-final-collapsed", w)
    w.locator("summary").click()
    expect(w.locator(".lv-details")).to_be_visible()
    expect(w.locator(".lv-result .lv-result-inner")).to_have_attribute("data-outcome", "committed")
    first = w.locator(".lv-timeline li").first  # newest first, fully visible
    expect(first).to_contain_text("committed: bank_x@3, bank_y@3")
    expect(first).to_be_in_viewport()
    nb.screenshot("ux-1-final-expanded", w)


def test_dark_theme(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook("ux_collapse.ipynb")
    page = nb.page
    _run_all(nb, 2)
    w = _widget(page, "C1")
    expect(w.locator(".lv-summary .lv-sum")).to_have_attribute("data-state", "active", timeout=WAIT_MS)
    light = w.locator(".lv-sum-name").evaluate("e => getComputedStyle(e).color")
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    try:
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=WAIT_MS)
        w.locator(".lv-toggle-label").click()
        expect(w.locator(".lv-details")).to_be_visible()
        page.wait_for_function(  # the theme's stylesheet applied to the widget's text
            "([sel, old]) => { const e = document.querySelector(sel); return e && getComputedStyle(e).color !== old; }",
            arg=[".jp-OutputArea-output .lv-sum-name", light], timeout=WAIT_MS)
        text = w.locator(".lv-sum-name").evaluate("e => getComputedStyle(e).color")
        body = w.evaluate("e => getComputedStyle(e).backgroundColor")
        entry = w.locator(".lv-timeline li").first.evaluate("e => getComputedStyle(e).color")
        assert _luminance(light) < 100 < _luminance(text), (light, text)  # dark text -> light text
        assert _luminance(body) < 100, body  # a dark background, not a white box
        assert _luminance(entry) > 100, entry
        nb.screenshot("ux-4-dark-theme", w)
        nb.run_cell(2)  # committed: the static final state follows the theme too
        expect(w).to_have_class(re.compile(r"\blv-static\b"), timeout=WAIT_MS)
        w.locator("summary").click()
        expect(w.locator(".lv-details")).to_be_visible()
        assert _luminance(w.locator(".lv-sum-name").evaluate("e => getComputedStyle(e).color")) > 100
        assert _luminance(w.evaluate("e => getComputedStyle(e).backgroundColor")) < 100
        nb.screenshot("ux-4-dark-theme-final", w)
    finally:
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=WAIT_MS)


def test_live_dag_shows_two_transactions_waiting(notebook: Any) -> None:
    from playwright.sync_api import expect

    t0 = time.monotonic()
    marks: dict[str, float] = {}
    nb = notebook("ux_dag.ipynb")
    page = nb.page
    marks["open"] = time.monotonic() - t0
    _run_all(nb, 3)
    marks["cells 0-2"] = time.monotonic() - t0
    assert nb.errors() == []
    t1, t2, t3 = (_widget(page, n) for n in ("T1", "T2", "T3"))
    expect(t2.locator(".lv-sum")).to_have_attribute("data-state", "waiting", timeout=WAIT_MS)
    expect(t3.locator(".lv-sum")).to_have_attribute("data-state", "waiting", timeout=WAIT_MS)
    # T1's own events know nothing of T2 and T3: its widget found them by scanning bank_x's markers.
    body = t1.locator(".lv-dag .lv-dag-body")
    marks["T2, T3 waiting"] = time.monotonic() - t0
    expect(body).to_have_attribute("data-others", "2", timeout=WAIT_MS)
    marks["T1 sees them"] = time.monotonic() - t0
    svg = t1.locator(".lv-dag svg")
    expect(svg.locator("g.node.lv-node-self")).to_contain_text("T1")
    expect(svg.locator("g.node")).to_have_count(3)
    for name in ("T2", "T3"):
        expect(svg.locator("g.node", has_text=name)).to_have_count(1)
    expect(svg.locator("g.edge.lv-edge-waiting")).not_to_have_count(0)  # edges into T1: they wait for it
    expect(svg.locator("g.edge text", has_text="bank_x@3")).not_to_have_count(0)
    expect(t1.locator(".lv-sum")).to_have_attribute("data-state", "active")
    nb.screenshot("ux-3-live-dag-T1", t1)
    nb.screenshot("ux-3-live-dag-page")
    # T1 commits: T2 and T3 follow; T1's DAG no longer shows the (finished) others.
    nb.run_cell(3)
    for w in (t1, t2, t3):
        expect(w.locator(".lv-sum")).to_have_attribute("data-state", "committed", timeout=WAIT_MS)
    marks["all committed"] = time.monotonic() - t0
    expect(body).to_have_attribute("data-others", "0")
    nb.wait_cells_done([3], timeout_s=60)
    marks["cell 3 done"] = time.monotonic() - t0
    (nb.artifacts / "ux-3-timings.txt").write_text("".join(f"{k}: {v:.2f} s\n" for k, v in marks.items()))
    assert nb.errors() == []
    nb.screenshot("ux-3-live-dag-committed")


def test_abort_why_panel_names_the_other_transaction(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook("ux_abort.ipynb")
    page = nb.page
    _run_all(nb, 4)
    assert nb.errors() == []
    late = _widget(page, "LATE")
    expect(late.locator(".lv-sum")).to_have_attribute("data-state", "aborted", timeout=WAIT_MS)
    expect(late.locator(".lv-sum")).to_contain_text("aborted (timeout)")
    why = late.locator(".lv-why .lv-why-item[data-kind='abort']")
    expect(why).to_have_attribute("data-other", "HOLD")
    expect(why).to_have_attribute("data-rule", "timeout (wait timed out)")
    expect(why).to_contain_text("timed out after 2s waiting for transaction HOLD (marker bank_y@3)")
    expect(why.locator(".lv-why-help")).to_contain_text("What to do:")
    nb.screenshot("ux-5-why-abort", late)
    redo = _widget(page, "REDO")
    expect(redo.locator(".lv-sum")).to_have_attribute("data-state", "committed", timeout=WAIT_MS)
    item = redo.locator(".lv-why .lv-why-item[data-kind='redo']")
    expect(item).to_have_attribute("data-other", "FIRST")
    expect(item).to_contain_text("committed bank_x@3")
    expect(item).to_contain_text("which changed what step 0 read (1 file): redone from step 0")
    nb.screenshot("ux-5-why-redo", redo)
    nb.run_cell(4)
    nb.wait_cells_done([4], timeout_s=30)


def test_progress_and_cancel_interrupt_a_long_spark_statement(notebook: Any) -> None:
    from playwright.sync_api import expect

    t0 = time.monotonic()
    marks: dict[str, float] = {}
    nb = notebook("ux_cancel.ipynb")
    page = nb.page
    marks["open"] = time.monotonic() - t0
    _run_all(nb, 2, timeout_s=90)  # Spark is reached here
    marks["Spark up, table made"] = time.monotonic() - t0
    assert nb.errors() == []
    nb.run_cell(2)  # the long statement: the cell stays busy
    w = _widget(page, "LONG")
    prog = w.locator(".lv-progress-box")
    expect(prog).to_be_visible(timeout=WAIT_MS)
    expect(prog.locator(".lv-prog")).to_contain_text(re.compile(r"statement 1 · running"))  # the data plane reports
    expect(prog.locator(".lv-prog")).not_to_have_attribute("data-total", "0", timeout=WAIT_MS)  # a Spark report
    expect(prog.locator(".lv-prog")).to_contain_text(re.compile(r"\d+/[1-9]\d* tasks"))
    num = prog.locator(".lv-prog-num")
    expect(num).not_to_have_text(num.inner_text(), timeout=WAIT_MS)  # the clock runs while the statement does
    cancel = prog.locator("button.lv-cancel")
    expect(cancel).to_be_visible()
    assert nb.execution_counts()[2] is None  # still running
    marks["progress shown"] = time.monotonic() - t0
    nb.screenshot("ux-2-progress", w)
    cancel.click()
    expect(w.locator(".lv-sum")).to_have_attribute("data-state", "aborted", timeout=WAIT_MS)
    expect(w.locator(".lv-sum")).to_contain_text("aborted (interrupt)")  # cancelled, not a user rollback
    marks["rolled back"] = time.monotonic() - t0
    expect(prog).to_be_hidden()
    nb.wait_cells_done([2], timeout_s=30)
    errors = nb.errors()
    # one line, no traceback: "cancelled: statement 1 stopped, transaction LONG rolled back; nothing changed"
    assert len(errors) == 1 and errors[0].startswith("cell 2") and "cancelled: statement 1" in errors[0], errors
    assert "Traceback" not in errors[0], errors
    expect(w.locator(".lv-result .lv-result-inner")).to_have_attribute("data-rule", "interrupt")
    nb.screenshot("ux-2-cancelled", w)
    (nb.artifacts / "ux-2-timings.txt").write_text("".join(f"{k}: {v:.2f} s\n" for k, v in marks.items()))


def test_saved_notebook_shows_each_final_outcome(notebook: Any, lab: Any) -> None:
    """Run in Lab, save, shut the kernel down: plain nbconvert and Lab itself show the final outcomes."""
    import nbconvert
    import nbformat
    from playwright.sync_api import expect

    nb = notebook("ux_saved.ipynb")
    _run_all(nb, 4)
    assert nb.errors() == []
    finals = {name: _final_text(nb, cell, name) for cell, name in ((1, "OK1"), (2, "LATE"), (3, "UNDO"))}
    for name, want in (("OK1", "[committed]"), ("LATE", "[aborted]"), ("UNDO", "[aborted]")):
        assert want in finals[name].splitlines()[0], finals
    # Ended in their cells: each output is now the static final state, its details one click away.
    late = _widget(nb.page, "LATE")
    expect(late).to_have_class(re.compile(r"\blv-static\b"))
    expect(late.locator(".lv-details")).to_be_hidden()
    late.locator("summary").click()
    expect(late.locator(".lv-why .lv-why-item")).to_have_attribute("data-other", "HOLD")
    nb.save()
    nb.close()  # the kernel is gone: only the file is left
    saved = nbformat.read(lab.root / "ux_saved.ipynb", as_version=4)
    assert "widgets" not in saved.metadata  # no widget state saved: the outputs are all there is
    body, _ = nbconvert.HTMLExporter().from_notebook_node(saved)
    (nb.artifacts / "ux-6-saved.html").write_text(body)
    tags = re.findall(r'<span class="lv-sum"[^>]*>', body)
    states = {re.search(r'data-name="(\w+)"', t).group(1): re.search(r'data-state="(\w+)"', t).group(1)  # type: ignore[union-attr]
              for t in tags}
    assert states == {"OK1": "committed", "LATE": "aborted", "UNDO": "aborted"}, states
    assert "[active]" not in body and 'data-outcome="running"' not in body
    assert 'data-outcome="aborted" data-rule="timeout"' in body and 'data-rule="rollback"' in body
    assert "Committed: bank_x@3" in body
    shot = nb.page.context.new_page()  # the converted page itself (its CDN scripts are blocked: not needed)
    try:
        shot.set_content(body, wait_until="domcontentloaded")
        static = shot.locator(".lv-static", has=shot.locator('.lv-sum[data-name="LATE"]'))
        expect(static.locator(".lv-sum")).to_contain_text("aborted (timeout)")
        static.locator("summary").click()
        expect(static.locator(".lv-why .lv-why-item")).to_contain_text("HOLD")
        shot.screenshot(path=str(nb.artifacts / "ux-6-nbconvert.png"), full_page=True)
    finally:
        shot.close()
    # Reopened in JupyterLab (nothing run): the same outcomes, no "model not found".
    again = notebook("ux_saved.ipynb")
    for name, state in states.items():
        expect(_widget(again.page, name).locator(".lv-sum")).to_have_attribute("data-state", state)
    expect(again.page.locator(".jp-OutputArea-output", has_text="model not found")).to_have_count(0)
    again.screenshot("ux-6-reopened")


def _texts(nb: Any, cell: int) -> str:
    out = []
    for o in nb.outputs(cell):
        data = o.get("data") or {}
        text = data.get("text/plain", "") if data else o.get("text", "")
        out.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(out)


def test_background_commit_shows_its_outcome_in_its_own_cell_and_the_saved_file(notebook: Any, lab: Any) -> None:
    """`%lv commit t2` waits behind t1 and returns; when `%lv commit t1` ends t2's wait, the output of
    the `%lv commit t2` cell itself turns into t2's outcome, live and in the saved notebook."""
    import nbformat
    from playwright.sync_api import expect

    nb = notebook("ux_background.ipynb")
    _run_all(nb, 5)
    assert nb.errors() == []
    asked = nb.page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea-output .lv-outcome")
    expect(asked).to_have_attribute("data-outcome", "aborted", timeout=WAIT_MS)
    expect(asked).to_contain_text("t2 aborted (exposed_read: returned result changed), nothing changed")
    expect(asked).to_contain_text("after waiting for t1 at kv@")
    assert re.search(r"^t1 committed: kv@\d+\nt2 aborted \(exposed_read", _texts(nb, 4)), _texts(nb, 4)
    assert "t2 aborted (exposed_read" in _texts(nb, 3) and "continues in the background" not in _texts(nb, 3)
    nb.screenshot("ux-7-background-outcome")
    nb.save()
    saved = nbformat.read(lab.root / "ux_background.ipynb", as_version=4)
    kept = "".join(o.get("data", {}).get("text/plain", "") for o in saved.cells[3].outputs)
    assert kept.startswith("t2 aborted (exposed_read: returned result changed)"), kept
