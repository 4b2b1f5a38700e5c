"""A real LV[I] R1 abort, rendered by the transaction widget with its numbers (no browser)."""

from __future__ import annotations

import re

import pytest

import lv_core
from lv_core.errors import TransactionAborted
from tests.helpers.bank import add_kv, make_kv, read_kv, write_kv
from widgets import TransactionWidget


def test_widget_shows_a_real_r1_failure_with_its_numbers(tmp_path):
    lh = lv_core.connect(str(tmp_path))
    make_kv(lh, "x", {1: 100.0})
    make_kv(lh, "y", {1: 100.0})
    first = lh.begin("serializable")  # puts both tables into the global version log
    add_kv(first, "x", 1, 0)
    add_kv(first, "y", 1, 0)
    first.commit()
    t3 = lh.begin("serializable", name="T3")
    w = TransactionWidget(t3)
    seen = read_kv(t3, "x", 1)[1]
    other = lh.begin("serializable")
    add_kv(other, "x", 1, 1)
    other.commit()
    write_kv(t3, "y", 1, seen)
    with pytest.raises(TransactionAborted) as ei:
        t3.commit()
    x = ei.value.details["validation"]["tables"]["x"]
    w.flush()
    html = w.to_html()
    assert 'data-failed-rule="R1"' in html and 'data-compatible="false"' in html
    assert re.search(r'data-rule="R1"[^>]*data-passed="false"', html)
    # the R1 detail names the read and hidden versions and the newer versions that changed what was read
    assert f"r={x['r']} &lt; h={x['h']}; versions that changed what it read: {x['h']}" in html
    text = w.to_text()
    assert "R1" in text and "aborted" in text.lower()
