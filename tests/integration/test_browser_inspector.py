"""Browser tier, the lakehouse inspector: it updates itself when another client commits (no Refresh),
and a saved notebook reopened without its kernel shows its last state instead of "Error displaying
widget: model not found".

Real JupyterLab and headless Chromium (fixtures in conftest.py, one server for the run); the
notebooks ``inspector_live.ipynb`` and ``inspector_saved.ipynb`` run without Spark. Screenshots land
in ``test-artifacts/browser/inspector-*.png``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

WAIT_MS = 30_000  # generous: 2 shared cores
LIVE = ".jp-OutputArea-output .lv-inspector:not(.lv-static)"  # the widget (the saved copy is .lv-static)
SAVED = ".jp-OutputArea-output .lv-inspector-saved"

_VISIBLE_TEXT = """(text) => Array.from(document.querySelectorAll('.jp-OutputArea-output'))
    .filter(e => e.offsetParent !== null && e.innerText.includes(text)).length"""


def _text(out: dict[str, Any], mime: str) -> str:
    body = (out.get("data") or {}).get(mime, "")
    return "".join(body) if isinstance(body, list) else str(body)


def test_inspector_updates_without_refresh_when_another_client_commits(notebook: Any) -> None:
    from playwright.sync_api import expect

    import lv_core
    from tests.integration.browser_nb import transfer

    nb = notebook("inspector_live.ipynb")
    nb.run_all()
    nb.wait_cells_done([0, 1], timeout_s=60)
    assert nb.errors() == []
    url = re.search(r"warehouse: (\S+)", _text(nb.outputs(0)[0], "text/plain") or nb.outputs(0)[0].get("text", ""))
    assert url, nb.outputs(0)
    page = nb.page
    insp = page.locator(LIVE)
    expect(insp.locator('tr.lv-table-row[data-table="bank_x"]')).to_have_attribute("data-version", "2",
                                                                                    timeout=WAIT_MS)
    expect(insp.locator(".lv-live-status [data-live]")).to_have_attribute("data-live", "on")
    expect(page.locator(SAVED)).to_be_hidden()  # the saved copy hides while the widget is live
    expect(insp.locator(".lv-no-markers")).to_be_visible()

    # Another client (this test process) places a marker: the inspector shows it by itself.
    other = lv_core.connect(url.group(1), lease_s=30.0)
    txn = other.begin("repeatable_read", name="OUTSIDE", timeout_s=60)
    transfer(txn, "bank_x", 1, -5)
    row = insp.locator(f'tr.lv-live-marker[data-txn="{txn.id}"]')
    expect(row).to_have_attribute("data-version", "3", timeout=WAIT_MS)
    ref = row.locator(".lv-txn-ref")
    expect(ref).to_have_attribute("title", txn.id)  # full id on hover
    expect(ref).to_contain_text(re.compile(rf"(OUTSIDE \()?{txn.id.rsplit('-', 1)[1][:8]}"))
    nb.screenshot("inspector-1-marker", insp)
    # ... and its commit: bank_x@3, no pending marker; the saved copy follows (not shown while live).
    txn.commit()
    expect(insp.locator('tr.lv-table-row[data-table="bank_x"]')).to_have_attribute("data-version", "3",
                                                                                    timeout=WAIT_MS)
    expect(insp.locator(".lv-no-markers")).to_be_visible()
    expect(page.locator(f'{SAVED} tr.lv-table-row[data-table="bank_x"]')).to_have_attribute(
        "data-version", "3", timeout=WAIT_MS)
    assert nb.execution_counts() == [1, 2]  # no cell ran again, nobody pressed Refresh
    nb.screenshot("inspector-2-committed", insp)


def test_saved_inspector_shows_its_last_state_without_a_kernel(notebook: Any, lab: Any) -> None:
    """Run in Lab, save, shut the kernel down, reopen: the inspector's saved copy shows, the widget
    view's "model not found" does not."""
    import nbformat
    from playwright.sync_api import expect

    nb = notebook("inspector_saved.ipynb")
    nb.run_all()
    nb.wait_cells_done([0, 1], timeout_s=60)
    assert nb.errors() == []
    insp = nb.page.locator(LIVE)
    expect(insp.locator('tr.lv-live-marker[data-table="bank_x"]')).to_contain_text("HELD", timeout=WAIT_MS)
    expect(nb.page.locator(SAVED)).to_be_hidden()
    nb.save()
    nb.close()  # the kernel is gone: only the file is left
    saved = nbformat.read(lab.root / "inspector_saved.ipynb", as_version=4)
    outs = saved.cells[1].outputs
    assert len(outs) == 2 and "application/vnd.jupyter.widget-view+json" in outs[0].data
    copy = _text(outs[1], "text/html")
    assert outs[1].metadata.get("lv_inspector_saved") and 'data-table="bank_x"' in copy and "HELD" in copy

    again = notebook("inspector_saved.ipynb")  # reopened: a fresh kernel that never saw the widget
    page = again.page
    shown = page.locator(SAVED)
    expect(shown).to_be_visible(timeout=WAIT_MS)
    expect(shown.locator('tr.lv-live-marker[data-table="bank_x"]')).to_contain_text("HELD")
    expect(shown.locator('tr.lv-table-row[data-table="bank_y"]')).to_be_visible()
    expect(shown.locator("div.lv-summary[data-scanned]")).to_have_attribute("data-live-markers", "1")
    # The widget view did fail to find its model (the case this guards against), but it is hidden.
    expect(page.locator(".jp-OutputArea-output", has_text="model not found")).to_have_count(1, timeout=WAIT_MS)
    assert page.evaluate(_VISIBLE_TEXT, "model not found") == 0
    assert page.evaluate(_VISIBLE_TEXT, "Loading widget") == 0
    again.screenshot("inspector-3-reopened")
