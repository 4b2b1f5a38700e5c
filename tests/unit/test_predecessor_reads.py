"""A marker claimed above versions the transaction did not read reads them once, with the marker's claim
(lv_core/txn/access.record_write_marker): settling, which waits for and certifies them, takes the log files
from there instead of reading them again (a log file is final)."""

from __future__ import annotations

from collections import Counter

from lv_core import Lakehouse
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, committed_kv, logged_xy, read_kv


def test_versions_below_a_marker_are_read_once_from_the_claim_to_the_commit(tmp_path, monkeypatch):
    b = logged_xy(str(tmp_path / "wh"), {1: 100.0, 2: 100.0})
    st = InstrumentedStore(b.store)
    a = Lakehouse(st, lease_s=5.0)
    txn = a.begin("repeatable_read", features=["R"])  # LV[R] alone: the marker comes with the first write
    assert read_kv(txn, "x", 2) == {2: 100.0}  # read here: the versions b commits next are predecessors
    base = a.logs.known_latest("x")
    assert base is not None
    for _ in range(2):
        w = b.begin("repeatable_read", features=["R"])
        add_kv(w, "x", 1, 1)
        w.commit()
    gets: Counter[str] = Counter()
    request = st._request

    def count(kind, key, call):
        if kind == "GET" and key.startswith("x/_delta_log/") and key.endswith(".json"):
            gets[key.rsplit("/", 1)[-1]] += 1
        return request(kind, key, call)

    monkeypatch.setattr(st, "_request", count)
    add_kv(txn, "x", 2, 5)  # the marker lands above b's two commits
    res = txn.commit()
    between = [f"{v:020d}.json" for v in (base + 1, base + 2)]
    assert res.versions["x"] == base + 3
    assert [gets[k] for k in between] == [1, 1], gets
    assert committed_kv(b, "x") == {1: 102.0, 2: 105.0}
