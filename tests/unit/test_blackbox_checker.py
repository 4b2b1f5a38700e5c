"""The black-box list-append checker (lv_core.blackbox): one hand-built history per anomaly kind,
serial histories that must pass, a corrupted one that must not, and the JSON-lines round trip."""

from __future__ import annotations

import json
import random
import time
from itertools import pairwise
from pathlib import Path

import pytest

from lv_core.blackbox import (
    LEVELS,
    HistoryError,
    MicroOp,
    OpKind,
    Outcome,
    Report,
    Txn,
    check,
    dump_history,
    load_history,
)

OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO


def r(key: str, *values: int) -> MicroOp:
    return MicroOp.read(key, values)


def a(key: str, element: int) -> MicroOp:
    return MicroOp.append(key, element)


def T(tid: str, *ops: MicroOp, outcome: Outcome = OK, process: int = 0) -> Txn:
    return Txn(tid, process, ops, outcome)


def assert_levels(report: Report, *allowed_by: str) -> None:
    """``report`` is ok exactly for the levels named."""
    assert {lv for lv in LEVELS if report.ok(lv)} == set(allowed_by), report.explain()


def only(report: Report, kind: str) -> tuple[str, ...]:
    """Assert ``kind`` is the only anomaly kind found; return its first witness's txns."""
    assert report.kinds == {kind}, report.explain()
    return report.anomalies[kind][0].txns


WEAK = ("snapshot", "read_committed", "delta")


def test_a_serializable_history_reports_nothing() -> None:
    h = [T("T1", a("x", 1)),
         T("T2", r("x", 1), a("y", 1), process=1),
         T("T3", r("x", 1), r("y", 1), a("x", 2), r("x", 1, 2)),
         T("T4", r("x", 1, 2), r("y", 1), process=1)]
    rep = check(h, {"x": [1, 2], "y": [1]})
    assert rep.kinds == frozenset() and rep.anomalies == {}
    assert (rep.committed, rep.failed, rep.info) == (4, 0, 0)
    assert_levels(rep, *LEVELS)
    assert "anomalies: none" in rep.explain()


def test_write_skew_is_g2_item() -> None:
    h = [T("T1", r("x"), r("y"), a("x", 1)), T("T2", r("x"), r("y"), a("y", 2), process=1)]
    rep = check(h, {"x": [1], "y": [2]})
    assert set(only(rep, "G2-item")) == {"T1", "T2"}
    assert [e.kind for e in rep.anomalies["G2-item"][0].steps] == ["rw", "rw"]
    assert_levels(rep, *WEAK)
    assert rep.violations("serializable") == {"G2-item"} and rep.violations("snapshot") == set()


def test_read_skew_is_g_single() -> None:
    h = [T("T1", a("x", 1), a("y", 1)), T("T2", r("x"), r("y", 1), process=1)]
    assert check(h).kinds == frozenset()  # where 1 sits in x's order is unknown without a read of it
    rep = check(h, {"x": [1]})
    assert set(only(rep, "G-single")) == {"T1", "T2"}
    assert sorted(e.kind for e in rep.anomalies["G-single"][0].steps) == ["rw", "wr"]
    assert_levels(rep, "read_committed", "delta")


def test_lost_update_is_g_single() -> None:
    h = [T("T1", r("x"), a("x", 1)), T("T2", r("x"), a("x", 2), process=1)]
    rep = check(h, {"x": [1, 2]})
    assert set(only(rep, "G-single")) == {"T1", "T2"}
    assert_levels(rep, "read_committed", "delta")


def test_write_cycle_across_two_keys_is_g0() -> None:
    h = [T("T1", a("x", 1), a("y", 1)), T("T2", a("x", 2), a("y", 2), process=1)]
    rep = check(h, {"x": [1, 2], "y": [2, 1]})
    assert set(only(rep, "G0")) == {"T1", "T2"}
    assert {e.kind for e in rep.anomalies["G0"][0].steps} == {"ww"}
    assert_levels(rep, "delta")


def test_aborted_read_is_g1a() -> None:
    h = [Txn("T1", 0, (a("x", 1),), FAIL, error="R2: conflict"), T("T2", r("x", 1), process=1)]
    rep = check(h)
    assert only(rep, "G1a") == ("T1", "T2")
    assert "R2: conflict" in rep.explain()
    assert_levels(rep, "delta")
    assert (rep.committed, rep.failed) == (1, 1)


def test_intermediate_read_is_g1b() -> None:
    h = [T("T1", a("x", 1), a("x", 2)), T("T2", r("x", 1), process=1)]
    rep = check(h)
    assert only(rep, "G1b") == ("T1", "T2")
    assert_levels(rep, "delta")


def test_own_intermediate_read_is_not_g1b() -> None:
    assert check([T("T1", a("x", 1), r("x", 1), a("x", 2))], {"x": [1, 2]}).kinds == frozenset()


def test_circular_information_flow_is_g1c() -> None:
    h = [T("T1", a("x", 1), r("y", 1)), T("T2", a("y", 1), r("x", 1), process=1)]
    rep = check(h)
    assert set(only(rep, "G1c")) == {"T1", "T2"}
    assert {e.kind for e in rep.anomalies["G1c"][0].steps} == {"wr"}
    assert_levels(rep, "delta")


def test_incompatible_order() -> None:
    h = [T("T1", a("x", 1)), T("T2", a("x", 2)), T("T3", r("x", 1, 2)), T("T4", r("x", 2, 1))]
    rep = check(h)
    assert set(only(rep, "incompatible-order")) == {"T3", "T4"}
    assert "[2, 1]" in rep.anomalies["incompatible-order"][0].detail
    assert_levels(rep)


def test_read_longer_than_the_final_list_is_incompatible() -> None:
    rep = check([T("T1", a("x", 1)), T("T2", a("x", 2)), T("T3", r("x", 1, 2))], {"x": [1]})
    assert "incompatible-order" in rep.kinds and "lost" in rep.kinds  # 2 vanished after being read


def test_duplicate() -> None:
    rep = check([T("T1", a("x", 1)), T("T2", r("x", 1, 1))])
    assert only(rep, "duplicate") == ("T2", "T1")
    assert_levels(rep)


def test_garbage() -> None:
    rep = check([T("T1", r("x", 7))])
    assert only(rep, "garbage") == ("T1",)
    assert_levels(rep)
    assert only(check([T("T1", a("x", 1))], {"x": [1, 9]}), "garbage") == ()


def test_lost() -> None:
    rep = check([T("T1", a("x", 1)), T("T2", a("x", 2))], {"x": [2]})
    assert only(rep, "lost") == ("T1",)
    assert_levels(rep)


def test_failed_appends_are_not_lost_and_unread_keys_are_not_checked() -> None:
    h = [Txn("T1", 0, (a("x", 1),), FAIL), T("T2", a("x", 2)), T("T3", a("y", 1))]
    assert check(h, {"x": [2]}).kinds == frozenset()


@pytest.mark.parametrize("ops", [
    (a("x", 2), r("x")),  # own append not seen
    (a("x", 2), a("x", 3), r("x", 1, 3, 2)),  # own appends out of order
    (a("x", 2), r("x", 1, 2), r("x", 1)),  # second read does not extend the first
    (r("x", 1, 2), a("x", 2)),  # sees its own later append
])
def test_internal(ops: tuple[MicroOp, ...]) -> None:
    h = [T("T0", a("x", 1)), T("T1", *ops, process=1)]
    rep = check(h)
    assert only(rep, "internal") == ("T1",)
    assert_levels(rep)


def test_reading_others_appends_between_own_statements_is_a_cycle_not_internal() -> None:
    """Allowed per statement ("delta"), a fuzzy read for a transaction: G-single, not internal."""
    h = [T("T1", r("x"), r("x", 1)), T("T2", a("x", 1), process=1)]
    rep = check(h)
    assert set(only(rep, "G-single")) == {"T1", "T2"}
    assert_levels(rep, "read_committed", "delta")


def test_info_txn_counts_only_when_observed() -> None:
    h = [T("T1", a("x", 1), outcome=INFO), T("T2", a("x", 2), r("x", 2), outcome=INFO), T("T3", r("x", 1))]
    rep = check(h)
    assert rep.kinds == frozenset()
    assert (rep.committed, rep.info, rep.info_committed) == (2, 2, 1)  # T2 saw only itself
    skew = [T("T1", r("x"), r("y"), a("x", 1)), T("T2", r("x"), r("y"), a("y", 2), outcome=INFO, process=1)]
    assert check(skew, {"x": [1]}).kinds == frozenset()  # T2 may never have committed
    rep = check(skew, {"x": [1], "y": [2]})  # now it did: T2's reads join the graph
    assert set(only(rep, "G2-item")) == {"T1", "T2"}
    assert rep.info_committed == 1


def test_unexecuted_reads_and_failed_txns_reads_are_ignored() -> None:
    h = [T("T1", MicroOp.read("x", None), a("x", 1)), Txn("T2", 1, (r("x", 5),), FAIL)]
    assert check(h, {"x": [1]}).kinds == frozenset()


def test_malformed_histories_are_refused() -> None:
    with pytest.raises(HistoryError, match="unique"):
        check([T("T1", a("x", 1)), T("T2", a("x", 1))])
    with pytest.raises(HistoryError, match="twice"):
        check([T("T1", a("x", 1)), T("T1", a("x", 2))])
    with pytest.raises(HistoryError):
        MicroOp.append("x", "1")  # type: ignore[arg-type]
    with pytest.raises(HistoryError, match="unknown level"):
        check([]).ok("linearizable")


def test_report_explains_and_draws_the_cycle() -> None:
    h = [T("T1", r("x"), r("y"), a("x", 1)), T("T2", r("x"), r("y"), a("y", 2), process=1)]
    rep = check(h, {"x": [1], "y": [2]})
    text = rep.explain()
    assert "G2-item" in text and "-[rw x: read [], T1 appended 1]-> T1" in text
    assert "T2 (process 1, ok): r(x) -> []; r(y) -> []; append(y, 2)" in text
    dot = rep.cycle_dot(rep.anomalies["G2-item"][0])
    assert dot.startswith("digraph G2_item {") and '"T1" -> "T2"' in dot and "append(x, 1)" in dot
    obj = json.loads(rep.to_json())
    assert obj["kinds"] == ["G2-item"] and set(obj["txns"]) == {"T1", "T2"}


def _serial_history(n: int, keys: int, seed: int) -> tuple[list[Txn], dict[str, list[int]]]:
    """Execute ``n`` random transactions one after another on a dict of lists: serializable by construction."""
    rnd = random.Random(seed)
    state: dict[str, list[int]] = {f"t{k % 2}/{k}": [] for k in range(keys)}
    names = list(state)
    nxt = 0
    txns = []
    for i in range(n):
        outcome = rnd.choices([OK, FAIL, INFO], [0.85, 0.1, 0.05])[0]
        work = {k: list(v) for k, v in state.items()}
        ops = []
        for _ in range(rnd.randint(1, 5)):
            k = rnd.choice(names)
            if rnd.random() < 0.5:
                ops.append(r(k, *work[k]))
            else:
                nxt += 1
                work[k].append(nxt)
                ops.append(a(k, nxt))
        if outcome is OK or (outcome is INFO and rnd.random() < 0.5):
            state = work
        txns.append(Txn(f"T{i}", i % 8, tuple(ops), outcome, preset="serializable", start=float(i)))
    return txns, state


def test_random_serial_history_passes_quickly() -> None:
    txns, final = _serial_history(2000, 20, seed=7)
    t0 = time.perf_counter()
    rep = check(txns, final)
    assert time.perf_counter() - t0 < 5
    assert rep.kinds == frozenset(), rep.explain()
    assert rep.per_preset["serializable"]["ok"] + rep.failed + rep.info == 2000
    rep = check(txns)  # without a final read too
    assert rep.kinds == frozenset(), rep.explain()


def test_a_stale_read_in_a_serial_history_is_a_cycle() -> None:
    txns, final = _serial_history(2000, 20, seed=11)
    writer = {op.value: t.id for t in txns for op in t.ops if op.kind is OpKind.APPEND}
    # the first read-modify-write (read k, then append to k) whose read ended with another txn's element
    n, i, seen = next((n, i, x.observed) for n, t in enumerate(txns) if t.outcome is OK
                      for i, (x, y) in enumerate(pairwise(t.ops))
                      if x.kind is OpKind.READ and y.kind is OpKind.APPEND and x.key == y.key
                      and x.observed and writer[x.observed[-1]] != t.id)
    t, victim = txns[n], writer[seen[-1]]
    ops = list(t.ops)
    ops[i] = MicroOp.read(ops[i].key, seen[:-1])  # make it miss the last element: a stale read
    txns[n] = Txn(t.id, t.process, tuple(ops), t.outcome, t.preset, t.start)
    rep = check(txns, final)
    assert "G-single" in rep.kinds and not rep.ok("serializable") and not rep.ok("snapshot"), rep.explain()
    assert rep.ok("read_committed"), rep.explain()
    assert {t.id, victim} <= {x for an in rep.anomalies["G-single"] for x in an.txns}


def test_json_lines_round_trip(tmp_path: Path) -> None:
    txns, _final = _serial_history(60, 4, seed=3)
    txns.append(Txn("Tx", 9, (MicroOp.read("t0/0", None), a("t0/0", 10_000)), INFO, "delta", 1.5, 2.5, "timeout"))
    for t in txns:
        assert Txn.from_json(t.to_json()) == t
    files = [tmp_path / f"p{p}.jsonl" for p in range(2)]
    dump_history(files[0], [t for t in txns if t.process % 2 == 0])
    dump_history(files[1], [t for t in txns if t.process % 2 == 1][:5])
    dump_history(files[1], [t for t in txns if t.process % 2 == 1][5:], append=True)
    assert load_history(files) == sorted(txns, key=lambda t: t.start)
    assert load_history(str(files[0]))[0] == txns[0]


def test_load_history_names_the_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text(T("T1", a("x", 1)).to_json() + "\n\n" + '{"id": "T2", "process": 0}\n', encoding="utf-8")
    with pytest.raises(HistoryError, match=r"h\.jsonl:3: missing field 'ops'"):
        load_history(p)
    q = tmp_path / "dup.jsonl"
    dump_history(q, [T("T1", a("y", 1))])
    with pytest.raises(HistoryError, match="already in"):
        load_history([q, q])
