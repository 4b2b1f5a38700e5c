"""Marker claims under contention (issue 38): a process whose claims on a table lost races lately
sends the LIST of the marker objects with its first try, so a lost first try jumps past the highest
claim at once (2 round trips instead of 3; eight writers of one table lost 1.8 races per claim), and lists
them when a writing operation starts, so that its first try goes just above the highest claim."""

from __future__ import annotations

import pytest

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


def _contended_writer(tmp_path):
    """Kernel ``a`` (counted) knows table x's log end; kernel ``b`` then holds three pending markers above it."""
    from lv_core import Lakehouse
    from tests.helpers.bank import add_kv, logged_xy

    b = logged_xy(str(tmp_path / "wh"), {1: 100.0, 10: 1.0, 11: 1.0, 12: 1.0})
    st = InstrumentedStore(b.store)
    a = Lakehouse(st, lease_s=5.0)
    top = a.snapshot("x").version
    held = []
    for k in range(3):
        w = b.begin("serializable")
        add_kv(w, "x", 10 + k, 1)
        held.append(w)
    return a, st, top, held


def test_a_contended_writer_lists_the_markers_when_its_operation_starts_and_wins_its_first_claim(tmp_path, monkeypatch):
    """Fails on the code before: the first try went to the version after the log end a knew, lost to b's
    marker there, and the second jumped past the highest claim (2 tries)."""
    from lv_core import events as ev
    from tests.helpers.bank import add_kv
    from tests.helpers.spy import record_requests

    a, st, top, held = _contended_writer(tmp_path)
    a.logs.note_claim("x", 2)  # (this process lost a race on x a moment ago)
    seen = record_requests(monkeypatch, st)
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)
    placed = [(e.version, e.attempts) for e in t.events.history if isinstance(e, ev.MarkerPlaced)]
    assert placed == [(top + 4, 1)]
    listed = seen.index(("LIST", "_lakevilla/markers/x/"))
    written = next(i for i, (kind, key) in enumerate(seen) if kind == "PUT-create" and key.endswith(".parquet"))
    assert listed < written, seen  # (listed when the operation starts, before its data file is written)
    for w in (t, *held):
        w.rollback()


def test_an_uncontended_writer_and_a_query_list_no_markers(tmp_path, monkeypatch):
    from tests.helpers.bank import add_kv, read_kv
    from tests.helpers.spy import record_requests

    a, st, _top, held = _contended_writer(tmp_path)
    seen = record_requests(monkeypatch, st)
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)  # (not contended: the first try lost, the LIST went with the second)
    t.rollback()
    first = [k for k, key in seen if k == "LIST" and "markers" in key]
    a.logs.note_claim("x", 2)
    seen.clear()
    q = a.begin("serializable")
    read_kv(q, "x")
    q.rollback()
    assert len(first) == 1 and not [k for k, key in seen if k == "LIST" and "markers" in key], seen
    for w in held:
        w.rollback()


def test_a_contended_writer_reads_the_versions_below_the_highest_claim_beside_its_claim(tmp_path, monkeypatch):
    """The versions between a's read version and its marker (b's three pending markers) are read beside the
    claim, not after it: the claim's PUT is held until a GET of b's first marker is under way. Read after the
    claim (the code before), that GET waits for the claim: the gate waits out its 10 s and the test fails.
    They are predecessors as before."""
    import threading

    from tests.helpers.bank import add_kv

    a, st, top, held = _contended_writer(tmp_path)
    a.logs.note_claim("x", 2)
    below_read = threading.Event()
    together: list[bool] = []
    request = st._request

    def gate(kind, key, call):
        if kind == "GET" and key == f"_lakevilla/markers/x/{top + 1:020d}.json":
            below_read.set()
        if kind == "PUT-create" and key == f"_lakevilla/markers/x/{top + 4:020d}.json" and not together:
            together.append(below_read.wait(10))
        return request(kind, key, call)

    monkeypatch.setattr(st, "_request", gate)
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)
    assert together == [True]
    ts = t.core.book.tables["x"]
    assert ts.marker_version == top + 4 and sorted(ts.pending) == [top + 1, top + 2, top + 3]
    for w in (t, *held):
        w.rollback()


def test_a_claim_that_jumped_past_unknown_claims_keeps_the_table_contended(tmp_path, monkeypatch):
    """A jump that wins at once still found claims this process did not know of: it renews the table's
    contention (else the table counts as uncontended ``contended_s`` after the last lost race, and the next
    claim loses its race again; from the review). Fails on the code before: not contended at the end."""
    import types

    from lv_core.protocol import tablelog
    from tests.helpers.bank import add_kv

    a, _st, _top, held = _contended_writer(tmp_path)
    now = [1000.0]
    monkeypatch.setattr(tablelog, "time", types.SimpleNamespace(monotonic=lambda: now[0]))  # (the window's clock)
    a.logs.note_claim("x", 2)  # a race lost at 1000 s
    now[0] = 1001.5
    t = a.begin("serializable")
    add_kv(t, "x", 1, 1)  # contended at 1001.5: jumps past b's three claims and wins at once
    now[0] = 1003.0  # 3 s after the lost race, 1.5 s after the jump
    assert a.logs.claims_contended("x", 2.0)
    for w in (t, *held):
        w.rollback()


def test_a_marker_that_cannot_be_recorded_gives_up_the_markers_placed_after_it(tmp_path, monkeypatch):
    """One operation writes x and y; recording x's marker fails (its versions below cannot be read): y's
    marker, placed beside the operation, is given up at once instead of being left to its lease (from the
    review; before, it stayed pending until its lease ran out)."""
    from lv_core import events as ev
    from lv_core.engine import arrow_ops as ops
    from lv_core.errors import StorageError
    from lv_core.txn import access
    from lv_core.txn.ops import Operation
    from tests.helpers.bank import logged_xy

    lh = logged_xy(str(tmp_path / "wh"), {1: 100.0})
    upd = {t: ops.update(t, ops.eq("id", 1), ops.add_to("val", 1.0)) for t in ("x", "y")}

    def both(ctx):
        rx, ry = upd["x"].run(ctx), upd["y"].run(ctx)
        rx.adds.update(ry.adds), rx.removes.update(ry.removes), rx.reads.update(ry.reads)
        rx.scans |= ry.scans
        rx.may_match.update(ry.may_match)
        return rx

    real = access.record_write_marker

    def failing(core, ts, *args):
        if ts.name == "x":
            raise StorageError("the versions below x's marker cannot be read")
        return real(core, ts, *args)

    from lv_core.txn import execute
    monkeypatch.setattr(execute, "record_write_marker", failing)
    t = lh.begin("serializable")
    with pytest.raises(StorageError):
        t.execute(Operation("update", ("x", "y"), both))
    freed = {e.table for e in t.events.history if isinstance(e, ev.MarkerFreed)}
    placed = {e.table for e in t.events.history if isinstance(e, ev.MarkerPlaced)}
    assert placed == {"x", "y"} and "y" in freed, t.events.history
    t.rollback()


def test_every_lost_race_costs_one_round_trip_the_list_going_beside_the_next_try(tmp_path):
    """Others win the race for each of the first three versions the claimer tries (they claim it just
    before its PUT): after the first loss it tries 2 beside a LIST, jumps to 3 from it, and after losing
    that too tries 4 beside a second LIST, instead of waiting for that LIST first (the code before: a loss
    after the jump listed, then tried: two round trips per loss). Held until the fourth try's PUT is under
    way, that LIST waits out its gate on the code before."""
    import threading

    from lv_core.protocol.layout import marker_key
    from lv_core.storage.base import CREATE

    store = _store(tmp_path)
    inner_put, inner_list = store.put, store.list
    fourth = threading.Event()
    lists: list[bool] = []  # per LIST: whether it waited for the fourth try's PUT to start

    def put(key, data, *, mode=None, **kw):
        for v in (1, 2, 3):
            if key == marker_key("t", v) and b'"me"' in data:
                inner_put(key, b'{"commitInfo":{"lakevilla":{"kind":"marker","txn":"other"}}}', mode=CREATE)
        if key == marker_key("t", 4):
            fourth.set()
        return inner_put(key, data, mode=mode, **kw) if mode is not None else inner_put(key, data, **kw)

    def listing(prefix, **kw):
        if lists:  # the second LIST: sent beside the fourth try, or after the third loss?
            lists.append(fourth.wait(5.0))
        else:
            lists.append(True)
        return inner_list(prefix, **kw)

    store.put, store.list = put, listing  # type: ignore[method-assign]
    v, _, attempts = place_marker(store, "t", 1, MarkerInfo("me"))
    assert (v, attempts) == (4, 4)
    assert lists == [True, True], lists
