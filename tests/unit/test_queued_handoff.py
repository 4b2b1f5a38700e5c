"""Issue 38: the path from a released validation key to the next same-table writer's claim.

With one table and many serializable writers, markers order the writers and no holder can group them
(each waits for the commit before its marker): every writer takes the key itself, most after queueing
(they find it held while its last holder publishes). What it reads between seeing the key free and
claiming it is on every writer's path; these tests pin it down and run the cases that must still read
(a version taken behind the marker's back; a transaction already decided by a holder)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import lv_core
from lv_core import Lakehouse
from lv_core.protocol.lockrecord import FREE, LOCK_KEY, LockRecord, slot_of
from lv_core.protocol.vlock import FreeAnswer
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.txn import isolation
from lv_core.txn.cleaner import drain
from lv_core.txn.commitstep import Answer, Commit, Phase, start
from lv_core.txn.group import Waiter, make_request
from tests.helpers.bank import add_kv, committed_kv, make_kv
from tests.helpers.spy import record_requests

pytestmark = pytest.mark.timeout(120)


def _setup(tmp_path) -> tuple[InstrumentedStore, Lakehouse, Lakehouse]:
    """Tables x, y; one serializable commit by ``a`` (the key is free, naming its head); ``b``: another
    process, which knows an older head."""
    plain = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    for t in ("x", "y"):
        make_kv(plain, t, {1: 100.0})
    store = InstrumentedStore(plain.store)
    a, b = Lakehouse(store, lease_s=5.0), Lakehouse(store, lease_s=5.0)
    b.global_log.head()
    txn = a.begin("serializable")
    add_kv(txn, "x", 1, -1.0)
    add_kv(txn, "y", 1, 1.0)
    txn.commit()
    drain(30.0)
    return store, a, b


def _given(lh: Lakehouse, txn) -> isolation._Run:
    """A queued transaction of ``lh`` that sees the key free (its request queued, the head the free record
    names known): the commit's try of the free key, ready to drive."""
    core = txn.core
    writes = core.book.writes()
    accesses = isolation.table_accesses(core, writes)
    found = lh.validation_lock.look()
    slot = slot_of(found)
    assert found is not None and slot is not None and slot.head is not None
    lh.global_log.at(slot.head)  # (known: the waiter reads it ahead, test below)
    waiter = Waiter(core, lambda: make_request(core, writes, accesses, waiter.known), deadline=1e12,
                    on_free=lambda _w, _f: (FreeAnswer.USUAL, None))
    waiter.busy()
    return isolation._Run(core, writes, accesses, 1e12, waiter, found)


def _try(run: isolation._Run) -> Commit:
    return run.drive(*start(writes=True, queued=True))


def _queued_writer(lh: Lakehouse, table: str, amount: float) -> tuple[Any, Waiter]:
    """A serializable transaction of ``lh`` that wrote ``table`` (row 1, ``+amount``) and queued its request."""
    txn = lh.begin("serializable")
    add_kv(txn, table, 1, amount)
    core = txn.core
    writes = core.book.writes()
    accesses = isolation.table_accesses(core, writes)
    waiter = Waiter(core, lambda: make_request(core, writes, accesses, waiter.known), deadline=1e12,
                    on_free=lambda _w, _f: (FreeAnswer.USUAL, None))
    waiter.busy()
    return txn, waiter


def _holder_serving_the_queue(lh: Lakehouse) -> isolation._Run:
    """A queued writer of x given the free key, which reads the queue before its claim and serves it."""
    txn = lh.begin("serializable")
    add_kv(txn, "x", 1, -5.0)
    run = _given(lh, txn)
    run.waiter.settled = False  # (else it claims on its settled marker and leaves the queue to keep_serving)
    return run


def test_a_queued_writer_given_the_free_key_claims_it_without_reading_when_its_markers_are_settled(tmp_path):
    """Every written table behind a settled marker the head does not reach: the tails are known (the own
    marker, then nothing), as on the warm path, so nothing is probed and the queue is left to the
    session's further rounds (keep_serving). Fails on the code before: it probed each table's tail and
    listed the queue (4 GETs and 1 LIST more)."""
    store, a, b = _setup(tmp_path)
    txn = b.begin("serializable")
    add_kv(txn, "x", 1, -5.0)
    add_kv(txn, "y", 1, 5.0)
    run = _given(b, txn)
    store.reset()
    end = _try(run)
    drain(30.0)
    c = store.counts()  # (the commit's and the release's, on pool threads too)
    assert end.phase is Phase.COMMITTED, end
    assert (c["GET"], c["HEAD"]) == (0, 0), c  # nothing read before the claim
    assert (c["PUT-if-match"], c["PUT-create"]) == (2, 3), c  # claim with the plan, release; 2 commits, the version
    assert c["LIST"] == 1, c  # the queue, read while the plan is written (serving looks)
    state = a.global_log.head()
    assert run.state is not None and state.version == run.state.version + 1 and state.txn == txn.id
    assert committed_kv(a, "x") == {1: 94.0} and committed_kv(a, "y") == {1: 106.0}


def test_a_queued_writer_given_the_free_key_still_fails_when_a_plain_writer_took_its_marker_version(tmp_path):
    """The case the settled tails must not hide: a writer that ignores markers took the marker's version
    after it was placed. The plan's PUT-create finds it taken: nothing is written or published, the key is
    free again, and the commit goes the usual way (which probes and decides)."""
    import deltalake

    store, a, b = _setup(tmp_path)
    txn = b.begin("serializable")
    add_kv(txn, "x", 1, -5.0)
    run = _given(b, txn)
    opts = store.storage_options_for_deltalake() or None
    deltalake.write_deltalake(store.url("x"), pd.DataFrame({"id": [2], "val": [2.0]}), mode="append",
                              storage_options=opts)
    end = _try(run)
    drain(30.0)
    assert (end.phase, end.last) == (Phase.BACK_IN_QUEUE, Answer.VOID), end  # back to the usual way
    assert run.state is not None and a.global_log.head().version == run.state.version  # nothing published
    assert committed_kv(a, "x") == {1: 99.0, 2: 2.0}
    free = LockRecord.decode(store.get(LOCK_KEY).data)
    assert free.state == FREE


def test_a_waiter_reads_the_global_versions_it_needs_in_one_round_trip(tmp_path):
    """Once the key is free the waiter needs the head the free record names and every version since the
    one it knew (to see whether a holder committed it). Read together, in parallel (:meth:`Waiter.catch_up`),
    before the transaction's own decision: then that decision reads none of them. Failed on the code before
    Waiter read ahead: the head was read first, then the versions before it (two round trips)."""
    store, a, b = _setup(tmp_path)
    txn = b.begin("serializable")
    add_kv(txn, "y", 1, 1.0)
    for _ in range(3):  # three more global versions b does not know
        other = a.begin("serializable")
        add_kv(other, "x", 1, -1.0)
        other.commit()
    drain(30.0)
    seen: dict[str, object] = {}

    def on_free(waiter, found):
        from lv_core.protocol.vqueue import outcome_of

        waiter.catch_up(found[0].head)  # (as the commit's try of the free key does, its own reads started)
        store.reset()
        state = b.global_log.at(found[0].head)
        seen["outcome"] = outcome_of(b.global_log, txn.core.id, waiter.known, head=state)
        seen["gets"] = store.counts()["GET"]
        return FreeAnswer.USUAL, None

    waiter = Waiter(txn.core, lambda: None, deadline=1e12, on_free=on_free)
    waiter.queued = True  # (as after busy(): its request was put)
    found = b.validation_lock.look()
    assert found is not None and found[0].head == a.global_log.head().version
    assert found[0].head - waiter.known == 3
    waiter.free(found)
    assert seen == {"outcome": None, "gets": 0}, seen


def test_a_writer_queued_early_lists_the_requests_behind_it_beside_the_global_versions(tmp_path, monkeypatch):
    """A writer that queued before settling (requests of its table may wait behind it) finds the key free,
    with global versions it does not know yet: the list of the requests queued behind it is sent before
    those versions are read, so both share one round trip. The first global version's GET is held until
    that LIST is under way: on the code before (the versions read first, then the LIST) it waits out the
    10 s and the test fails."""
    import threading

    from lv_core.txn.group import make_request as request_of

    store, a, b = _setup(tmp_path)
    txn = b.begin("serializable")
    add_kv(txn, "x", 1, -5.0)  # its marker on x
    for _ in range(2):  # two global versions b does not know
        other = a.begin("serializable")
        add_kv(other, "y", 1, 1.0)
        other.commit()
    drain(30.0)
    core = txn.core
    writes = core.book.writes()
    accesses = isolation.table_accesses(core, writes)
    req = request_of(core, writes, accesses, core.services.glog.known(), early=True)
    waiter = Waiter(core, lambda: req, deadline=1e12, on_free=lambda _w, _f: (FreeAnswer.USUAL, None), early=True)
    assert waiter.queuing is not None
    waiter.queuing.result()
    found = b.validation_lock.look()
    assert found is not None and found[0].head is not None and found[0].head > waiter.known
    listed = threading.Event()
    together: list[bool] = []
    request = store._request
    first = threading.Lock()  # (the versions are read in parallel: only the first GET is held)

    def gate(kind, key, call):
        if kind == "LIST" and key.startswith("_lakevilla/vq"):
            listed.set()
        if kind == "GET" and key.startswith("_lakevilla/gvl/0") and first.acquire(blocking=False):
            together.append(listed.wait(10))
        return request(kind, key, call)

    monkeypatch.setattr(store, "_request", gate)
    end = _try(isolation._Run(core, writes, accesses, 1e12, waiter, found))
    drain(30.0)
    assert together == [True]
    assert end.phase is Phase.COMMITTED, end
    assert committed_kv(a, "x") == {1: 94.0}


def test_the_try_of_the_free_key_reads_the_head_beside_the_versions_before_it(tmp_path, monkeypatch):
    """The commit's own try of the free key (not a test's on_free) reads the head the free record names
    together with the versions since the one the waiter knew: the first global version's GET is held until a
    second one is under way. Fails if find_free_key does not call Waiter.catch_up (the head is then read alone
    by _free_head, the versions before it by outcome_of: two round trips). (From the review of ff2852f.)"""
    import threading

    store, a, b = _setup(tmp_path)
    txn = b.begin("serializable")
    add_kv(txn, "x", 1, -5.0)
    for _ in range(2):  # global versions b does not know
        other = a.begin("serializable")
        add_kv(other, "y", 1, 1.0)
        other.commit()
    drain(30.0)
    core = txn.core
    writes = core.book.writes()
    accesses = isolation.table_accesses(core, writes)
    waiter = Waiter(core, lambda: make_request(core, writes, accesses, waiter.known), deadline=1e12,
                    on_free=lambda _w, _f: (FreeAnswer.USUAL, None))
    waiter.busy()
    found = b.validation_lock.look()
    assert found is not None and found[0].head is not None and found[0].head - waiter.known >= 2
    first, second = threading.Lock(), threading.Event()
    together: list[bool] = []
    request = store._request

    def gate(kind, key, call):
        if kind == "GET" and key.startswith("_lakevilla/gvl/0"):
            if first.acquire(blocking=False):
                together.append(second.wait(5))
            else:
                second.set()
        return request(kind, key, call)

    monkeypatch.setattr(store, "_request", gate)
    end = _try(isolation._Run(core, writes, accesses, 1e12, waiter, found))
    drain(30.0)
    assert together == [True]
    assert end.phase is Phase.COMMITTED, end
    assert committed_kv(a, "x") == {1: 94.0}


def test_a_writer_timing_out_with_the_key_free_takes_a_key_round_so_a_holder_that_read_its_request_cannot_commit_it(
        tmp_path, monkeypatch):
    """A holder read the free record and then the queued request of o (another table); o's deadline passes
    before the holder claims: o withdraws its request and finds the key free. Ending there (the code before)
    let the holder's claim, conditioned on that free record, succeed and commit o's request after o had timed
    out (o then frees its marker and deletes its files under a published commit). Now o takes the key once
    first: the holder's claim fails (its transaction goes back to waiting for the key), and o's request,
    withdrawn, is never committed."""
    from lv_core.protocol.vlock import ValidationTimeout
    from lv_core.protocol.vqueue import outcome_of

    store, a, b = _setup(tmp_path)
    o, owaiter = _queued_writer(a, "y", 7.0)
    run = _holder_serving_the_queue(b)
    timed_out: list[bool] = []
    claim = isolation._Run.claim_with_plan

    def o_times_out_first(self):
        if self is run and not timed_out:
            assert list(self.group.members) == [o.id]  # the holder read o's request and would commit it
            owaiter.deadline = 0.0
            with pytest.raises(ValidationTimeout):
                owaiter.done(None)
            timed_out.append(True)
        return claim(self)

    monkeypatch.setattr(isolation._Run, "claim_with_plan", o_times_out_first)
    end = _try(run)
    drain(30.0)
    assert timed_out == [True]
    assert outcome_of(a.global_log, o.id, 0) is None  # never committed
    assert committed_kv(a, "y") == {1: 101.0}
    assert (end.phase, end.last) == (Phase.BACK_IN_QUEUE, Answer.LOST), end  # (it waits for the key again)
    assert committed_kv(a, "x") == {1: 99.0}


def test_a_cold_holder_reads_no_queued_request_before_its_claim(tmp_path, monkeypatch):
    """A writer that takes the free key on the cold route (not queued, not this process's last release) must
    not read queued requests beside its look at the key: one read before its owner withdrew it at its deadline
    could be claimed on a record written after the owner's key round (from the review of f955035: the LIST
    ran beside the key's GET). The queue is served by the session's further rounds instead: o's request is
    committed in a global version after the holder's own."""
    from lv_core.protocol.vqueue import VQ_PREFIX, outcome_of

    store, a, b = _setup(tmp_path)
    o, _owaiter = _queued_writer(a, "y", 7.0)
    txn = b.begin("serializable")
    add_kv(txn, "x", 1, -5.0)
    core = txn.core
    writes = core.book.writes()
    run = isolation._Run(core, writes, isolation.table_accesses(core, writes), 1e12)
    seen = record_requests(monkeypatch, store)
    end = run.drive(*start(writes=True))
    drain(30.0)
    assert end.phase is Phase.COMMITTED, end
    claim = next(i for i, (k, key) in enumerate(seen) if k == "PUT-if-match" and key == LOCK_KEY)
    assert [s for s in seen[:claim] if s[1].startswith(VQ_PREFIX)] == []
    head = a.global_log.head()
    mine = next(v for v in range(head.version + 1) if a.global_log.at(v).txn == core.id)
    theirs = outcome_of(a.global_log, o.id, 0)
    assert theirs is not None and theirs[0].version > mine  # (a further round of the holder's session)
    assert committed_kv(a, "y") == {1: 108.0}


@pytest.mark.parametrize("failure", ["timeout", "store error"])
def test_a_key_round_that_fails_ends_the_writer_undecided_not_aborted(tmp_path, monkeypatch, failure):
    """o reads the key free at its deadline; a holder that read o's request claims on that free record just
    before o's key round. The round then fails: it waits for the holder's session and times out (3 of o's
    short leases) while the holder still holds the key, or it meets a store error. Reported as a plain
    timeout or error, o would abort (markers freed, files deleted) and the holder then publish its request
    (from the reviews of f955035 and e773dee). It ends undecided: files kept, the log decides; here the
    holder commits it."""
    from lv_core.errors import LvError, StorageError, TransactionAborted
    from lv_core.protocol.vqueue import outcome_of

    store, a, b = _setup(tmp_path)
    short = Lakehouse(store, lease_s=0.3)  # o's process: a short lease, so its round's timeout is short
    short.global_log.head()
    o, owaiter = _queued_writer(short, "y", 7.0)
    run = _holder_serving_the_queue(b)
    claim = isolation._Run.claim_with_plan
    raised: list[BaseException] = []

    def down(*_a, **_k):
        raise StorageError("store unavailable")

    def claims_between_os_read_and_its_round(self):
        got = claim(self)
        if self is run and not raised:
            assert list(self.group.members) == [o.id]
            monkeypatch.setattr(short.validation_lock, "read", lambda: None)  # (o read the key free just before)
            if failure == "store error":
                monkeypatch.setattr(short.validation_lock, "acquire", down)
            owaiter.deadline = 0.0
            try:
                owaiter.done(None)
            except BaseException as e:  # noqa: BLE001 - judged below
                raised.append(e)
        return got

    monkeypatch.setattr(isolation._Run, "claim_with_plan", claims_between_os_read_and_its_round)
    end = _try(run)
    drain(30.0)
    assert end.phase is Phase.COMMITTED, end
    assert len(raised) == 1 and isinstance(raised[0], LvError) and not isinstance(raised[0], TransactionAborted)
    assert "undecided" in str(raised[0]) and o.core.book.decision is not None  # (ending keeps every file)
    assert outcome_of(a.global_log, o.id, 0) is not None  # the holder published o's request
    assert committed_kv(a, "y") == {1: 108.0}


def test_a_rollback_after_an_undecided_commit_keeps_its_markers_and_files(tmp_path, monkeypatch):
    """A commit that ends undecided (state "unknown": the log decides, files kept) is not undone by a rollback
    after it, as the SQL autocommit loop and ``with`` blocks do on any commit error: before, rollback ran the
    abort and freed the markers a holder's published commit may sit at. (From the review of e773dee.)"""
    from lv_core.errors import LvError, TransactionAborted
    from lv_core.txn import group as gc

    _store, a, _b = _setup(tmp_path)
    o = a.begin("serializable")
    add_kv(o, "x", 1, -7.0)
    add_kv(o, "y", 1, 7.0)
    core = o.core
    assert len(core.book.held()) == 2  # (a queued multi-table writer: markers on x and y)

    def key_round_timed_out(core, deadline):  # what Waiter.done raises when its key round fails
        raise gc.undecided(core, "timed out; whether a holder committed it is unknown")

    monkeypatch.setattr(isolation, "commit_isolated", key_round_timed_out)
    with pytest.raises(LvError) as got:
        o.commit()
    assert not isinstance(got.value, TransactionAborted) and o.state == "unknown"
    o.rollback()
    assert o.state == "unknown"
    assert core.book.freed == {} and len(core.book.held()) == 2  # markers left for the log to decide
