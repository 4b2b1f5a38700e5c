"""protocol/parts.close_parts: global versions hold multi-table commits made outside the log whole."""

from __future__ import annotations

import json

import pytest

from lv_core.protocol.gvl import GvlState
from lv_core.protocol.layout import commit_key, marker_key
from lv_core.protocol.markers import MarkerInfo, classify, encode_marker
from lv_core.protocol.parts import PartMissing, close_parts
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore


def _commit(txn: str, at: dict[str, int] | None = None, **extra) -> bytes:
    lv = {"kind": "commit", "txn": txn, **extra}
    if at is not None:
        lv["at"] = at
    return (json.dumps({"commitInfo": {"operation": "LAKEVILLA COMMIT", "lakevilla": lv}}) + "\n").encode()


@pytest.fixture
def store(tmp_path) -> InstrumentedStore:
    s = InstrumentedStore(LocalStore(str(tmp_path)))
    for t in ("a", "b", "c"):
        s.put(commit_key(t, 0), _commit("setup"))
    return s


STATE = GvlState(3, {"a": 0, "b": 0, "c": 0})


def test_parts_are_read_from_commit_info():
    st = classify(5, _commit("T", {"a": 5, "b": 7}), "e")
    assert st.parts == (("a", 5), ("b", 7))
    assert classify(5, _commit("T", {"a": 5}), "e").parts == ()  # one table: nothing to keep whole
    assert classify(5, _commit("T", {"a": 5, "b": 7}, gvl=3), "e").parts == ()  # LV[I]: atomic already
    assert classify(5, _commit("T", {"a": "x", "b": 7}), "e").parts == (("b", 7),)  # malformed entries ignored


def test_a_part_pulls_its_sibling_in(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 2}))
    store.put(commit_key("b", 1), _commit("U"))
    store.put(commit_key("b", 2), _commit("T", {"a": 1, "b": 2}))
    assert close_parts(store, STATE, {"a": 1}) == {"b": 2}
    assert close_parts(store, STATE, {"a": 1, "b": 2}) == {}  # already whole


def test_siblings_close_transitively(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 1}))
    store.put(commit_key("b", 1), _commit("T", {"a": 1, "b": 1}))
    store.put(commit_key("b", 2), _commit("U", {"b": 2, "c": 1}))
    store.put(commit_key("c", 1), _commit("U", {"b": 2, "c": 1}))
    # naming b at 2 includes U's part there, so c must move to 1 as well
    assert close_parts(store, STATE, {"a": 1, "b": 2}) == {"c": 1}


def test_a_pending_marker_below_the_sibling_part_refuses(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 2}))
    store.put(marker_key("b", 1), encode_marker(MarkerInfo(txn="V")))
    store.put(commit_key("b", 2), _commit("T", {"a": 1, "b": 2}))
    with pytest.raises(PartMissing) as info:
        close_parts(store, STATE, {"a": 1})
    assert (info.value.table, info.value.sibling, info.value.blocker) == ("a", "b", 1)


def test_an_unfinished_sibling_refuses(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 1}))
    store.put(marker_key("b", 1), encode_marker(MarkerInfo(txn="T")))
    with pytest.raises(PartMissing):
        close_parts(store, STATE, {"a": 1})


def test_a_fixed_table_never_moves(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 2}))
    store.put(commit_key("b", 1), _commit("own"))
    store.put(commit_key("b", 2), _commit("T", {"a": 1, "b": 2}))
    with pytest.raises(PartMissing):
        close_parts(store, STATE, {"a": 1, "b": 1}, own_txn="own", fixed=frozenset({"b"}))


def test_own_commits_cost_no_request(store):
    before = dict(store.counts())
    assert close_parts(store, STATE, {"a": 1}, own_txn="own", fixed=frozenset({"a"})) == {}
    assert store.counts().get("GET", 0) == before.get("GET", 0)


def test_tables_the_log_does_not_know_are_left_alone(store):
    store.put(commit_key("a", 1), _commit("T", {"a": 1, "b": 1}))
    store.put(commit_key("b", 1), _commit("T", {"a": 1, "b": 1}))
    assert close_parts(store, GvlState(1, {"a": 0}), {"a": 1}) == {}
