"""A redo on the commit chain of a hot key (issue 38): under YCSB's zipfian keys a writer behind another
that changed its row redoes at commit, and its table's later writers wait for it. The redo deletes the
files it undoes beside re-running the operation, and writes no sublog entry where the first run wrote
none (its pending marker protects the files, their names identify them after a crash)."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

import lv_core
from lv_core import events as ev
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, committed_kv, make_kv

pytestmark = pytest.mark.usefixtures("log_immutability")


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.Lakehouse(InstrumentedStore(lv_core.connect(str(tmp_path / "wh")).store), lease_s=10.0)
    make_kv(lh, "t0", {1: 0.0, 2: 0.0})
    return lh


def _hook(lh: lv_core.Lakehouse, fn: Callable[[str, str], None]) -> Callable[[], None]:
    store: Any = lh.store
    real = store._request

    def hooked(kind: str, key: str, call: Callable[[], Any]) -> Any:
        fn(kind, key)
        return real(kind, key, call)

    store._request = hooked
    return lambda: setattr(store, "_request", real)


def _behind(lh: lv_core.Lakehouse) -> tuple[lv_core.Transaction, lv_core.Transaction]:
    """T2 updates the row T1 updated, its marker behind T1's; T1 commits: T2's commit must redo."""
    t1, t2 = lh.begin("serializable", timeout_s=20), lh.begin("serializable", timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    add_kv(t2, "t0", 1, 10)
    t1.commit()
    return t1, t2


def test_a_redo_writes_no_sublog_entry_where_the_first_run_wrote_none(lh):
    """Fails on the code before: the redo PUT an entry (40 ms on the chain at 20 ms a request)."""
    _t1, t2 = _behind(lh)
    puts: list[str] = []
    undo = _hook(lh, lambda kind, key: puts.append(key) if "/sublog/" in key and kind == "PUT" else None)
    try:
        t2.commit()
    finally:
        undo()
    assert [e for e in t2.events.history if isinstance(e, ev.Redo)] and puts == []
    assert committed_kv(lh, "t0") == {1: 11.0, 2: 0.0}


def test_a_redo_deletes_what_it_undoes_beside_the_operation(lh):
    """Fails on the code before: the DELETE of the undone file ended before the redo wrote anything."""
    _t1, t2 = _behind(lh)
    redone = threading.Event()
    overlapped: list[bool] = []

    def gate(kind: str, key: str) -> None:
        if kind == "PUT-create" and f"{t2.id}-0000-1-" in key:
            redone.set()  # the redo's data file
        elif kind == "DELETE" and f"{t2.id}-0000-0-" in key:
            overlapped.append(redone.wait(timeout=3))  # the undone file: deleted only once the redo wrote

    undo = _hook(lh, gate)
    try:
        t2.commit()
    finally:
        undo()
    assert overlapped == [True]
    assert committed_kv(lh, "t0") == {1: 11.0, 2: 0.0}
    assert not [m.key for m in lh.store.list("t0/") if f"{t2.id}-0000-0-" in m.key]  # the undone file is gone
