"""A process whose cached global head names a table it never read (no snapshot cached) does not read that
table's log up to the head's version beside the look (lv_core/txn/current._warm): when the table moved past
a checkpoint since, that read could not start from the checkpoint and would replay every commit from
version 0, where the access reads the checkpoint at its head's version and the commits after it. The first
operation does not speculate here (``has_table`` taught the process x's latest version), so
``first_head`` reads the head."""

from __future__ import annotations

from lv_core import Lakehouse
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, logged_xy, read_kv


def test_a_cold_table_moved_past_a_checkpoint_is_not_replayed_from_version_0(tmp_path, monkeypatch):
    b = logged_xy(str(tmp_path / "wh"), {1: 100.0, 2: 100.0})
    for _ in range(25):  # x well past a few checkpoints before a learns the head
        w = b.begin("serializable")
        add_kv(w, "x", 1, 1)
        w.commit()
    st = InstrumentedStore(b.store)
    a = Lakehouse(st, lease_s=5.0)
    ry = a.begin("serializable")  # a learns the head (naming x at v) through y; x is never read by a
    read_kv(ry, "y", 1)
    ry.commit()
    known = a.global_log.known_state()
    assert known is not None and a.logs.resolved_version("x") is None
    v = known.table_version("x")
    for _ in range(12):  # x moves past the next checkpoint
        w = b.begin("serializable")
        add_kv(w, "x", 1, 1)
        w.commit()
    b.close()
    assert a.has_table("x")  # the app checks the table first: a now knows x's latest version (no snapshot)
    assert a.logs.resolved_version("x") is None and (a.logs.known_reserved("x") or 0) > v
    commit_gets: list[str] = []
    request = st._request

    def log(kind, key, call):
        if kind == "GET" and key.startswith("x/_delta_log/") and key.endswith(".json"):
            commit_gets.append(key)
        return request(kind, key, call)

    monkeypatch.setattr(st, "_request", log)
    r = a.begin("serializable")
    read_kv(r, "x", 1)
    r.commit()
    head = a.global_log.known_state()
    assert head is not None
    r_x = head.table_version("x")
    assert r_x is not None and r_x >= v + 12
    # the checkpoint at or below r_x and the commits after it (plus a look or two), not the log from 0
    assert len(commit_gets) <= (r_x % 10) + 3, (v, r_x, sorted(commit_gets))
