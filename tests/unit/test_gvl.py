"""Module #4.1: the global version log (publish, head without LIST, time travel, on-demand tables)."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from lv_core.protocol.gvl import (
    EMPTY,
    GVL_LATEST_KEY,
    ForeignGlobalVersion,
    GlobalLog,
    GlobalLogConflict,
    GlobalLogError,
    GlobalVersionNotFound,
    GvlState,
    gvl_key,
)
from lv_core.protocol.layout import commit_key
from lv_core.storage.base import ObjectStore
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore


def _chain(glog: GlobalLog, n: int) -> list[GvlState]:
    """Publish versions 0..n-1, each moving table t<i % 3> to version i."""
    out = []
    base = glog.head()
    for i in range(n):
        base = glog.publish(base, {f"t{i % 3}": i}, f"txn-{i}")
        out.append(base)
    return out


def _logs(store: ObjectStore, table: str, versions: range) -> None:
    """Log objects for ``table``'s ``versions``: a holder publishes only versions its table commits wrote."""
    for v in versions:
        store.put(commit_key(table, v), b"{}")


def test_empty_log_is_version_minus_one(store: ObjectStore) -> None:
    inst = InstrumentedStore(store)
    head = GlobalLog(inst).head()
    assert head == EMPTY and head.version == -1 and dict(head.tables) == {} and head.table_version("x") is None
    assert inst.counts()["GET"] == 2 and inst.total() == 2  # hint + version 0, both missing; no LIST


def test_publish_and_head(store: ObjectStore) -> None:
    glog = GlobalLog(store)
    v0 = glog.publish(glog.head(), {"a": 0, "b": 3}, "t-1")
    assert (v0.version, dict(v0.tables), v0.txn) == (0, {"a": 0, "b": 3}, "t-1")
    v1 = glog.publish(v0, {"a": 1}, "t-2")
    assert dict(v1.tables) == {"a": 1, "b": 3}
    body = json.loads(store.get(gvl_key(1)).data)
    assert body["version"] == 1 and body["tables"] == {"a": 1, "b": 3} and body["txn"] == "t-2" and body["ts"] > 0
    assert json.loads(store.get(GVL_LATEST_KEY).data)["version"] == 1

    inst = InstrumentedStore(store)
    fresh = GlobalLog(inst)
    assert fresh.head() == v1
    assert inst.counts()["LIST"] == 0 and inst.counts()["GET"] == 2 and inst.total() == 2  # hint + probe of 2
    inst.reset()
    assert fresh.head() == v1  # a known head: one probe
    assert inst.counts()["GET"] == 1 and inst.total() == 1


def test_head_probes_past_a_lagging_hint(local_store: LocalStore) -> None:
    inst = InstrumentedStore(local_store)
    glog = GlobalLog(inst)
    states = _chain(glog, 3)
    inst.inner.put(GVL_LATEST_KEY, states[0].encode())  # the hint lags two versions behind
    inst.reset()
    assert GlobalLog(inst).head() == states[2]
    assert inst.counts()["LIST"] == 0 and inst.counts()["GET"] == 1 + 2 + 1


def test_a_lagging_instance_reads_the_hint_beside_the_next_version(local_store: LocalStore) -> None:
    """Issue 38: an instance that saw version 0 while five more were published (the hint names the newest)
    learns the head in 3 round trips: the next version, then the one after it with the hint, then past the
    hint. Fails on the code before: versions 1-4 one after another, then the hint, then past it (6 GETs,
    6 round trips)."""
    inst = InstrumentedStore(local_store)
    states = _chain(GlobalLog(inst), 6)
    old = GlobalLog(inst)
    old._remember(states[0])
    seen: list[str] = []
    request = inst._request

    def rec(kind: str, key: str, call):  # type: ignore[no-untyped-def]
        seen.append(f"{kind} {key.rsplit('/', 1)[-1]}")
        return request(kind, key, call)

    inst._request = rec  # type: ignore[method-assign]
    assert old.head() == states[5]
    assert seen[0] == f"GET {1:020d}.json"
    assert sorted(seen[1:3]) == [f"GET {2:020d}.json", "GET _latest"]
    assert seen[3:] == [f"GET {6:020d}.json"]
    seen.clear()
    assert old.head() == states[5] and seen == [f"GET {6:020d}.json"]  # nothing new: 1 GET, as before


def test_head_gallops_when_far_behind_without_hint(local_store: LocalStore) -> None:
    inst = InstrumentedStore(local_store)
    states = _chain(GlobalLog(inst), 40)
    inst.inner.delete(GVL_LATEST_KEY)
    inst.reset()
    assert GlobalLog(inst).head() == states[-1]
    counts = inst.counts()
    assert counts["LIST"] == 0
    assert inst.total() < 25  # linear probing would need 42 requests
    # an instance that saw version 2 long ago catches up the same way
    old = GlobalLog(inst)
    old._remember(states[2])
    assert old.head() == states[-1]


def test_time_travel_at_and_as_of(local_store: LocalStore) -> None:
    glog = GlobalLog(local_store)
    states = []
    base = glog.head()
    for i in range(5):
        base = glog.publish(base, {"acct": i, **({"audit": 10 + i} if i >= 2 else {})}, f"txn-{i}")
        states.append(base)
        time.sleep(0.01)
    fresh = GlobalLog(glog.store)
    assert dict(fresh.at(0).tables) == {"acct": 0}
    assert dict(fresh.at(3).tables) == {"acct": 3, "audit": 13}
    assert fresh.at(3).txn == "txn-3"
    assert fresh.at(-1) == EMPTY
    with pytest.raises(GlobalVersionNotFound, match="does not exist"):
        fresh.at(5)
    assert fresh.as_of(states[2].ts) == states[2]
    assert fresh.as_of(states[2].ts + 0.005) == states[2]
    assert fresh.as_of(states[0].ts - 1) == EMPTY
    assert fresh.as_of(time.time() + 10) == states[4]


def test_publish_is_idempotent_for_one_txn_and_never_forks(store: ObjectStore) -> None:
    _logs(store, "a", range(1, 2))
    glog = GlobalLog(store)
    base = glog.head()
    first = glog.publish(base, {"a": 1}, "t-1")
    assert GlobalLog(store).publish(base, {"a": 1}, "t-1") == first  # a roll forward getting there second
    with pytest.raises(GlobalLogConflict, match="already published by t-1"):
        GlobalLog(store).publish(base, {"a": 2}, "t-2")
    assert GlobalLog(store).head() == first


def test_concurrent_publishers_on_one_base_one_wins(local_store: LocalStore) -> None:
    store = local_store
    _logs(store, "a", range(8))
    base = GlobalLog(store).head()
    results: list[str] = []

    def publish(i: int) -> None:
        try:
            GlobalLog(store).publish(base, {"a": i}, f"t-{i}")
            results.append("ok")
        except GlobalLogConflict:
            results.append("conflict")

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict"] * 7 + ["ok"]
    assert GlobalLog(store).head().version == 0


def test_malformed_objects(local_store: LocalStore) -> None:
    store = local_store
    store.put(gvl_key(0), b"{not json")
    with pytest.raises(GlobalLogError, match="malformed"):
        GlobalLog(store).at(0)
    store.put(gvl_key(0), GvlState(7, {"a": 1}).encode())
    with pytest.raises(GlobalLogError, match="says it is version 7"):
        GlobalLog(store).at(0)
    store.delete(gvl_key(0))
    store.put(GVL_LATEST_KEY, b"garbage")  # a bad hint is ignored
    assert GlobalLog(store).head() == EMPTY


FOREIGN = [
    ("garbage", lambda n: b"garbage", "malformed global version object"),
    ("wrong-version", lambda n: GvlState(77, {"a": 1}, "t-9").encode(), "says it is version 77"),
    ("no-txn", lambda n: GvlState(n, {"a": 1, "b": 0}).encode(), "names no transaction"),
    ("drops-a-table", lambda n: GvlState(n, {"a": 1}, "t-9").encode(), "drops table(s) 'b'"),
    ("goes-back", lambda n: GvlState(n, {"a": 0, "b": 0}, "t-9").encode(), "older than version 1"),
    ("no-such-version", lambda n: GvlState(n, {"a": 999, "b": 0}, "t-9").encode(), "has no version 999"),
    ("bad-table", lambda n: GvlState(n, {"a": 1, "b": 0, "../x": 1}, "t-9").encode(), "invalid table"),
]


@pytest.mark.parametrize("label,body,fragment", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_a_foreign_object_at_the_next_version_is_told_from_another_holders(local_store: LocalStore, label: str,
                                                                            body, fragment: str) -> None:
    """An object no LakeVilla holder can have written (bad input by another client) raises ForeignGlobalVersion,
    which the plan runner rolls back (lv_core.protocol.commitplan); another holder's version stays a conflict."""
    store = local_store
    _logs(store, "a", range(3))
    _logs(store, "b", range(1))
    glog = GlobalLog(store)
    base = glog.publish(glog.publish(EMPTY, {"a": 0, "b": 0}, "t-0"), {"a": 1}, "t-1")
    store.put(gvl_key(base.version + 1), body(base.version + 1))
    inst = InstrumentedStore(store)
    with pytest.raises(ForeignGlobalVersion, match=re.escape(fragment)) as info:
        GlobalLog(inst).publish(base, {"a": 2}, "t-2")
    assert info.value.version == base.version + 1 and info.value.key == gvl_key(base.version + 1)
    assert "was not written by LakeVilla" in str(info.value)
    assert inst.counts()["PUT"] == 0  # no hint written
    assert isinstance(info.value, GlobalLogError)


def test_another_holders_version_is_a_conflict_whatever_it_changed(local_store: LocalStore) -> None:
    """A version by another holder (mutual exclusion broken, or a crashed holder's plan rolled forward) names
    every table of the base, a transaction, and versions its tables' logs hold: GlobalLogConflict as before.
    Cost: 1 GET of it + 1 HEAD per table it changed."""
    store = local_store
    _logs(store, "a", range(3))
    _logs(store, "c", range(5))
    glog = GlobalLog(store)
    base = glog.publish(EMPTY, {"a": 0}, "t-0")
    glog.publish(base, {"a": 2, "c": 4}, "t-other")
    inst = InstrumentedStore(store)
    with pytest.raises(GlobalLogConflict, match="already published by t-other"):
        GlobalLog(inst).publish(base, {"a": 1}, "t-1")
    assert inst.counts()["HEAD"] == 2 and inst.counts()["GET"] == 1


def test_check_head_tells_a_foreign_head_from_a_holders(local_store: LocalStore) -> None:
    """`lv recover`'s look: the head is checked as a publish checks what it finds (a table version missing from
    its log counts only past the log's latest version: tests/unit/test_gvl_made_up.py)."""
    store = local_store
    states = _chain(GlobalLog(store), 3)  # (names tables whose logs do not exist: that tells nothing)
    assert GlobalLog(store).check_head() == states[-1]
    store.put(gvl_key(3), GvlState(3, {"t0": 99}).encode())
    with pytest.raises(ForeignGlobalVersion, match="names no transaction; it drops table"):
        GlobalLog(store).check_head()
    store.delete(gvl_key(3))
    store.put(gvl_key(3), b"garbage")
    with pytest.raises(ForeignGlobalVersion, match=re.escape(f"global version 3 ({gvl_key(3)}) was not written by "
                                                             f"LakeVilla: malformed global version object (Expecting "
                                                             f"value: line 1 column 1 (char 0)). Help:")):
        GlobalLog(store).check_head()
