"""Pure parts of issue 37's "truth" items: the owner's name in markers (old markers still read), one
display form for other clients' transactions, commit outcome lines, rolled-back statement lines, and
the DAG that `%lv dag` reads from markers."""

from __future__ import annotations

import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from lv_core import events as ev
from lv_core.errors import TransactionAborted
from lv_core.protocol.layout import display_name, short_id
from lv_core.protocol.markers import MarkerInfo, classify, encode_marker, name_of, owner_name
from lv_magic.cmd.info import marker_edges
from lv_magic.outcome import LiveTranscript, outcome_line
from lv_magic.state import KernelState
from widgets.model import TxnView

ALPHA = "20261127T023000-0123456789abcdef"
GAMMA = "20261127T023001-fedcba9876543210"


def test_a_marker_carries_its_owners_name_and_old_markers_still_read() -> None:
    st = classify(4, encode_marker(MarkerInfo(ALPHA, created=1.0, lease_expires=2.0, name="alpha")), "e", filled=False)
    assert st.kind == "marker" and st.marker is not None and st.marker.name == "alpha"
    assert name_of(ALPHA) == "alpha"  # learnt by reading it
    unnamed = json.loads(encode_marker(MarkerInfo(GAMMA, created=1.0, lease_expires=2.0)))
    assert "name" not in unnamed["commitInfo"]["lakevilla"]  # unnamed: the record is as before
    st = classify(5, json.dumps(unnamed).encode(), "e", filled=False)
    assert st.kind == "marker" and st.marker is not None and st.marker.name == ""
    assert owner_name(7) == "" and owner_name(" a\nb ") == "a b" and len(owner_name("x" * 500)) == 64


def test_other_transactions_read_as_name_and_short_id_everywhere() -> None:
    classify(4, encode_marker(MarkerInfo(ALPHA, created=1.0, lease_expires=2.0, name="alpha")), "e", filled=False)
    assert short_id(ALPHA) == "01234567" and display_name(ALPHA, "alpha") == "alpha (01234567)"
    state = KernelState()
    assert state.label(ALPHA) == "alpha (01234567)"
    assert state.label(GAMMA) == "fedcba98"  # unnamed, unknown
    assert state.names_in(f"waiting for {ALPHA} at kv@3, then {GAMMA}") == \
        "waiting for alpha (01234567) at kv@3, then fedcba98"
    view = TxnView(GAMMA, name="mine")
    assert view.label(ALPHA) == "alpha (01234567)" and view.label(GAMMA) == "mine"


def _done(result: Any = None, error: BaseException | None = None) -> Future:
    f: Future = Future()
    if error is not None:
        f.set_exception(error)
    else:
        f.set_result(result)
    return f


def test_commit_outcome_lines_name_the_rule() -> None:
    assert outcome_line("t2", _done(SimpleNamespace(versions={"kv": 5}))) == ("committed", "t2 committed: kv@5")
    kind, line = outcome_line("t2", _done(error=TransactionAborted(f"wait for {ALPHA} timed out", "timeout")),
                              KernelState().names_in)
    assert kind == "aborted" and line == "t2 aborted: its wait timed out, nothing changed (wait for alpha (01234567) " \
        "timed out)"
    kind, line = outcome_line("t2", _done(error=TransactionAborted("read kv@3 is outdated", "R1")))
    assert line == "t2 aborted (R1: outdated read), nothing changed: read kv@3 is outdated"


class _Stream:
    def __init__(self) -> None:
        self.subs: list[Any] = []
        self.history: list[ev.Event] = []

    def subscribe(self, cb: Any, *, replay: bool = True) -> Any:
        self.subs.append(cb)
        for e in self.history if replay else []:
            cb(e)
        return lambda: None

    def emit(self, e: ev.Event) -> None:
        self.history.append(e)
        for cb in self.subs:
            cb(e)


def test_statement_lines_of_a_rolled_back_transaction_are_struck_through() -> None:
    txn = SimpleNamespace(events=_Stream())
    lines = LiveTranscript(["UPDATE kv: 1 row"], txn)
    text, markup = lines.output.bundle().values()
    assert text == "UPDATE kv: 1 row" and "<s>" not in markup
    txn.events.emit(ev.Committed(ALPHA, versions={"kv": 3}, redo_count=0, elapsed_s=0.1))
    assert lines.ended is None
    aborted = SimpleNamespace(events=_Stream())
    aborted.events.emit(ev.Aborted(ALPHA, reason="outdated", rule="R1"))  # ended before the lines were shown
    other = LiveTranscript(["UPDATE kv: 1 row", "DELETE FROM kv: 2 rows"], aborted)
    text, markup = other.output.bundle().values()
    assert text == "UPDATE kv: 1 row  (rolled back: aborted (R1))\nDELETE FROM kv: 2 rows  (rolled back: aborted (R1))"
    assert "<s>UPDATE kv: 1 row</s>" in markup and "lv-rolled-back" in markup
    later = SimpleNamespace(events=_Stream())
    again = LiveTranscript(["UPDATE kv: 1 row"], later)
    later.events.emit(ev.Aborted(ALPHA, reason="by %lv rollback", rule="rollback"))
    assert again.output.bundle()["text/plain"] == "UPDATE kv: 1 row  (rolled back)"


def test_dag_edges_from_markers_keep_pending_predecessors_only() -> None:
    m = SimpleNamespace
    markers = [m(table="kv", version=3, txn=ALPHA, predecessors=()),
               m(table="kv", version=4, txn=GAMMA, predecessors=((ALPHA, "kv", 3), (ALPHA, "kv", 1)))]
    assert marker_edges(markers) == [(GAMMA, ALPHA, "kv", 3)]  # kv@1 resolved already: stale
