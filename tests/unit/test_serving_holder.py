"""A holder serves the queue before it releases (group commit without handoffs), and a queued
transaction learns its outcome from the global version that publishes it, not from the release."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lv_core import Lakehouse
from lv_core.protocol.lockrecord import COMMITTING, FREE, LOCK_KEY, LockRecord
from lv_core.protocol.vlock import HeldLock, Serving
from lv_core.txn import cleaner
from lv_core.txn.group import SERVING, gather, serve
from tests.helpers.bank import add_kv, committed_kv
from tests.unit.test_group_commit import _queued, _setup, _versions, crash_setup, queue_commits

pytestmark = pytest.mark.timeout(120)


def _record(lh: Lakehouse) -> LockRecord:
    return LockRecord.decode(lh.store.get(LOCK_KEY).data)


def test_a_holder_commits_requests_queued_while_it_held_the_key_before_releasing(tmp_path: Any) -> None:
    """Requests queued after the holder read the queue are committed by it in the next global version
    (its own session), not after a release the waiters must notice and race for."""
    tables = ["t0", "t1", "t2", "t3"]
    lh = _setup(tmp_path, tables)
    # took the key with nothing queued; serves the queue as a committing transaction's holder does
    holder = lh.validation_lock.acquire("holder", timeout_s=5, serving=SERVING)
    threads, out, txns = queue_commits(lh, tables[:3])
    head = lh.global_log.head()
    # the holder's own plan: publish t3's version again (a catch-up), so that a global version is published
    res = holder.commit([], head, additions={"t3": head.tables["t3"]})
    for th in threads:
        th.join(60)
    assert all(not isinstance(r, BaseException) for r in out.values()), out
    new = _versions(lh)[head.version + 1:]
    assert [v.txn for v in new] == ["holder", "holder"] and res.gvl is not None and new[0].version == res.gvl.version
    assert new[0].group == {} and set(new[1].group) == {txns[t].id for t in tables[:3]}
    for t in tables[:3]:
        assert committed_kv(lh, t) == {1: 1.0, 2: 0.0}
    rec = _record(lh)
    assert rec.state == FREE and rec.head == new[1].version and rec.queued is False
    cleaner.drain(30)
    assert _queued(lh.store) == []


def test_a_holder_that_found_nothing_queued_serves_nothing_and_reads_nothing_more(tmp_path: Any) -> None:
    from lv_core.storage.instrumented import InstrumentedStore

    lh = _setup(tmp_path, ["t0"])
    store = InstrumentedStore(lh.store)
    lone = Lakehouse(store, lease_s=30.0)
    txn = lone.begin("serializable")
    add_kv(txn, "t0", 1, 1.0)
    txn.commit()
    cleaner.drain(30)
    store.reset()
    txn = lone.begin("serializable")
    add_kv(txn, "t0", 1, 1.0)
    txn.commit()
    cleaner.drain(30)
    assert store.counts()["LIST"] == 1, store.counts()  # the queue looked at once, while the key was held


def test_a_queued_transaction_returns_once_its_version_is_published_while_the_holder_still_holds_the_key(
        tmp_path: Any) -> None:
    tables = ["t0", "t1"]
    lh = _setup(tmp_path, tables)
    gate = threading.Event()

    def hold(held: HeldLock, published: Any) -> None:
        gate.wait(60)  # keeps the key after publishing, as a holder serving more requests would

    holder = lh.validation_lock.acquire("holder", timeout_s=5, serving=Serving(then=hold))
    threads, out, txns = queue_commits(lh, tables[:1])
    head = lh.global_log.head()
    group = serve(lh.store, head, gather(lh.store, "holder", frozenset()))
    assert set(group.members) == {txns["t0"].id}
    committing = threading.Thread(target=lambda: holder.commit(group.plan, head, additions=group.additions,
                                                               group=group.members))
    committing.start()
    try:
        threads[0].join(30)
        assert not threads[0].is_alive(), "the member waited for the release"
        assert not isinstance(out[0], BaseException), out
        assert out[0].gvl_version == head.version + 1
        rec = _record(lh)
        assert rec.state == COMMITTING and rec.txn == "holder"  # still held
        assert committed_kv(lh, "t0") == {1: 1.0, 2: 0.0}
    finally:
        gate.set()
        committing.join(30)
    assert _record(lh).state == FREE


@pytest.mark.parametrize("point", ["serving-round", "serving-plan-recorded"])
def test_sigkill_of_a_holder_serving_the_queue(tmp_path: Any, point: str) -> None:
    """A holder process committed its own transfer and, still holding the key, serves a request queued
    meanwhile; it is SIGKILLed there. Before the round's plan is recorded the member is not committed by
    it: after the lease the member takes the key over and commits itself; once recorded, the member's
    takeover rolls the round forward and finds its commit in it. Either way both commits hold, once."""
    import os
    import signal

    from tests.unit.test_lv_r_processes import _worker

    wh, lh, base = crash_setup(tmp_path)
    p = _worker("transfer", wh, "1.5", "serializable", env={"LV_TEST_PAUSE_AT": f"plan-recorded,{point}"})
    assert p.stdout is not None and p.stdin is not None
    line = p.stdout.readline()
    assert line.strip() == "LV-PAUSED plan-recorded", p.stderr.read() if p.stderr is not None else ""
    threads, out, txns = queue_commits(Lakehouse(lh.store, lease_s=1.5), ["solo"])  # queued behind the holder
    p.stdin.write("\n")  # the holder goes on: writes its plan, publishes, serves the queue
    p.stdin.flush()
    # the worker prints its commit's result and the holder, serving the queue in the background after
    # commit() returned, its pause: in either order
    lines = sorted(p.stdout.readline().strip() for _ in range(2))
    if lines[0] != f"LV-PAUSED {point}" or not lines[1].startswith("{"):
        p.kill()  # (its stderr ends only when it does)
        raise AssertionError((lines, p.communicate()[1]))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    threads[0].join(90)
    assert not isinstance(out[0], BaseException), out
    assert committed_kv(lh, "kv") == {1: 99.0} and committed_kv(lh, "kv2") == {1: 101.0}
    assert committed_kv(lh, "solo") == {1: 101.0}
    new = _versions(lh)[base + 1:]
    member = txns["solo"].id
    holder = new[0].txn  # the transfer's own global version
    assert new[0].tables["kv"] > _versions(lh)[base].tables["kv"] and member not in new[0].group
    with_member = [v for v in new if member in v.group or v.txn == member]
    assert len(with_member) == 1
    if point == "serving-round":  # not recorded: the member committed itself after the takeover
        assert with_member[0].txn == member
    else:  # recorded: rolled forward, in the dead holder's session
        assert with_member[0].txn == holder and set(with_member[0].group) == {member}
