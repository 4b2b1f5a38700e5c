"""Enrolling a table another transaction is enrolling (issue 38): eight YCSB clients meeting a new table
took the validation key one after another, each only to find the table enrolled (about a second before
the first reads). A transaction waiting for the key to enroll a table stops waiting once a published
global version names it, and reads it there without taking the key."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

import lv_core
from lv_core import Lakehouse
from lv_core.delta.log import DeltaLog
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import make_kv, read_kv

pytestmark = pytest.mark.usefixtures("log_immutability")


def test_a_table_enrolled_while_waiting_for_the_key_is_read_without_taking_it(tmp_path) -> None:
    """Fails on the code before: B took the key after A released it (a PUT-if-match on the lock)."""
    a = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0)
    make_kv(a, "t", {1: 5.0})
    st = InstrumentedStore(a.store)
    b = Lakehouse(st, lease_s=10.0)
    lock_writes: list[str] = []
    looked = threading.Event()
    request = st._request

    def rec(kind: str, key: str, call: Callable[[], Any]) -> Any:
        if key.endswith("validation.lock"):
            if kind == "GET":
                looked.set()
            else:
                lock_writes.append(kind)
        return request(kind, key, call)

    st._request = rec  # type: ignore[method-assign]
    held = a.validation_lock.acquire("enroller", timeout_s=5)  # A holds the key, about to enroll t
    got: dict[str, Any] = {}

    def read() -> None:
        r = b.begin("serializable", timeout_s=10)
        got["rows"] = read_kv(r, "t")
        r.commit()

    reader = threading.Thread(target=read)
    reader.start()
    assert looked.wait(5)  # B found the key held
    state = held.read_head(a.global_log)
    held.commit([], state, additions={"t": DeltaLog(a.store, "t").latest_version_by_probe(None)})
    reader.join(10)
    assert got["rows"] == {1: 5.0}
    assert lock_writes == [], lock_writes
    assert b.global_state().table_version("t") is not None
