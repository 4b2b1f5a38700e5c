"""Module #4.2: the validation lock (mutual exclusion, lease, takeover) and commit plans (roll forward/back)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lv_core.delta import CommitInfo, DeltaLog, create_table, encode_commit, write_data_files
from lv_core.errors import TransactionAborted
from lv_core.protocol import ict
from lv_core.protocol.commitplan import (
    CREATE_MODE,
    OVERWRITE_MARKER,
    PlannedCommit,
    build_plan,
    execute_plan,
    ordered,
)
from lv_core.protocol.gvl import EMPTY, GlobalLog
from lv_core.protocol.heldlock import Hold
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import (
    MarkerInfo,
    fill_version,
    free_marker,
    lakevilla_commit_info,
    place_marker,
    read_version,
)
from lv_core.protocol.vlock import (
    COMMITTING,
    FREE,
    LOCK_KEY,
    VALIDATING,
    LockRecord,
    ValidationLock,
    ValidationLockLost,
    ValidationTimeout,
)
from lv_core.storage.base import CREATE, ObjectStore
from lv_core.storage.instrumented import InstrumentedStore

pytestmark = pytest.mark.timeout(120)


def commit_bytes(store: ObjectStore, table: str, txn: str, rows: list[int]) -> bytes:
    """The bytes of a small real commit appending ``rows`` (data files written now; an unsealed
    in-commit timestamp when the table has them)."""
    snap = DeltaLog(store, table).snapshot(method="probe")
    adds = write_data_files(store, table, snap, pa.table({"id": rows}))
    if ict.enabled(snap.protocol, snap.metadata):
        return ict.commit_info_first(list(adds), lakevilla_commit_info(txn, "WRITE"), True)
    return encode_commit([CommitInfo(lakevilla_commit_info(txn, "WRITE")), *adds])


def crashed_record(state: str, *, txn: str = "crashed", plan: tuple[PlannedCommit, ...] = (), gvl_base: int = -1,
                   expires_in: float = -5.0, lease_s: float = 1.0) -> LockRecord:
    return LockRecord(txn, state, lease_s, time.time() + expires_in, "dead:1", time.time() - 10, gvl_base,
                      plan, txn if state == COMMITTING else None)


def rows(store: ObjectStore, table: str) -> list[int]:
    opts = store.storage_options_for_deltalake() or None
    return sorted(DeltaTable(store.url(table), storage_options=opts).to_pyarrow_table()["id"].to_pylist())


# ------------------------------------------------------------------------------------------ the lock
def test_acquire_and_release(store: ObjectStore) -> None:
    inst = InstrumentedStore(store)
    lock = ValidationLock(inst, lease_s=30)
    with lock.acquire("t-1", timeout_s=5) as held:
        rec, _ = lock.read() or (None, None)
        assert rec is not None and (rec.txn, rec.state, rec.gvl_base) == ("t-1", VALIDATING, None)
        assert rec.lease_expires > time.time() + 20 and not held.lost and held.takeovers == []
    assert lock.read() is None
    counts = inst.counts()
    # acquire = 1 GET (no key yet) + 1 PUT-create, release = 1 PUT-if-match leaving a free record (+ the
    # test's 2 reads); the queue is listed only while a plan is written
    assert (counts["PUT-create"], counts["PUT-if-match"], counts["GET"], counts["DELETE"], counts["LIST"]) == (
        1, 1, 3, 0, 0)
    assert inst.total() == 5
    free = LockRecord.decode(store.get(LOCK_KEY).data)
    # it never read nor published a head; whether requests are queued was not looked at (the next
    # commit of this process looks)
    assert (free.state, free.txn, free.head, free.queued) == (FREE, "t-1", None, True)
    inst.reset()
    with lock.acquire("t-2", timeout_s=5):  # over the free record it wrote itself: 1 PUT-if-match, no read
        pass
    assert (inst.counts()["PUT-if-match"], inst.counts()["LIST"], inst.total()) == (2, 0, 2)
    other = ValidationLock(inst, lease_s=30)  # another client: reads the free record, then PUT-if-match
    inst.reset()
    with other.acquire("t-3", timeout_s=5):
        assert (inst.counts()["PUT-create"], inst.counts()["GET"], inst.counts()["PUT-if-match"]) == (0, 1, 1)


def test_mutual_exclusion_across_8_threads(store: ObjectStore) -> None:
    lock = ValidationLock(store, lease_s=5, poll_max_s=0.05)
    glog = GlobalLog(store)
    inside = 0
    max_inside = 0
    mu = threading.Lock()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        nonlocal inside, max_inside
        try:
            with lock.acquire(f"t-{i}", timeout_s=60):
                with mu:
                    inside += 1
                    max_inside = max(max_inside, inside)
                head = glog.head()  # each holder publishes one version: a second holder would fork the log
                time.sleep(0.01)
                glog.publish(head, {f"t{i}": i}, f"t-{i}")
                with mu:
                    inside -= 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and max_inside == 1
    head = GlobalLog(store).head()
    assert head.version == 7 and len(head.tables) == 8
    assert lock.read() is None


def test_waiting_times_out_and_the_lease_is_renewed(local_store: ObjectStore) -> None:
    holder = ValidationLock(local_store, lease_s=0.5).acquire("holder", timeout_s=1)
    seen: list[LockRecord] = []
    waiter = ValidationLock(local_store, lease_s=0.5, skew_s=0)
    t0 = time.monotonic()
    with pytest.raises(ValidationTimeout) as ei:
        waiter.acquire("waiter", timeout_s=1.2, on_wait=seen.append)  # > 2 leases: renewals keep it alive
    assert ei.value.rule == "timeout" and "held by transaction holder" in ei.value.reason
    assert 1.1 < time.monotonic() - t0 < 3.5 and [r.txn for r in seen] == ["holder"]
    assert not holder.lost
    holder.release()
    with waiter.acquire("waiter", timeout_s=1):
        pass


def test_expired_validating_lock_is_rolled_back(store: ObjectStore) -> None:
    store.put(LOCK_KEY, crashed_record(VALIDATING).encode(), mode=CREATE)
    t0 = time.monotonic()
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        assert time.monotonic() - t0 < 1
        assert [(t.previous_txn, t.previous_state, t.action) for t in held.takeovers] == [
            ("crashed", VALIDATING, "rolled-back")]
        assert held.record.txn == "next" and held.record.state == VALIDATING
        rec, _ = ValidationLock(store).read() or (None, None)
        assert rec is not None and rec.txn == "next"
    assert GlobalLog(store).head() == EMPTY  # nothing published


def test_expiry_by_observation_needs_no_synchronised_clock(local_store: ObjectStore) -> None:
    # The crashed holder's clock was an hour ahead: its lease_expires is still in the future.
    rec = crashed_record(VALIDATING, expires_in=3600, lease_s=0.5)
    local_store.put(LOCK_KEY, rec.encode(), mode=CREATE)
    t0 = time.monotonic()
    with ValidationLock(local_store, lease_s=5, skew_s=7200).acquire("next", timeout_s=5) as held:
        waited = time.monotonic() - t0
        assert held.takeovers[0].action == "rolled-back"
    assert 0.45 < waited < 2.5  # one unchanged lease as seen by the waiter, plus polling


def test_expired_committing_lock_is_rolled_forward(store: ObjectStore) -> None:
    create_table(store, "a", "id BIGINT")
    create_table(store, "b", "id BIGINT")
    base = GlobalLog(store).publish(EMPTY, {"a": 0, "b": 0}, "setup")
    mv, metag, _ = place_marker(store, "a", 1, MarkerInfo("crashed"))
    data_a = commit_bytes(store, "a", "crashed", [1, 2])
    data_b = commit_bytes(store, "b", "crashed", [3])
    plan = (PlannedCommit("a", mv, data_a, OVERWRITE_MARKER, metag), PlannedCommit("b", 1, data_b, CREATE_MODE))
    store.put(LOCK_KEY, crashed_record(COMMITTING, plan=plan, gvl_base=base.version).encode(), mode=CREATE)
    store.put(commit_key("b", 1), data_b, mode=CREATE)  # it crashed after writing b, before a and the gvl
    assert read_version(store, "a", 1).kind == "marker" and rows(store, "a") == []

    reader = GlobalLog(store)
    assert reader.head() == base  # LV[I] readers still see neither table's change
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        (tk,) = held.takeovers
        assert (tk.previous_txn, tk.previous_state, tk.action) == ("crashed", COMMITTING, "rolled-forward")
        assert tk.result is not None and tk.result.versions == {"a": 1, "b": 1}
        assert held.record.txn == "next" and held.record.state == VALIDATING and held.record.plan == ()
    head = reader.head()
    assert (head.version, dict(head.tables), head.txn) == (1, {"a": 1, "b": 1}, "crashed")
    assert rows(store, "a") == [1, 2] and rows(store, "b") == [3]
    assert ValidationLock(store).read() is None


def test_roll_forward_survives_a_second_crash(local_store: ObjectStore) -> None:
    """A taker that crashes mid roll forward leaves the plan recorded; the next one completes it."""
    store = local_store
    create_table(store, "a", "id BIGINT")
    data = commit_bytes(store, "a", "first", [7])
    plan = (PlannedCommit("a", 1, data),)
    store.put(LOCK_KEY, crashed_record(COMMITTING, txn="first", plan=plan).encode(), mode=CREATE)
    inst = InstrumentedStore(store)
    inst.fail("PUT-create", key_contains="_delta_log")  # the taker's table write fails
    with pytest.raises(Exception, match="injected fault"):
        ValidationLock(inst, lease_s=0.5, skew_s=0).acquire("second", timeout_s=5)
    rec, _ = ValidationLock(store).read() or (None, None)
    assert rec is not None and rec.state == COMMITTING and rec.txn == "second" and rec.recovering == "first"
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("third", timeout_s=5) as held:
        assert held.takeovers[0].previous_txn == "second" and held.takeovers[0].action == "rolled-forward"
    head = GlobalLog(store).head()
    assert head.txn == "first" and dict(head.tables) == {"a": 1} and rows(store, "a") == [7]


def test_holder_commit_path_and_its_cost(store: ObjectStore) -> None:
    create_table(store, "a", "id BIGINT")
    create_table(store, "b", "id BIGINT")
    glog0 = GlobalLog(store)
    glog0.publish(EMPTY, {"a": 0, "b": 0}, "setup")
    mv, metag, _ = place_marker(store, "a", 1, MarkerInfo("me"))
    plan = [PlannedCommit("a", mv, commit_bytes(store, "a", "me", [1]), OVERWRITE_MARKER, metag),
            PlannedCommit("b", 1, commit_bytes(store, "b", "me", [2]))]
    inst = InstrumentedStore(store)
    glog = GlobalLog(inst)
    lock = ValidationLock(inst, glog, lease_s=30)
    with lock.acquire("me", timeout_s=5) as held:
        base = glog.head()
        result = held.commit(plan, base, additions={"c": 4})
    assert result.committed and result.versions == {"a": 1, "b": 1}
    assert result.gvl is not None and dict(result.gvl.tables) == {"a": 1, "b": 1, "c": 4} and result.gvl.txn == "me"
    c = inst.counts()
    # lock: GET (no key yet), PUT-create, PUT-if-match (committing), PUT-if-match (free); head: GET hint +
    # GET miss; plan: PUT-create (b) + PUT-create (a's marker version, into the log); publish: PUT-create + PUT
    # (+ 1 LIST in the background: were commit requests queued while it was held?)
    assert (c["PUT-create"], c["PUT-if-match"], c["PUT"], c["GET"], c["DELETE"], c["HEAD"], c["LIST"]) == (
        4, 2, 1, 3, 0, 0, 1)
    free = LockRecord.decode(store.get(LOCK_KEY).data)
    assert (free.state, free.head) == (FREE, result.gvl.version) and lock.free_slot().head == result.gvl.version
    assert lock.read() is None and rows(store, "a") == [1] and rows(store, "b") == [2]
    assert GlobalLog(store).head() == result.gvl


def test_a_holder_that_lost_its_lease_cannot_commit(local_store: ObjectStore) -> None:
    store = local_store
    create_table(store, "a", "id BIGINT")
    slow = ValidationLock(store, lease_s=0.3, skew_s=0).acquire("slow", timeout_s=1)
    slow._stop.set()  # the holder stalls: no more renewals
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as other:
        assert other.takeovers[0].previous_txn == "slow"
        with pytest.raises(ValidationLockLost, match="Nothing was written"):
            slow.commit([PlannedCommit("a", 1, commit_bytes(store, "a", "slow", [1]))], EMPTY)
        slow.release()  # must not delete the new holder's lock
        rec, _ = other.lock.read() or (None, None)
        assert rec is not None and rec.txn == "next"
    assert not store.exists(commit_key("a", 1)) and GlobalLog(store).head() == EMPTY


# ------------------------------------------------------------------------------------------ commit plans
def test_plan_order_puts_creates_first() -> None:
    m = PlannedCommit("m", 1, b"x", OVERWRITE_MARKER, "e")
    c = PlannedCommit("c", 1, b"x")
    b = PlannedCommit("b", 1, b"x", blind=True)
    assert ordered([m, b, c]) == [c, b, m]
    with pytest.raises(ValueError, match="etag"):
        PlannedCommit("m", 1, b"x", OVERWRITE_MARKER)
    with pytest.raises(ValueError, match="mode"):
        PlannedCommit("m", 1, b"x", "overwrite")


def test_build_plan_from_a_validation_outcome() -> None:
    from lv_core.protocol.validation import TableInputs, validate

    out = validate([
        TableInputs("m", True, True, False, 4, 4, 5, 4, 0, 5, marker=5),  # marker at w: overwrite it
        TableInputs("c", True, True, False, 2, 2, 3, 2, 0, 2),  # no marker: create
        TableInputs("moved", False, True, True, 6, 7, 7, 7, 0, 7, marker=7),  # blind, moved off its marker
        TableInputs("ro", True, False, False, 1, 1, None, 1, 0, 1),
    ])
    assert out.compatible and out.tables["moved"].moved_from == 7
    plan = build_plan(out, {"m": b"M", "c": b"C", "moved": b"V"}, {"m": (5, "e5"), "moved": (7, "e7")})
    assert [(e.table, e.version, e.mode, e.etag, e.blind) for e in plan] == [
        ("m", 5, OVERWRITE_MARKER, "e5", False), ("c", 3, CREATE_MODE, None, False),
        ("moved", 8, CREATE_MODE, None, True)]
    with pytest.raises(ValueError, match="no commit bytes"):
        build_plan(out, {"m": b"M"})
    bad = validate([TableInputs("c", True, True, False, 1, 3, 2, 3, 0, 3)])
    with pytest.raises(ValueError, match="incompatible"):
        build_plan(bad, {"c": b"C"})


def test_plan_is_idempotent_for_a_late_holder(local_store: ObjectStore) -> None:
    store = local_store
    create_table(store, "a", "id BIGINT")
    mv, metag, _ = place_marker(store, "a", 1, MarkerInfo("me"))
    plan = [PlannedCommit("a", mv, commit_bytes(store, "a", "me", [5]), OVERWRITE_MARKER, metag)]
    first = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=-1)
    again = execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=-1)  # the original holder wakes up
    assert first.committed and again.committed and first.gvl == again.gvl and again.versions == {"a": 1}
    assert GlobalLog(store).head().version == 0 and rows(store, "a") == [5]


def test_two_runners_of_one_plan_agree(local_store: ObjectStore) -> None:
    """The stalled owner and a taker run the same plan at the same time: one outcome, no double write."""
    store = local_store
    for t in ("a", "b"):
        create_table(store, t, "id BIGINT")
    plan = [PlannedCommit("a", 1, commit_bytes(store, "a", "me", [1])),
            PlannedCommit("b", 1, commit_bytes(store, "b", "me", [2]), blind=True)]
    write_deltalake(store.url("b"), pa.table({"id": [98]}), mode="append")  # b@1 taken: the blind append walks
    write_deltalake(store.url("b"), pa.table({"id": [99]}), mode="append")
    results: list = []
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        results.append(execute_plan(store, GlobalLog(store), plan, txn="me", gvl_base=-1))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r.committed for r in results)
    assert results[0].versions == results[1].versions == {"a": 1, "b": 3}
    assert results[0].gvl == results[1].gvl and GlobalLog(store).head().version == 0
    assert rows(store, "b") == [2, 98, 99] and DeltaLog(store, "b").latest_version_by_probe(0) == 3


def test_foreign_writer_after_validation_breaks_a_plan(local_store: ObjectStore) -> None:
    store = local_store
    create_table(store, "a", "id BIGINT")
    data = commit_bytes(store, "a", "me", [1])
    write_deltalake(store.url("a"), pa.table({"id": [99]}), mode="append")  # takes version 1 after validation
    with ValidationLock(store).acquire("me", timeout_s=5) as held:
        with pytest.raises(TransactionAborted) as ei:
            held.commit([PlannedCommit("a", 1, data)], EMPTY)
    assert ei.value.rule == "R2" and "taken by another writer" in ei.value.reason and ei.value.details["undone"] == {}
    assert GlobalLog(store).head() == EMPTY and ValidationLock(store).read() is None
    # the same commit as a blind append walks to the next free version instead
    result = execute_plan(store, GlobalLog(store), [PlannedCommit("a", 1, data, blind=True)], txn="me", gvl_base=-1)
    assert result.committed and result.versions == {"a": 2} and dict(result.gvl.tables) == {"a": 2}  # type: ignore[union-attr]
    assert rows(store, "a") == [1, 99]


@pytest.mark.parametrize("stamped", [False, True])
def test_lost_marker_rolls_the_written_tables_back(local_store: ObjectStore, stamped: bool) -> None:
    """``stamped``: tables with in-commit timestamps (the empty commit and the revert are stamped too)."""
    store = local_store
    conf = {"delta.enableInCommitTimestamps": "true"} if stamped else None
    for t in ("a", "b"):
        create_table(store, t, "id BIGINT", configuration=conf)
    mv, metag, _ = place_marker(store, "b", 1, MarkerInfo("me"))
    free_marker(store, "b", read_version(store, "b", mv), "expired", by="someone")  # our lease ran out
    fill_version(store, "b", mv, read_version(store, "b", mv))  # a waiter resolved it
    plan = [PlannedCommit("b", mv, commit_bytes(store, "b", "me", [2]), OVERWRITE_MARKER, metag),
            PlannedCommit("a", 1, commit_bytes(store, "a", "me", [1]))]
    base = GlobalLog(store).publish(EMPTY, {"a": 0, "b": 0}, "setup")
    with ValidationLock(store).acquire("me", timeout_s=5) as held:
        with pytest.raises(TransactionAborted) as ei:
            held.commit(plan, base)
    # the log is never rewritten: a@1 keeps the commit, a revert commit at a@2 undoes it
    assert ei.value.rule == "timeout" and ei.value.details == {"written": {"a": 1}, "undone": {"a": 2}}
    st = read_version(store, "a", 1)
    assert st.kind == "commit" and st.txn == "me" and rows(store, "a") == []
    assert read_version(store, "a", 2).txn == "me" and b"LAKEVILLA REVERT" in read_version(store, "a", 2).raw
    assert GlobalLog(store).head() == base and ValidationLock(store).read() is None
    for t, n in (("a", 3), ("b", 2)):
        got = [ict.stamped(read_version(store, t, v).raw) for v in range(n)]
        if stamped:
            assert all(isinstance(x, int) for x in got) and got == sorted(set(got)), got
        else:
            assert got == [None] * n


def test_record_roundtrip_and_garbage() -> None:
    plan = (PlannedCommit("a", 3, b'{"commitInfo":{}}\n', OVERWRITE_MARKER, "etag-1", blind=False),)
    rec = LockRecord("t", COMMITTING, 2.0, 123.0, "h:1", 100.0, 4, plan, "t", {"x": 1}, None)
    assert LockRecord.decode(rec.encode()) == rec
    bad = LockRecord.decode(b"{oops")
    assert bad.state == VALIDATING and bad.lease_expires == 0.0




def test_a_renewal_whose_response_got_lost_keeps_the_key(local_store: ObjectStore) -> None:
    """The renewal PUT-if-match landed but its answer was lost: read back, our bytes are there, the new
    etag is taken, and the next renewal and the release still match (before, the next renewal failed
    its if-match and the holder took its own key for lost)."""
    inst = InstrumentedStore(local_store)
    lock = ValidationLock(inst, lease_s=0.3)
    held = lock.acquire("t-1", timeout_s=5)
    inst.fail("PUT-if-match", after=True)  # the first renewal lands, its response is lost
    deadline = time.monotonic() + 10
    while inst.counts()["PUT-if-match"] < 3 and time.monotonic() < deadline:  # that one, and the next
        time.sleep(0.01)
    assert inst.counts()["PUT-if-match"] >= 3 and inst.counts()["GET"] >= 1
    assert held.hold is Hold.HOLDING and not held.lost
    held.release()
    assert held.hold is Hold.FREED
    with ValidationLock(inst, lease_s=30).acquire("t-2", timeout_s=1):  # free: taken at once, no wait
        pass
