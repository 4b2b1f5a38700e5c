"""Group commit (LV[I]): transactions that queue behind the validation lock are validated and committed
by the next holder in one global version, on disjoint tables only, each outcome named there."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

import lv_core
from lv_core import Lakehouse
from lv_core.delta import create_table
from lv_core.errors import TransactionAborted
from lv_core.protocol.commitplan import CREATE_MODE, OVERWRITE_MARKER, PlannedCommit, execute_plan
from lv_core.protocol.gvl import EMPTY, GlobalLog, GvlState
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import MarkerInfo, place_marker
from lv_core.protocol.vlock import COMMITTING, LOCK_KEY, LockRecord, ValidationLock
from lv_core.protocol.vqueue import VQ_PREFIX, Request, pending, request_key, tag
from lv_core.storage.base import CREATE, ObjectStore
from lv_core.txn import cleaner
from tests.helpers.bank import add_kv, committed_kv, make_kv, read_kv
from tests.unit.test_vlock import commit_bytes, rows

pytestmark = pytest.mark.timeout(120)


def _queued(store: ObjectStore) -> list[str]:
    return [m.key for m in store.list(VQ_PREFIX)]


def _await(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll an observable condition (the queue's content) until it holds."""
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _versions(lh: Lakehouse) -> list[GvlState]:
    head = lh.global_log.head()
    return [lh.global_log.at(v) for v in range(head.version + 1)]


def _setup(tmp_path: Any, tables: list[str]) -> Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=30.0)
    for t in tables:
        make_kv(lh, t, {1: 0.0, 2: 0.0})
    warm = lh.begin("serializable")  # every table enters the global version log
    for t in tables:
        add_kv(warm, t, 1, 0.0)
    warm.commit()
    return lh


def crash_setup(tmp_path: Any) -> tuple[str, Lakehouse, int]:
    """Tables kv, kv2 (a worker process's transfer) and solo, each {1: 100.0}, all in the global log,
    with a 1.5 s lease; returns the warehouse, a lakehouse on it and the global head."""
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh, lease_s=1.5)
    for t in ("kv", "kv2", "solo"):
        make_kv(lh, t, {1: 100.0})
    warm = lh.begin("serializable")
    for t in ("kv", "kv2", "solo"):
        add_kv(warm, t, 1, 0.0)
    warm.commit()
    return wh, lh, lh.global_log.head().version


def _run(fns: list[Callable[[], Any]]) -> tuple[list[threading.Thread], dict[int, Any]]:
    out: dict[int, Any] = {}

    def wrap(i: int, fn: Callable[[], Any]) -> None:
        try:
            out[i] = fn()
        except BaseException as e:  # the test inspects it
            out[i] = e

    threads = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    return threads, out


def queue_commits(lh: Lakehouse, tables: list[str]) -> tuple[list[threading.Thread], dict[int, Any], dict[str, Any]]:
    """One committer per table (a serializable +1 on row 1), each in its own lakehouse as another process
    would be, started in threads; returns once all of them queued their requests behind the key."""
    txns: dict[str, Any] = {}

    def commit(t: str) -> Any:
        txn = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
        txns[t] = txn
        add_kv(txn, t, 1, 1.0)
        return txn.commit()

    threads, out = _run([lambda t=t: commit(t) for t in tables])
    _await(lambda: len(_queued(lh.store)) == len(tables), "every committer to queue its request")
    return threads, out, txns


def test_queued_commits_on_disjoint_tables_share_one_global_version(tmp_path: Any) -> None:
    tables = ["t0", "t1", "t2", "t3"]
    lh = _setup(tmp_path, tables)
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)  # every committer finds the lock held
    threads, out, txns = queue_commits(lh, tables)
    before = lh.global_log.head().version
    blocker.release()
    for th in threads:
        th.join(60)
    assert all(not isinstance(r, BaseException) for r in out.values()), out
    for t in tables:
        assert committed_kv(lh, t) == {1: 1.0, 2: 0.0}
    new = _versions(lh)[before + 1:]
    # the first committer to get the lock commits the three others with its own: one global version
    assert len(new) == 1, [v.to_json() for v in new]
    (v,) = new
    assert len(v.group) == 3 and v.txn not in v.group
    for txn_id, entry in v.group.items():
        (table, version), = entry["versions"].items()
        assert txns[table].id == txn_id and v.tables[table] == version
        assert entry["validation"]["compatible"] is True
    for t, txn in txns.items():  # each member's own view: the validation the holder made, the version published
        assert txn.core.validation is not None and txn.core.validation["compatible"] is True
        assert t in txn.core.validation["tables"]
    cleaner.drain(30)
    assert _queued(lh.store) == []  # decided requests are removed


def test_transactions_sharing_a_read_table_are_never_grouped_write_skew_is_refused(tmp_path: Any) -> None:
    """Write skew: each reads x and y and writes one of them. Validated against the same head in one
    group both would pass; R1 must refuse one, so requests sharing any table (read or written) are
    left to their owners."""
    lh = _setup(tmp_path, ["x", "y"])
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)

    def skew(write: str) -> Any:
        txn = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
        seen = read_kv(txn, "x", 1)[1] + read_kv(txn, "y", 1)[1]
        if seen >= 0:
            add_kv(txn, write, 1, -1.0)
        return txn.commit()

    threads, out = _run([lambda: skew("x"), lambda: skew("y")])
    _await(lambda: len(_queued(lh.store)) == 2, "both to queue")
    blocker.release()
    for th in threads:
        th.join(60)
    aborted = [r for r in out.values() if isinstance(r, TransactionAborted)]
    assert len(aborted) == 1 and aborted[0].rule == "R1", out
    assert committed_kv(lh, "x")[1] + committed_kv(lh, "y")[1] == -1.0
    assert all(not v.group for v in _versions(lh))


def test_a_waiter_that_times_out_withdraws_its_request_and_commits_nothing(tmp_path: Any) -> None:
    lh = _setup(tmp_path, ["t0"])
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)

    def late() -> Any:
        txn = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=1.0)
        add_kv(txn, "t0", 1, 5.0)
        return txn.commit()

    threads, out = _run([late])
    _await(lambda: len(_queued(lh.store)) == 1, "the request")
    _await(lambda: _queued(lh.store) == [], "the request to be withdrawn at the deadline")
    blocker.release()  # the session that could have read the request ends: now the outcome is known
    threads[0].join(60)
    assert isinstance(out[0], TransactionAborted) and out[0].rule == "timeout"
    assert committed_kv(lh, "t0") == {1: 0.0, 2: 0.0}
    assert all(not v.group for v in _versions(lh))


def _two_tables(store: ObjectStore) -> GvlState:
    for t in ("a", "b"):
        create_table(store, t, "id BIGINT")
    return GlobalLog(store).publish(EMPTY, {"a": 0, "b": 0}, "setup")


def test_a_broken_member_is_rolled_back_alone_and_its_outcome_published(local_store: ObjectStore) -> None:
    base = _two_tables(local_store)
    data_a = commit_bytes(local_store, "a", "m1", [1])
    data_b = commit_bytes(local_store, "b", "m2", [2])
    local_store.put(commit_key("b", 1), commit_bytes(local_store, "b", "other", [9]), mode=CREATE)  # b@1 taken
    plan = [PlannedCommit("a", 1, data_a, CREATE_MODE), PlannedCommit("b", 1, data_b, CREATE_MODE)]
    group = {"m1": {"tables": ["a"], "validation": {"compatible": True}},
             "m2": {"tables": ["b"], "validation": {"compatible": True}}}
    res = execute_plan(local_store, GlobalLog(local_store), plan, txn="holder", gvl_base=base.version, base=base,
                       group=group)
    assert res.committed and res.versions == {}  # the holder had no entry of its own
    assert res.group["m1"]["versions"] == {"a": 1} and res.group["m2"]["rule"] == "R2"
    head = GlobalLog(local_store).head()
    assert dict(head.tables) == {"a": 1, "b": 0} and head.txn == "holder"
    assert head.group["m2"]["rule"] == "R2" and head.group["m1"]["validation"] == {"compatible": True}
    assert rows(local_store, "a") == [1] and rows(local_store, "b") == [9]


def test_a_crashed_holders_group_is_rolled_forward_whole(local_store: ObjectStore) -> None:
    base = _two_tables(local_store)
    mv, metag, _ = place_marker(local_store, "a", 1, MarkerInfo("m1", lease_expires=time.time() + 60))
    plan = (PlannedCommit("a", mv, commit_bytes(local_store, "a", "m1", [1, 2]), OVERWRITE_MARKER, metag),
            PlannedCommit("b", 1, commit_bytes(local_store, "b", "crashed", [3]), CREATE_MODE))
    rec = LockRecord("crashed", COMMITTING, 1.0, time.time() - 5, "dead:1", time.time() - 10, base.version, plan,
                     "crashed", group={"m1": {"tables": ("a",), "validation": {"compatible": True}}})
    assert LockRecord.decode(rec.encode()).group == rec.group
    local_store.put(LOCK_KEY, rec.encode(), mode=CREATE)
    with ValidationLock(local_store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        (tk,) = held.takeovers
        assert tk.action == "rolled-forward" and tk.result is not None
    head = GlobalLog(local_store).head()
    assert dict(head.tables) == {"a": 1, "b": 1} and head.group["m1"]["versions"] == {"a": 1}
    assert rows(local_store, "a") == [1, 2] and rows(local_store, "b") == [3]


def test_a_recorded_group_must_name_planned_tables_once() -> None:
    plan = [PlannedCommit("a", 1, b'{"commitInfo":{}}\n', CREATE_MODE).to_json()]
    for group in ({"m": {"tables": ["zz"], "validation": {}}}, {"m": ["a"]},
                  {"m": {"tables": ["a"], "validation": {}}, "n": {"tables": ["a"], "validation": {}}}):
        body = {"txn": "h", "state": COMMITTING, "lease_s": 1.0, "lease_expires": time.time() + 60, "gvl_base": 0,
                "plan": plan, "plan_txn": "h", "additions": {}, "group": group}
        import json

        rec = LockRecord.decode(json.dumps(body).encode())
        assert rec.invalid and rec.plan == () and not rec.group


def test_malformed_or_incomplete_requests_are_skipped(local_store: ObjectStore) -> None:
    local_store.put(f"{VQ_PREFIX}garbage~all.json", b"not json", mode=CREATE)
    local_store.put(f"{VQ_PREFIX}stray.json", b"{}", mode=CREATE)  # not a request key at all
    half = request_key("half", ["a"])
    local_store.put(half, b'{"txn": "half", "known": 0, "accesses": [{"table": "a", "written": true}], '
                    b'"policy": {}, "commits": {}, "markers": {}}', mode=CREATE)
    assert pending(local_store) == []
    with pytest.raises(ValueError, match="every written table"):
        Request.decode(local_store.get(half).data)


def test_request_keys_name_their_tables_so_a_holder_reads_only_possibly_disjoint_ones(tmp_path: Any) -> None:
    from lv_core.protocol.vqueue import parse_key, put_request
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.txn.group import make_request
    from lv_core.txn.isolation import table_accesses

    lh = _setup(tmp_path, ["t0", "t1"])
    txn = lh.begin("serializable")
    add_kv(txn, "t0", 1, 1.0)
    writes = txn.core.book.writes()
    req = make_request(txn.core, writes, table_accesses(txn.core, writes), 0)
    assert req is not None
    put_request(lh.store, req)
    txn_id, tags = parse_key(req.key) or ("", None)
    assert txn_id == txn.id and tags == frozenset({tag("t0")})
    counted = InstrumentedStore(lh.store)
    assert pending(counted, avoid={"t0"}) == [] and counted.counts().get("GET", 0) == 0  # shares t0: not read
    assert [r.txn for r in pending(counted, avoid={"t1"})] == [txn.id]
    assert parse_key(request_key("x", [f"t{i}" for i in range(100)])) == ("x", None)  # too many: "all"
    txn.rollback()


def test_a_dead_owners_request_is_never_committed_and_recovery_withdraws_it(tmp_path: Any) -> None:
    import json

    from lv_core.protocol.recovery import recover

    lh = _setup(tmp_path, ["t0", "t1"])

    def commit(t: str) -> Any:
        txn = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
        add_kv(txn, t, 1, 1.0)
        return txn.commit()

    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)
    threads, out = _run([lambda: commit("t0")])
    _await(lambda: len(_queued(lh.store)) == 1, "the request")
    (key,) = _queued(lh.store)
    body = json.loads(lh.store.get(key).data)
    blocker.release()
    threads[0].join(60)
    assert not isinstance(out[0], BaseException) and committed_kv(lh, "t0")[1] == 1.0
    # the same request again, from an owner that died long ago: its markers are not its own any more
    dead = "20200101T000000-00000000deadbeef"
    body["txn"] = dead
    lh.store.put(request_key(dead, ["t0"]), json.dumps(body).encode(), mode=CREATE)
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)
    threads, out = _run([lambda: commit("t1")])
    _await(lambda: len(_queued(lh.store)) == 2, "the live request")
    blocker.release()
    threads[0].join(60)
    assert not isinstance(out[0], BaseException)
    assert committed_kv(lh, "t0")[1] == 1.0 and committed_kv(lh, "t1")[1] == 1.0  # t0 not updated twice
    assert all(dead not in v.group for v in _versions(lh))
    cleaner.drain(30)
    assert _queued(lh.store) == [request_key(dead, ["t0"])]  # left alone by every holder
    rep = recover(lh.store, lease_grace_s=1.0, lease_s=1.0)
    assert rep.withdrawn_requests == [dead] and _queued(lh.store) == []


def test_a_request_whose_markers_outlived_their_lease_is_left_to_its_owner(tmp_path: Any) -> None:
    """An owner that queued and then died: its marker is still pending (nobody freed it) but the lease
    it carries ran out, so recovery may soon delete its staged files; no holder may commit it."""
    from lv_core.protocol.vqueue import put_request
    from lv_core.txn.group import make_request
    from lv_core.txn.isolation import table_accesses

    lh = _setup(tmp_path, ["t0", "t1"])
    ghost = Lakehouse(lh.store, lease_s=1.0).begin("serializable", timeout_s=60)
    add_kv(ghost, "t0", 1, 7.0)  # claims its marker on t0 (carrying a 1 s lease), stages its file
    core = ghost.core
    writes = core.book.writes()
    req = make_request(core, writes, table_accesses(core, writes), lh.global_log.known())
    assert req is not None
    put_request(lh.store, req)
    expiry = core.book.lease_expires
    _await(lambda: time.time() > expiry + 0.1, "the ghost's marker lease to run out")

    def commit() -> Any:
        txn = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
        add_kv(txn, "t1", 1, 1.0)
        return txn.commit()

    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)
    threads, out = _run([commit])
    _await(lambda: len(_queued(lh.store)) == 2, "the live request")
    blocker.release()
    threads[0].join(60)
    assert not isinstance(out[0], BaseException)
    assert committed_kv(lh, "t0")[1] == 0.0 and committed_kv(lh, "t1")[1] == 1.0
    assert all(ghost.id not in v.group for v in _versions(lh))


@pytest.mark.parametrize("point", ["validation-key-held", "plan-recorded", "gvl-published"])
def test_sigkill_of_a_group_holder(tmp_path: Any, point: str) -> None:
    """A holder process serving a queued transaction is SIGKILLed: before its plan is recorded nothing
    of either is committed by it (its own request is committed by the next holder only while its markers'
    lease runs, all or nothing); once recorded, the waiting member takes the lock over, rolls the whole
    group forward and finds its own commit there."""
    import os
    import signal

    from tests.unit.test_lv_r_processes import _worker

    wh, lh, base = crash_setup(tmp_path)
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)
    # the member polls every 5-10 s (queued too): the holder process (polling every few ms) gets the lock first
    # (its markers stay live while the worker process starts: a holder commits only a live request)
    member_lh = Lakehouse(lh.store, lease_s=30.0, poll_min_s=10.0, poll_max_s=10.0,
                          tuning=lv_core.Tuning(queued_poll_s=10.0))

    def member() -> Any:
        txn = member_lh.begin("serializable", timeout_s=120)
        add_kv(txn, "solo", 1, 1.0)
        return txn.id, txn.commit()

    threads, out = _run([member])
    _await(lambda: len(_queued(lh.store)) == 1, "the member's request")
    p = _worker("transfer", wh, "1.5", "serializable", env={"LV_TEST_PAUSE_AT": point})
    _await(lambda: len(_queued(lh.store)) == 2, "the holder-to-be's request")
    blocker.release()
    line = p.stdout.readline() if p.stdout is not None else ""
    if line.strip() != f"LV-PAUSED {point}":
        p.kill()  # (its stderr ends only when it does)
        raise AssertionError((line, p.communicate()[1]))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    threads[0].join(90)
    assert not isinstance(out[0], BaseException), out
    member_id, _res = out[0]
    assert committed_kv(lh, "solo") == {1: 101.0}
    moved = 100.0 - committed_kv(lh, "kv")[1]
    assert committed_kv(lh, "kv2")[1] == 100.0 + moved
    new = _versions(lh)[base + 1:]
    if point == "validation-key-held":  # the killed process published nothing: every new version is the member's
        assert all(v.txn == member_id for v in new), [(v.txn, dict(v.group)) for v in new]
        # its request was committed with the member's only if its markers' lease still ran then
        assert moved == 0.0 and all(not v.group for v in new) or moved == 1.0 and len(new[-1].group) == 1
    else:
        assert moved == 1.0  # rolled forward, with the member, in the holder's global version
        (grouped,) = [v for v in new if v.group]
        assert list(grouped.group) == [member_id] and grouped.txn != member_id
        assert grouped.tables["solo"] == grouped.group[member_id]["versions"]["solo"]


def test_a_commit_that_finds_the_key_free_commits_the_queued_requests_next(tmp_path: Any) -> None:
    """The fast path (validate against a free record's head, take the key with the plan) reads no queued
    request before its claim (tests/unit/test_queued_handoff.py); its session's next round serves the queue
    as a holder that waited would: one further global version names the queued transactions."""
    tables = ["t0", "t1", "t2", "t3"]
    lh = _setup(tmp_path, tables)
    blocker = lh.validation_lock.acquire("blocker", timeout_s=5)
    txns = {}

    def commit(t: str) -> Any:
        # the queued owners look again only seconds later
        txn = Lakehouse(lh.store, lease_s=30.0, poll_min_s=2.0, poll_max_s=5.0,
                        tuning=lv_core.Tuning(queued_poll_s=5.0)).begin("serializable", timeout_s=60)
        txns[t] = txn
        add_kv(txn, t, 1, 1.0)
        return txn.commit()

    threads, out = _run([lambda t=t: commit(t) for t in tables[:3]])
    _await(lambda: len(_queued(lh.store)) == 3, "three committers to queue their requests")
    before = lh.global_log.head()
    fast = Lakehouse(lh.store, lease_s=30.0).begin("serializable", timeout_s=60)
    add_kv(fast, "t3", 1, 1.0)
    blocker.head = before.version  # the free record names the head, as a holder's release does
    blocker.release()
    res = fast.commit()
    cleaner.drain(30)  # (the session's further rounds run after the commit returned)
    new = _versions(lh)[before.version + 1:]
    assert len(new) == 2 and new[0].txn == fast.id and res.gvl_version == new[0].version and not new[0].group
    assert {txns[t].id for t in tables[:3]} == set(new[1].group)
    for th in threads:
        th.join(60)
    assert all(not isinstance(r, BaseException) for r in out.values()), out
    for t in tables:
        assert committed_kv(lh, t) == {1: 1.0, 2: 0.0}
    cleaner.drain(30)
    assert _queued(lh.store) == []
