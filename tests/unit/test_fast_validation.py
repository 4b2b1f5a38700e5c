"""LV[I]'s fast path (issue 21): a process that released the validation key last validates against its
cached head and takes the key with its plan in one PUT-if-match on its own free record.

Each test also runs the case the fast path must not take (another holder in between, a version taken
behind the log's back), so a fast path that skipped a check would fail here."""

from __future__ import annotations

import pandas as pd
import pytest

import lv_core
from lv_core import Lakehouse
from lv_core.errors import TransactionAborted
from lv_core.protocol.lockrecord import FREE, LOCK_KEY, LockRecord
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.txn.cleaner import drain
from tests.helpers.bank import add_kv, committed_kv, make_kv

pytestmark = pytest.mark.timeout(120)


def _warm(tmp_path) -> tuple[InstrumentedStore, Lakehouse]:
    """Tables x, y, z; one serializable transfer committed by the returned lakehouse (it released the
    key last)."""
    plain = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)
    for t in ("x", "y", "z"):
        make_kv(plain, t, {1: 100.0})
    store = InstrumentedStore(plain.store)
    lh = Lakehouse(store, lease_s=5.0)
    _transfer(lh, 0).commit()
    drain(30.0)
    return store, lh


def _transfer(lh: Lakehouse, amount: float, tables: tuple[str, str] = ("x", "y")):
    txn = lh.begin("serializable")
    add_kv(txn, tables[0], 1, -amount)
    add_kv(txn, tables[1], 1, +amount)
    return txn


def _commit_counts(store: InstrumentedStore, txn) -> dict[str, int]:
    """Requests of ``txn.commit()`` and the background work it leaves (release, hint, clean-up)."""
    store.reset()
    txn.commit()
    drain(30.0)
    return store.counts()


def _append_plain(store, table: str, key: int, val: float) -> None:
    """A plain Delta writer (delta-rs) appends behind the global log's back (ignoring markers)."""
    import deltalake

    opts = store.storage_options_for_deltalake() or None
    deltalake.write_deltalake(store.url(table), pd.DataFrame({"id": [key], "val": [val]}), mode="append",
                              storage_options=opts)


def test_a_warm_commit_reads_nothing_and_takes_the_key_with_its_plan(tmp_path):
    store, lh = _warm(tmp_path)
    head = lh.global_state().version
    c = _commit_counts(store, txn := _transfer(lh, 5))
    # the key with the plan, two table commits, the global version; then (background) the free record + hint,
    # and one LIST: were commit requests queued meanwhile (then the next commit serves them)?
    assert (c["GET"], c["HEAD"], c["LIST"]) == (0, 0, 1), c
    assert (c["PUT-if-match"], c["PUT-create"]) == (2, 3), c
    state = lh.global_state()
    assert state.version == head + 1 and state.txn == txn.id
    assert committed_kv(lh, "x") == {1: 95.0} and committed_kv(lh, "y") == {1: 105.0}
    free = LockRecord.decode(store.get(LOCK_KEY).data)
    assert (free.state, free.head, free.txn) == (FREE, state.version, txn.id)

    # from a lakehouse that did not release the key last: the key's free record and the tables' tails are
    # read (one round trip), then the key is taken with the plan as above
    cold = Lakehouse(store, lease_s=5.0)
    txn2 = _transfer(cold, 1)
    c = _commit_counts(store, txn2)
    assert c["GET"] == 1 + 2 * 2 and (c["PUT-if-match"], c["PUT-create"]) == (2, 3), c
    assert lh.global_state().version == head + 2 and committed_kv(lh, "x") == {1: 94.0}


def test_another_holder_in_between_sends_the_commit_the_usual_way(tmp_path):
    store, lh = _warm(tmp_path)
    other = Lakehouse(store, lease_s=5.0)
    txn = _transfer(lh, 5)  # reads the head now; its cache still names the head it released
    _transfer(other, 3, ("z", "z")).commit()  # another process publishes the next global version
    published = lh.global_log.head().version
    c = _commit_counts(store, txn)
    assert c["GET"] >= 1, c  # the head (and the key) read again: the free record is not its own any more
    state = lh.global_state()
    assert state.version == published + 1 and state.txn == txn.id
    assert committed_kv(lh, "x") == {1: 95.0} and committed_kv(lh, "y") == {1: 105.0}
    assert committed_kv(lh, "z") == {1: 100.0} and state.tables["z"] == lh.version("z")


def test_a_plain_writer_on_the_marker_version_still_fails_r2(tmp_path):
    """Under snapshot (R1 does not look at what a writer read) the version taken is R2."""
    store, lh = _warm(tmp_path)
    head = lh.global_state()
    for tables in (("x",), ("x", "y")):
        txn = lh.begin("snapshot")
        for t in tables:
            add_kv(txn, t, 1, 1)
        _append_plain(store, "x", 2, 1.0)  # takes the version x's marker reserves
        with pytest.raises(TransactionAborted) as ei:
            txn.commit()
        assert ei.value.rule == "R2", ei.value
        drain(30.0)
        assert lh.global_state().version == head.version  # nothing published
        assert committed_kv(lh, "y") == {1: 100.0}  # a written part was reverted (plain readers see no change)
        assert lh.validation_lock.read() is None  # free again
    # one table: the plan broke before anything was written, so the usual validation decided (its numbers)
    txn = lh.begin("snapshot")
    add_kv(txn, "x", 1, 1)
    _append_plain(store, "x", 3, 1.0)
    with pytest.raises(TransactionAborted) as ei:
        txn.commit()
    t = ei.value.details["validation"]["tables"]["x"]
    assert t["rules"]["R2"]["passed"] is False and t["rules"]["R3"]["passed"] is True
    ok = _transfer(lh, 2)
    ok.commit()
    assert committed_kv(lh, "x") == {1: 98.0, 2: 1.0, 3: 1.0} and lh.global_state().txn == ok.id


def test_a_warm_blind_append_still_moves_past_a_plain_commit(tmp_path):
    import pyarrow as pa

    from lv_core.engine import arrow_ops as ops

    store, lh = _warm(tmp_path)
    txn = lh.begin("serializable")
    txn.execute(ops.append("x", pa.table({"id": pa.array([7], pa.int64()), "val": [7.0]})))
    _append_plain(store, "x", 8, 8.0)
    res = txn.commit()
    assert res.validation["tables"]["x"]["moved_from"] is not None
    assert committed_kv(lh, "x") == {1: 100.0, 7: 7.0, 8: 8.0}


def _left_to_its_owner(store) -> str:
    """Queue a well-formed request no holder can commit (its marker is not there): it stays queued."""
    from lv_core.protocol.validation import Policy, TableAccess
    from lv_core.protocol.vqueue import Request, RequestCommit, put_request

    req = Request("20000101T000000-stray", 0, (TableAccess("z", read=False, written=True, marker=9),), Policy(),
                  {"z": RequestCommit(b"", {}, False)}, {"z": (9, "no-such-etag")})
    put_request(store, req)
    return req.key


def test_a_process_that_saw_requests_queued_serves_the_queue_before_taking_the_key_again(tmp_path):
    """No starving the queue: a holder notes in the free record whether requests it could not commit are
    queued; then its next commit reads the key (cold) instead of taking the key at once, and its session
    looks at the queue once it holds the key (a holder reads queued requests only after the free record it
    claims on: tests/unit/test_queued_handoff.py)."""
    store, lh = _warm(tmp_path)
    stray = _left_to_its_owner(store)
    txn = _transfer(lh, 1)
    with store.scope("commit"):
        txn.commit()  # warm: nothing read before the key is taken (the holder looks at the queue after)
    drain(30.0)
    assert store.counts("commit")["GET"] == 0, store.counts("commit")
    assert LockRecord.decode(store.get(LOCK_KEY).data).queued is True
    c = _commit_counts(store, _transfer(lh, 1))  # the key is read first, the queue looked at under it
    assert c["GET"] >= 1 and c["LIST"] >= 1, c
    store.delete(stray)
    _commit_counts(store, _transfer(lh, 1))
    assert LockRecord.decode(store.get(LOCK_KEY).data).queued is False
    c = _commit_counts(store, _transfer(lh, 1))
    assert c["GET"] == 0, c  # warm again


def test_a_free_record_naming_a_missing_head_sends_the_commit_the_usual_way(tmp_path):
    from lv_core.protocol.lockrecord import free_record

    store, lh = _warm(tmp_path)
    head = lh.global_state().version
    store.put(LOCK_KEY, free_record("foreign", head + 5, queued=False).encode())  # a head never published
    cold = Lakehouse(store, lease_s=5.0)
    txn = _transfer(cold, 1)
    txn.commit()
    state = lh.global_state()
    assert state.version == head + 1 and state.txn == txn.id and committed_kv(lh, "x") == {1: 99.0}
    from lv_core.txn import cleaner

    cleaner.drain(30)  # the release runs in the background once the commit is published
    assert LockRecord.decode(store.get(LOCK_KEY).data).head == head + 1


def test_a_commit_behind_a_predecessor_that_published_reads_the_key_instead_of_claiming_a_stale_one(
        tmp_path, monkeypatch):
    """A marker chain on one table: the predecessor's commit names a global version newer than any this
    process knows, so the free record it cached is not current; its commit reads the key (cold) rather
    than failing a warm claim on a stale etag (and queueing for seconds after)."""
    import threading

    from lv_core.protocol.vlock import ValidationLock

    store, a = _warm(tmp_path)  # a released the key last: its free record and head are cached
    b = Lakehouse(store, lease_s=5.0)  # another process
    first = b.begin("serializable")
    add_kv(first, "x", 1, -1.0)  # the first marker on x
    second = a.begin("serializable")
    add_kv(second, "x", 1, -2.0)  # the next one: its commit waits for first's
    claims: list[tuple[bool, bool]] = []
    real = ValidationLock._claim

    def spy(self, rec, free_etag):
        got = real(self, rec, free_etag)
        claims.append((self is a.validation_lock, got is not None))
        return got

    monkeypatch.setattr(ValidationLock, "_claim", spy)
    out: dict[str, object] = {}
    behind = threading.Thread(target=lambda: out.setdefault("res", second.commit()))
    behind.start()
    first.commit()
    behind.join(60)
    assert "res" in out, "the second commit did not finish"
    assert committed_kv(a, "x") == {1: 97.0}
    assert [ok for mine, ok in claims if mine] == [True], claims  # one claim by a, and it held
    assert not a.validation_lock.contended()
