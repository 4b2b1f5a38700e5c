"""Rule II in one object per transaction (issue 21): a contended LV[CT] transaction exposes its
dependency edges in ``_lakevilla/txns/<txn>/edges.json`` with one PUT per batch of new edges instead
of rewriting every marker it holds; cycle searches, marker shifts and the inspector read it there."""

from __future__ import annotations

import json

import pytest

import lv_core
from lv_core.errors import NotFound
from lv_core.protocol.dag import Edge
from lv_core.protocol.edges import decode_edges, encode_edges, read_edges
from lv_core.protocol.layout import edges_key
from lv_core.protocol.markers import read_version
from lv_core.txn import cleaner
from tests.helpers.bank import add_kv, committed_kv, make_kv

CT = "repeatable_read"  # R + CT

pytestmark = pytest.mark.usefixtures("log_immutability")


def test_decode_rejects_malformed_and_foreign_objects():
    good = encode_edges("T2", [Edge("T2", "T1", "x", 3)], {"x": 4})
    e = decode_edges("T2", good)
    assert e is not None and e.edges == (Edge("T2", "T1", "x", 3),) and dict(e.holds) == {"x": 4}
    assert decode_edges("T9", good) is None  # another transaction's object
    for bad in (b"{", b"[]", b'{"kind": "edges", "txn": "T2"}',
                b'{"kind": "edges", "txn": "T2", "predecessors": 7, "holds": {}}',
                b'{"kind": "marker", "txn": "T2", "predecessors": [], "holds": {}}'):
        assert decode_edges("T2", bad) is None
    odd = decode_edges("T2", json.dumps({"kind": "edges", "txn": "T2", "holds": {"x": True, "y": 2},
                                         "predecessors": [1, {"txn": "T1"}, {"txn": "T1", "table": "y",
                                                                             "version": 1}]}).encode())
    assert odd is not None and odd.edges == (Edge("T2", "T1", "y", 1),) and dict(odd.holds) == {"y": 2}


def test_edges_seen_from_a_marker_the_owner_moved_are_none():
    e = decode_edges("T2", encode_edges("T2", [Edge("T2", "T1", "x", 3)], {"x": 9, "y": 4}))
    assert e is not None
    assert e.from_marker("x", 9) == [Edge("T2", "T1", "x", 3)]
    assert e.from_marker("x", 5) == []  # shifted away from x@5: it waits for nobody there
    assert e.from_marker("z", 1) == [Edge("T2", "T1", "x", 3)]  # not named: counted (a false cycle only shifts)


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    for i in range(4):
        make_kv(lh, f"t{i}", {1: 0.0})
    return lh


def test_contended_transaction_writes_one_edges_object_not_every_marker(lh):
    """T2 queues behind T1 on four tables: each new edge costs one PUT of T2's edges object (from its
    second table on: while it holds one marker it keeps its edges back, see test_single_marker_edges); T2's
    markers are never rewritten (the j-th table used to cost j marker rewrites), carry no edges,
    and the edges object is gone once T2 ended."""
    t1, t2 = lh.begin(CT, timeout_s=20), lh.begin(CT, timeout_s=20)
    tables = [f"t{i}" for i in range(4)]
    for t in tables:
        add_kv(t1, t, 1, 1)
    for j, t in enumerate(tables, 1):
        before = dict(t2.requests())
        add_kv(t2, t, 1, 10)
        made = {k: v - before.get(k, 0) for k, v in t2.requests().items()}
        assert made.get("PUT-if-match", 0) == 0, (j, made)  # no marker rewrite
        if j == 1:  # one marker held: no edges object (and no cycle search: no GET of T1's), issue 38
            assert made.get("PUT", 0) == 1 and read_edges(lh.store, t2.id) is None, (j, made)
            continue
        assert made.get("PUT", 0) == 1 + 1, (j, made)  # the data file and the edges object
        got = read_edges(lh.store, t2.id)
        assert got is not None and len(got.edges) == j and {e.dst for e in got.edges} == {t1.id}
        assert dict(got.holds) == {x: v for x, v in t2.marker_versions().items()}
    for t, v in t2.marker_versions().items():
        st = read_version(lh.store, t, v)
        assert st.pending and st.txn == t2.id and st.marker is not None and st.marker.predecessors == ()
    # the inspector shows the edges from the edges object
    seen = {m.txn: m.predecessors for tm in lh.scan_markers(tables) for m in tm.markers if m.table == "t2"}
    assert seen[t2.id] == tuple((t1.id, x, v) for x, v in sorted(t1.marker_versions().items()))
    assert seen[t1.id] == ()
    f2 = t2.commit_async()
    t1.commit()
    f2.result(timeout=30)
    assert cleaner.drain(30)
    with pytest.raises(NotFound):
        lh.store.get(edges_key(t2.id))
    assert all(committed_kv(lh, t) == {1: 11.0} for t in tables)


def test_cycle_found_through_the_other_transactions_edges_object(lh):
    """T2 waits behind T1 in t0 (exposed in T2's edges object only); T1 then queues behind T2 in
    t1: T1 finds the cycle by reading T2's edges object and shifts its marker in t0."""
    t1, t2 = lh.begin(CT, timeout_s=20), lh.begin(CT, timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    add_kv(t2, "t1", 1, 10)
    add_kv(t2, "t0", 1, 10)  # T2 -> T1 at t0
    old = t1.marker_versions()["t0"]
    mk = read_version(lh.store, "t0", t2.marker_versions()["t0"]).marker
    assert mk is not None and mk.predecessors == ()
    add_kv(t1, "t1", 1, 1)  # T1 -> T2 at t1 closes the cycle
    cycles = t1.dag().to_json()["cycles"]
    assert cycles and {(c["src"], c["dst"]) for c in cycles[0]} == {(t1.id, t2.id), (t2.id, t1.id)}
    assert read_version(lh.store, "t0", old).kind == "freed"
    assert t1.marker_versions()["t0"] > t2.marker_versions()["t0"]
    got = read_edges(lh.store, t1.id)
    assert got is not None and dict(got.holds)["t0"] == t1.marker_versions()["t0"]  # the shift re-exposed
    f1 = t1.commit_async()
    t2.commit()
    f1.result(timeout=30)
    assert committed_kv(lh, "t0") == {1: 11.0} and committed_kv(lh, "t1") == {1: 11.0}
