"""The transaction widget's model: event streams (constructed, and recorded from real runs) -> view state."""

from __future__ import annotations

import time

import pytest

import lv_core
from lv_core import events as ev
from tests.helpers.bank import add_kv, make_kv
from widgets.model import DEFAULT_HELP, TIMELINE_KEEP, fold, short_id, split_help, versions_text

A = "20250101T000000-aaaaaaaaaaaaaaaa"
B = "20250101T000000-bbbbbbbbbbbbbbbb"
C = "20250101T000000-cccccccccccccccc"
NAMES = {B: "T1", C: "T3"}


def stream(*events: ev.Event, start: float = 1000.0) -> list[ev.Event]:
    """Re-stamp events 0.1 s apart from ``start`` (deterministic offsets)."""
    out = []
    for i, e in enumerate(events):
        d = {k: getattr(e, k) for k in e.__dataclass_fields__ if k != "ts"}
        out.append(type(e)(**d, ts=start + i * 0.1))
    return out


def began(txn: str = A, preset: str = "serializable", features=("CT", "I", "R"), name: str | None = "T2"):
    return ev.Began(txn, preset=preset, features=tuple(features), name=name)


def waiting_stream() -> list[ev.Event]:
    return stream(
        began(),
        ev.MarkerPlaced(A, table="bank_y", version=3),
        ev.SnapshotRead(A, table="bank_y", version=2, files=2),
        ev.OperationDone(A, step=0, op="update", table="bank_y", sublog="physical", added=1, removed=1),
        ev.MarkerPlaced(A, table="bank_x", version=4),
        ev.SnapshotRead(A, table="bank_x", version=3, files=2),
        ev.EdgeAdded(A, to_txn=B, table="bank_x", version=3),
        ev.OperationDone(A, step=1, op="update", table="bank_x", sublog="logical", added=1, removed=1),
        ev.Waiting(A, table="bank_x", version=3, on_txn=B),
    )


def test_header_markers_and_dag_while_waiting():
    view = fold(waiting_stream(), names=NAMES, engine_state="committing")
    assert (view.txn, view.name, view.preset, view.features) == (A, "T2", "serializable", ("CT", "I", "R"))
    assert view.state == "waiting" and view.colour == "#c77700"
    assert view.elapsed(now=1000.0 + 5) == pytest.approx(5.0)
    x, y = view.markers["bank_x"], view.markers["bank_y"]
    assert (x.version, x.state, x.waiting_on, x.read_version, x.since) == (4, "waiting", (B, 3), 3,
                                                                           pytest.approx(1000.8))
    assert (y.version, y.state, y.read_version) == (3, "placed", 2)
    assert view.label(B) == "T1" and view.label(A) == "T2" and view.label(C) == "T3"
    [edge] = view.dag.edges
    assert (edge.src, edge.dst, edge.label, edge.status) == (A, B, "bank_x@3", "waiting")
    assert view.dag.nodes == {A: "waiting", B: "pending"}
    assert view.steps == 2 and view.waits_total == 1 and view.result is None and not view.done
    assert [e.level for e in view.timeline][-1] == "wait"
    assert view.timeline[-1].text == "waiting for T1: its marker bank_x@3 is pending"


def test_wait_end_conflict_redo_and_commit():
    events = waiting_stream() + stream(
        ev.WaitEnded(A, table="bank_x", version=3, on_txn=B, outcome="committed"),
        ev.ConflictFound(A, table="bank_x", version=3, step=1, files=("part-1.parquet",)),
        ev.Redo(A, from_step=1, attempt=1),
        ev.OperationDone(A, step=1, op="update", table="bank_x", sublog="logical", added=1, removed=1),
        ev.Requests(A, counts={"GET": 7, "PUT": 4, "PUT-create": 3}),
        ev.Committed(A, versions={"bank_x": 4, "bank_y": 3}, redo_count=1, elapsed_s=1.25),
        start=1001.0)
    mid = fold(events[:10], names=NAMES)
    assert mid.state == "active" and mid.markers["bank_x"].state == "placed"
    assert mid.markers["bank_x"].detail == "waited 0.20 s for T1 (committed)"
    assert mid.dag.edges[0].status == "resolved" and mid.dag.nodes[B] == "committed"
    view = fold(events, names=NAMES)
    assert view.state == "committed" and view.done
    assert {t: (r.version, r.state) for t, r in view.markers.items()} == {"bank_x": (4, "committed"),
                                                                          "bank_y": (3, "committed")}
    assert view.redos == [(1, 1, pytest.approx(1001.2))] and view.conflicts == 1 and view.steps == 3
    assert view.requests == {"GET": 7, "PUT": 4, "PUT-create": 3} and view.requests_total == 14
    assert "Requests" not in [e.kind for e in view.timeline]  # counts, not timeline noise
    res = view.result
    assert (res.outcome, res.versions, res.redo_count, res.elapsed_s) == ("committed", {"bank_x": 4, "bank_y": 3},
                                                                          1, 1.25)
    assert view.elapsed() == 1.25  # the committed elapsed time, not "now"
    assert view.timeline[-1].text == "committed: bank_x@4, bank_y@3, 1 redo, 1.25 s"


def test_abort_reason_and_what_to_do():
    reason = ("timed out after 5s waiting for transaction X (marker bank_x@3). Help: commit or roll back that "
              "transaction, or retry.")
    view = fold(waiting_stream() + stream(
        ev.MarkerFreed(A, table="bank_x", version=4, reason="timeout"),
        ev.MarkerFreed(A, table="bank_y", version=3, reason="timeout"),
        ev.Aborted(A, reason=reason, rule="timeout")))
    assert view.state == "aborted" and not view.waits
    assert view.result.rule == "timeout"
    assert view.result.reason == "timed out after 5s waiting for transaction X (marker bank_x@3)."
    assert view.result.help == "commit or roll back that transaction, or retry."
    assert {r.state for r in view.markers.values()} == {"freed"}
    assert view.markers["bank_x"].detail == "timeout"
    assert all(e.status == "resolved" for e in view.dag.edges)
    bare = fold(stream(began(), ev.Aborted(A, reason="R1 (outdated read): x.", rule="R1")))
    assert bare.result.help == DEFAULT_HELP["R1"]
    assert split_help("no help here") == ("no help here", "")


def test_outcome_unknown_keeps_its_markers(tmp_path):
    """A real decided commit whose publication kept failing: the widget says 'outcome unknown', does
    not show its pending marker as freed, and tells the user not to run it again yet."""
    from lv_core import Lakehouse
    from lv_core.storage.instrumented import InstrumentedStore
    from widgets.render import render_text, result_html

    plain = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0)
    make_kv(plain, "kv", {1: 100.0})
    make_kv(plain, "kv2", {1: 100.0})
    store = InstrumentedStore(plain.store)
    lh = Lakehouse(store, lease_s=1.0)
    txn = lh.begin("repeatable_read")
    add_kv(txn, "kv", 1, -5)
    add_kv(txn, "kv2", 1, 5)
    store.fail("PUT-create", key_contains="kv2/_delta_log/", times=3)
    with pytest.raises(lv_core.LvError):
        txn.commit()
    view = fold(txn.events.history)
    assert txn.state == view.state == "unknown" and view.result.rule == "unknown"
    assert view.markers["kv2"].state != "freed" and view.markers["kv"].state != "freed"
    assert view.result.help == DEFAULT_HELP["unknown"]
    assert 'data-outcome="unknown"' in result_html(view) and "Outcome unknown" in result_html(view)
    assert "result: outcome unknown (unknown)" in render_text(view)


def test_validation_passed_and_r1_failure_with_numbers():
    ok_tables = {"bank_x": {"r": 5, "h": 5, "w": 6, "l": 5, "written_logs": 0, "read": True, "written": True,
                            "rules": {"R1": {"applies": True, "passed": True, "detail": "r=5 >= h-slack=5"},
                                      "R2": {"applies": True, "passed": True, "detail": "w=6 > h=5"},
                                      "R3": {"applies": True, "passed": True,
                                             "detail": "l+written_logs+1=5+0+1=6 == w=6"}}}}
    view = fold(stream(began(), ev.Validated(A, compatible=True, gvl_version=12, tables=ok_tables)),
                engine_state="committing")
    assert view.state == "validating"
    v = view.validation
    assert v.compatible and v.gvl_version == 12 and v.failed_rule is None
    tv = v.tables["bank_x"]
    assert (tv.r, tv.h, tv.w, tv.l, tv.written_logs, tv.passed) == (5, 5, 6, 5, 0, True)
    assert tv.extra == {"read": True, "written": True}
    bad = {"bank_x": {"r": 3, "h": 5, "w": None, "l": 5, "written_logs": 0,
                      "rules": {"R1": {"applies": True, "passed": False, "detail": "r=3 < h-slack=5"},
                                "R2": {"applies": False, "passed": True, "detail": "not written"},
                                "R3": {"applies": False, "passed": True, "detail": "not written"}}},
           "bank_y": {"r": 2, "h": 2, "w": 3, "l": 2, "written_logs": 0,
                      "rules": {"R1": {"applies": True, "passed": True, "detail": "r=2 >= h-slack=2"}}}}
    view = fold(stream(began(), ev.Validated(A, compatible=False, gvl_version=None, tables=bad, failed_rule="R1"),
                       ev.Aborted(A, reason="R1 (outdated read): table 'bank_x' was read at version 3, but "
                                            "version 5 is committed. Help: retry the transaction.", rule="R1")))
    v = view.validation
    assert not v.compatible and v.failed_rule == "R1"
    r1 = v.tables["bank_x"].rules["R1"]
    assert (r1.applies, r1.passed, r1.detail) == (True, False, "r=3 < h-slack=5")
    assert not v.tables["bank_x"].rules["R2"].applies and v.tables["bank_y"].passed
    assert view.timeline[-2].text == "validation failed: R1 on bank_x" and view.timeline[-2].level == "error"
    assert view.state == "aborted" and view.result.help == "retry the transaction."


def test_cycle_and_marker_shift():
    view = fold(stream(
        began(B, name="T1", features=("CT", "R")),
        ev.MarkerPlaced(B, table="bank_x", version=3),
        ev.MarkerPlaced(B, table="bank_y", version=4),
        ev.EdgeAdded(B, to_txn=A, table="bank_y", version=3),
        ev.CycleFound(B, edges=((B, A, "bank_y@3"), (A, B, "bank_x@3"))),
        ev.MarkerFreed(B, table="bank_x", version=3, reason="shift"),
        ev.EdgeAdded(B, to_txn=A, table="bank_x", version=4),
        ev.MarkerPlaced(B, table="bank_x", version=5, attempts=2, shift=True),
        ev.Shifted(B, moves=(("bank_x", 3, 5),), reason="cycle")), names={A: "T2"})
    x = view.markers["bank_x"]
    assert (x.version, x.state, x.shifted_from) == (5, "shifted", 3)
    edges = {(e.src, e.dst, e.label): e for e in view.dag.edges}
    assert set(edges) == {(B, A, "bank_y@3"), (A, B, "bank_x@3"), (B, A, "bank_x@4")}
    assert edges[(B, A, "bank_y@3")].in_cycle and edges[(A, B, "bank_x@3")].in_cycle
    assert edges[(A, B, "bank_x@3")].inverted and edges[(A, B, "bank_x@3")].status == "resolved"
    assert not edges[(B, A, "bank_x@4")].in_cycle
    assert [(s.moves, s.reason) for s in view.dag.shifts] == [((("bank_x", 3, 5),), "cycle")]
    assert "cycle found: T1 → T2 (bank_y@3) → T1 (bank_x@3)" in [e.text for e in view.timeline]
    committed = fold(stream(began(B), ev.MarkerPlaced(B, table="bank_x", version=3),
                            ev.MarkerFreed(B, table="bank_x", version=3, reason="shift"),
                            ev.MarkerPlaced(B, table="bank_x", version=5, shift=True),
                            ev.Committed(B, versions={"bank_x": 5}, redo_count=0, elapsed_s=0.1)))
    assert committed.markers["bank_x"].detail == "after a shift from @3"


def test_freeing_someone_elses_expired_marker_and_losing_ours():
    view = fold(stream(
        began(),
        ev.MarkerPlaced(A, table="kv", version=5),
        ev.EdgeAdded(A, to_txn=C, table="kv", version=4),
        ev.MarkerFreed(A, table="kv", version=4, reason="expired", by=A),  # C crashed: we freed its marker
        ev.MarkerLost(A, table="kv", version=5),
        ev.MarkerPlaced(A, table="kv", version=7)))
    row = view.markers["kv"]
    assert (row.version, row.state, row.detail) == (7, "placed", "replaces lost @5")
    assert view.dag.edges[0].status == "resolved" and view.dag.edges[0].outcome == "expired-freed"
    assert "freed the expired marker kv@4 of a crashed transaction" in [e.text for e in view.timeline]


def test_read_only_marker_freed_and_delta_preset():
    view = fold(stream(began(), ev.MarkerPlaced(A, table="kv", version=2),
                       ev.SnapshotRead(A, table="kv", version=1, files=1),
                       ev.MarkerFreed(A, table="kv", version=2, reason="read-only"),
                       ev.Committed(A, versions={}, redo_count=0, elapsed_s=0.01)))
    assert view.markers["kv"].state == "freed" and view.markers["kv"].detail == "read-only"
    assert view.result.versions == {}
    delta = fold(stream(began(preset="delta", features=()), ev.Committed(A, versions={"kv": 9}, redo_count=0,
                                                                          elapsed_s=0.02)))
    assert delta.markers["kv"].version == 9 and delta.markers["kv"].state == "committed"


def test_timeline_is_bounded_and_foreign_events_are_ignored():
    ops = [ev.OperationDone(A, step=i, op="insert", table="kv", sublog="physical") for i in range(TIMELINE_KEEP + 100)]
    view = fold(stream(began(), *ops, ev.Began(B, preset="delta", features=())))
    assert len(view.timeline) == TIMELINE_KEEP and view.dropped == 101
    assert view.steps == TIMELINE_KEEP + 100 and view.preset == "serializable"
    assert view.events_seen == TIMELINE_KEEP + 101  # B's event not counted
    with pytest.raises(ValueError):
        fold([])
    assert short_id(A) == "aaaaaaaa"  # the one short form (8 characters) everywhere


# ---------------------------------------------------------------- recorded from real runs (lv_core, no Spark)


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    make_kv(lh, "bank_x", {1: 1000.0, 2: 1000.0})
    make_kv(lh, "bank_y", {3: 1000.0, 4: 1000.0})
    return lh


def _until(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_recorded_figure5_stream(lh):
    """Paper Figure 5 through lv_core: T1's view shows the cycle, the shift, the wait and the redo."""
    t1 = lh.begin("repeatable_read", timeout_s=20, name="T1")
    t2 = lh.begin("repeatable_read", timeout_s=20, name="T2")
    add_kv(t1, "bank_x", 1, -50)
    add_kv(t2, "bank_y", 3, -70)
    add_kv(t2, "bank_x", 1, +70)
    x1 = t1.marker_versions()["bank_x"]
    add_kv(t1, "bank_y", 3, +50)  # closes the cycle: T1 shifts in bank_x
    x1_new = t1.marker_versions()["bank_x"]
    view = fold(t1.events.history, names={t2.id: "T2"}, engine_state=t1.state)
    assert view.state == "active"
    assert view.markers["bank_x"].state == "shifted" and view.markers["bank_x"].shifted_from == x1
    assert view.markers["bank_x"].version == x1_new and view.markers["bank_x"].read_version == x1 - 1
    assert [s.moves for s in view.dag.shifts] == [(("bank_x", x1, x1_new),)]
    assert len(view.dag.cycles) == 1
    inverted = [e for e in view.dag.edges if e.inverted]
    assert [(e.src, e.dst, e.label) for e in inverted] == [(t2.id, t1.id, f"bank_x@{x1}")]
    fut = t1.commit_async()
    r2 = t2.commit()
    r1 = fut.result(timeout=30)
    v1 = fold(t1.events.history, names={t2.id: "T2"})
    v2 = fold(t2.events.history, names={t1.id: "T1"})
    assert v1.state == v2.state == "committed"
    assert v1.result.versions == r1.versions and v2.result.versions == r2.versions
    assert v1.result.redo_count == r1.redo_count == len(v1.redos)
    assert {t: r.version for t, r in v1.markers.items()} == r1.versions
    assert all(e.status == "resolved" for e in v1.dag.edges)
    assert [(e.dst, e.label) for e in v2.dag.edges] == [(t1.id, f"bank_x@{x1}")]


def test_recorded_background_wait_then_commit(lh):
    """T2 commits in the background behind T1: its view shows the wait, then the commit after a redo."""
    t1 = lh.begin("repeatable_read", timeout_s=20, name="T1")
    t2 = lh.begin("repeatable_read", timeout_s=20, name="T2")
    add_kv(t1, "bank_x", 1, -50)
    add_kv(t2, "bank_x", 1, +70)
    v1 = t1.marker_versions()["bank_x"]
    fut = t2.commit_async()
    _until(lambda: any(isinstance(e, ev.Waiting) for e in t2.events.history))
    view = fold(t2.events.history, names={t1.id: "T1"}, engine_state=t2.state)
    assert view.state == "waiting"
    row = view.markers["bank_x"]
    assert (row.state, row.waiting_on, row.version) == ("waiting", (t1.id, v1), v1 + 1)
    assert [(e.dst, e.label, e.status) for e in view.dag.edges] == [(t1.id, f"bank_x@{v1}", "waiting")]
    t1.commit()
    res = fut.result(timeout=30)
    view = fold(t2.events.history, names={t1.id: "T1"}, engine_state=t2.state)
    assert view.state == "committed" and view.result.versions == res.versions == {"bank_x": v1 + 1}
    assert view.result.redo_count == 1 and view.dag.edges[0].outcome == "committed"


def test_versions_text_keeps_the_given_order_and_says_what_none_means() -> None:
    assert versions_text({"kv_b": 2, "kv": 4}) == "kv_b@2, kv@4"
    assert versions_text(sorted({"kv_b": 2, "kv": 4}.items()), "nothing written") == "kv@4, kv_b@2"
    assert versions_text([], "–") == "–" and versions_text({}) == ""
