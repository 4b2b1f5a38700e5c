"""Static fallbacks: nbconvert HTML without a widget frontend, from the display bundle or the saved widget state."""

from __future__ import annotations

import re

import nbformat
import pytest

from lv_core import events as ev
from tests.unit.test_widgets_model import A, B, began, stream, waiting_stream
from tests.unit.test_widgets_widget import FakeTxn, descendants
from widgets.nbstatic import WIDGET_STATE, WIDGET_VIEW, StaticWidgetsPreprocessor, make_static

ipywidgets = pytest.importorskip("ipywidgets")

from widgets.txn_widget import TransactionWidget  # noqa: E402


def _notebook_with(bundle: dict, state: dict | None = None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("TransactionWidget(txn)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells = [cell]
    if state is not None:
        nb.metadata["widgets"] = {WIDGET_STATE: state}
    return nb


def test_nbconvert_html_shows_the_bundled_static_html(comms):
    nbconvert = pytest.importorskip("nbconvert")
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w = TransactionWidget(txn)
    nb = _notebook_with(w._repr_mimebundle_())
    exporter = nbconvert.HTMLExporter(preprocessors=[StaticWidgetsPreprocessor])
    body, _ = exporter.from_notebook_node(nb)
    assert '<div class="lv-txn lv-static lv-state-waiting"' in body
    assert "waiting on " in body and 'class="lv-marker-row"' in body
    assert '<script type="application/vnd.jupyter.widget-view+json">' not in body
    w.close()


def test_saved_widget_state_gives_the_final_state(comms):
    """An executor saves widget state at the end: the transaction committed after it was displayed."""
    txn = FakeTxn()
    txn.emit(*waiting_stream())
    w = TransactionWidget(txn)
    bundle = w._repr_mimebundle_()  # displayed while waiting
    txn.emit(*stream(ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
                     ev.Committed(A, versions={"bank_x": 4, "bank_y": 3}, redo_count=0, elapsed_s=1.0), start=2000))
    w.flush()
    state = ipywidgets.Widget.get_manager_state(drop_defaults=False, widgets=[w, *descendants(w)])
    nb = _notebook_with(bundle, state)
    assert make_static(nb) == 1
    data = nb.cells[0].outputs[0]["data"]
    assert WIDGET_VIEW not in data
    html = data["text/html"]
    assert 'class="lv-txn' in html and "lv-state-committed" in html  # the box's classes, final
    assert 'data-outcome="committed"' in html and "Committed: bank_x@4, bank_y@3" in html
    assert "waiting on" not in html
    w.close()


def test_widgets_without_static_form_are_left_alone():
    nb = _notebook_with({WIDGET_VIEW: {"model_id": "x", "version_major": 2, "version_minor": 0},
                         "text/plain": "Slider"})
    assert make_static(nb) == 0 and WIDGET_VIEW in nb.cells[0].outputs[0]["data"]


def test_terminal_gets_text(comms):
    txn = FakeTxn()
    txn.emit(began(), ev.MarkerPlaced(A, table="kv", version=2))
    w = TransactionWidget(txn)
    text = w._repr_mimebundle_()["text/plain"]
    assert text.splitlines()[0].startswith("Transaction T2 [active] preset serializable")
    assert "kv" in text and "@2" in text and "placed" in text
    w.close()


@pytest.mark.notebook
def test_executed_notebook_converts_to_html_with_final_states(tmp_path):
    """nbclient runs the two-transaction notebook; nbconvert HTML shows both transactions committed."""
    import shutil
    from pathlib import Path

    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    src = Path(__file__).parents[1] / "integration" / "notebooks" / "two_txns.ipynb"
    shutil.copy(src, tmp_path / src.name)
    nb = nbformat.read(tmp_path / src.name, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    # Without the saved widget state (as a frontend that does not save it), the outputs' own fallbacks
    # are all that is left: the widgets replaced them by their final state (display id), also T2's,
    # which committed while a later cell ran.
    bare = nbformat.from_dict(nb)
    bare.metadata.pop("widgets", None)
    plain, _ = nbconvert.HTMLExporter().from_notebook_node(bare)
    tags = re.findall(r'<span class="lv-sum"[^>]*>', plain)
    assert {re.search(r'data-name="(\w+)"', t).group(1): re.search(r'data-state="(\w+)"', t).group(1)
            for t in tags} == {"T1": "committed", "T2": "committed"}
    body, _ = nbconvert.HTMLExporter(preprocessors=[StaticWidgetsPreprocessor]).from_notebook_node(nb)
    assert "vnd.jupyter.widget-view+json" not in body and "widget-state+json" not in body  # static only
    tags = re.findall(r'<div class="lv-h"[^>]*>', body)  # (nbconvert may reorder attributes)
    states = {re.search(r'data-name="(\w+)"', t).group(1): re.search(r'data-state="(\w+)"', t).group(1) for t in tags}
    assert states == {"T1": "committed", "T2": "committed"}  # T2 committed in the background, after its cell
    assert "Committed: bank_x@4, bank_y@3 · 1 redo" in body
    assert body.count('class="lv-live-marker"') == 3  # the inspector as scanned while T2 waited
