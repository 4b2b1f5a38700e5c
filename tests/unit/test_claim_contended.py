"""Marker claims under contention (issue 38): a process whose claims on a table lost races lately
sends the LIST of the marker objects with its first try, so a lost first try jumps past the highest
claim at once (2 round trips instead of 3; eight writers of one table lost 1.8 races per claim)."""

from __future__ import annotations

import lv_core
from lv_core.protocol.markers import MarkerInfo, place_marker
from lv_core.protocol.tablelog import TableLogs
from lv_core.storage.instrumented import InstrumentedStore


def _store(tmp_path) -> InstrumentedStore:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.create_table("t", "id BIGINT")
    return InstrumentedStore(lh.store)


def test_a_contended_claim_lists_with_its_first_try_and_jumps_past_the_highest_claim(tmp_path):
    """Fails on the code before (no ``contended``; it tried 1, then 2 with the LIST, then 5)."""
    store = _store(tmp_path)
    for v in range(1, 5):  # four claims by others past the start
        place_marker(store, "t", v, MarkerInfo(f"other-{v}"))
    before = store.counts()
    v, _, attempts = place_marker(store, "t", 1, MarkerInfo("me"), contended=True)
    made = {k: n - before.get(k, 0) for k, n in store.counts().items() if n - before.get(k, 0)}
    assert (v, attempts) == (5, 2)
    assert made == {"PUT-create": 2, "LIST": 1, "HEAD": 2}, made


def test_an_uncontended_claim_sends_no_list(tmp_path):
    store = _store(tmp_path)
    before = store.counts()
    v, _, attempts = place_marker(store, "t", 1, MarkerInfo("me"), contended=False)
    made = {k: n - before.get(k, 0) for k, n in store.counts().items() if n - before.get(k, 0)}
    assert (v, attempts) == (1, 1) and made == {"PUT-create": 1, "HEAD": 1}, made


def test_a_process_remembers_a_lost_claim_for_a_while(tmp_path):
    logs = TableLogs(_store(tmp_path))
    assert not logs.claims_contended("t", 2.0)
    logs.note_claim("t", 1)  # won at once
    assert not logs.claims_contended("t", 2.0)
    logs.note_claim("t", 3)
    assert logs.claims_contended("t", 2.0) and not logs.claims_contended("u", 2.0)
    assert not logs.claims_contended("t", -1.0)  # (older than the window)
