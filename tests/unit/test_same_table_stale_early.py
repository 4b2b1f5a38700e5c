"""Same-table group commit (issue 38, found in review): a request queued early must carry the read version,
pending versions and footprints its commit bytes were made from. It was built on the request pool beside the
settling: built after settling rebased (a conflict found, the redo to come), it claimed to have read the
version below its marker with the pre-redo bytes, a holder committed it unchecked (a lost update) and the
owner, recording its redone writes as published, deleted the file the published commit adds. The delays
injected below (a busy pool, a slow redo) make that order happen; the test fails on the code before."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lv_core.protocol.layout import commit_key
from lv_core.txn import group as gc
from lv_core.txn import settle as settle_mod
from tests.helpers.bank import committed_kv
from tests.unit.test_same_table_group import two_writers

pytestmark = pytest.mark.timeout(120)


def test_delayed_early_put_commits_a_stale_request(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lh, d, m = two_writers(tmp_path, 4)  # the same row: M conflicts with D's commit and must redo
    called = threading.Event()
    stale_put = threading.Event()
    trace: list[str] = []

    real_make = gc.make_request

    def make_request(core: Any, writes: Any, accesses: Any, known: int, *, early: bool = False) -> Any:
        if early and core.id == m.id:
            called.set()
            ts = core.book.tables["kv"]
            end = time.monotonic() + 2
            while ts.base.version != ts.marker_version - 1 and time.monotonic() < end:  # (delayed: a busy pool)
                time.sleep(0.005)
            req = real_make(core, writes, accesses, known, early=early)
            trace.append(f"early request built: unsettled read={req.unsettled['read']} marker={ts.marker_version}")
            threading.Timer(0.05, stale_put.set).start()
            return req
        return real_make(core, writes, accesses, known, early=early)

    monkeypatch.setattr(gc, "make_request", make_request)

    real_pending = gc.pending
    once = []

    def pending(store: Any, **kw: Any) -> Any:
        skip = kw.get("skip")
        if not once and isinstance(skip, frozenset) and d.id in skip:  # D's look at the queue while writing its plan
            once.append(1)
            stale_put.wait(20)
        return real_pending(store, **kw)

    monkeypatch.setattr(gc, "pending", pending)

    real_redo = settle_mod.redo_from

    def redo_from(core: Any, conflict: Any, **kw: Any) -> Any:
        if core.id == m.id:
            mv = core.book.tables["kv"].marker_version
            trace.append(f"M redo requested (conflict {conflict.table}@{conflict.version}), marker {mv}")
            end = time.monotonic() + 10
            while not lh.store.exists(commit_key("kv", mv)) and time.monotonic() < end:  # (a slow redo)
                time.sleep(0.01)
            trace.append(f"M redoes; kv@{mv} exists: {lh.store.exists(commit_key('kv', mv))}")
        return real_redo(core, conflict, **kw)

    monkeypatch.setattr(settle_mod, "redo_from", redo_from)

    out: list[Any] = []

    def commit() -> None:
        try:
            out.append(m.commit())
        except BaseException as e:  # inspected
            out.append(e)

    th = threading.Thread(target=commit)
    th.start()
    assert called.wait(30)
    d.commit()
    th.join(60)
    res = out[0]
    final = committed_kv(lh, "kv")
    # both bumped row 4 from 0.0 and both report committed: serializable requires 2.0
    # D committed; M committed (after its redo, or by a holder that certified it) or aborted: no lost update,
    # and every file the published commits add is there (committed_kv reads them all)
    assert final[4] == (1.0 if isinstance(res, BaseException) else 2.0), f"row 4 = {final[4]}, M: {res!r}"
