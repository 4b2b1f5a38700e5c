"""Module #4.2: a recorded commit plan is checked before anyone executes it.

A validation key in state "committing" written by a buggy or foreign client whose plan is malformed
(invalid table name, bad version or mode, commit bytes that are not a Delta commit, ...) must never be
rolled forward: not by a validator taking the key over, not by ``recover``. It reads as ``invalid``
(empty plan), keeps its lease, and is rolled back (taken over) once the lease expired.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import pyarrow as pa
import pytest

from lv_core.delta import CommitInfo, DeltaLog, create_table, encode_commit, write_data_files
from lv_core.protocol.commitplan import (
    CREATE_MODE,
    OVERWRITE_MARKER,
    InvalidPlan,
    PlannedCommit,
    check_entry,
    check_plan,
    parse_plan,
)
from lv_core.protocol.gvl import EMPTY, GlobalLog
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import MarkerInfo, lakevilla_commit_info, place_marker, read_version
from lv_core.protocol.recovery import recover
from lv_core.protocol.vlock import COMMITTING, LOCK_KEY, VALIDATING, LockRecord, ValidationLock, ValidationTimeout
from lv_core.storage.base import CREATE, ObjectStore

pytestmark = pytest.mark.timeout(120)

COMMIT = '{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"p.parquet","partitionValues":{},"size":1,' \
         '"modificationTime":1,"dataChange":true}}'


DROP = object()  # leave the field out


def entry(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"table": "a", "version": 1, "mode": CREATE_MODE, "etag": None, "blind": False,
                            "commit": COMMIT}
    body.update(over)
    return {k: v for k, v in body.items() if v is not DROP}


def key(plan: Any = None, **over: Any) -> bytes:
    body: dict[str, Any] = {"txn": "foreign", "state": COMMITTING, "lease_s": 1.0, "lease_expires": 1.0,
                            "client": "x:1", "acquired": 0.0, "gvl_base": -1, "plan_txn": "foreign",
                            "plan": [entry()] if plan is None else plan, "additions": {}}
    body.update(over)
    return json.dumps(body).encode()


def commit_bytes(store: ObjectStore, table: str, txn: str, rows: list[int]) -> bytes:
    snap = DeltaLog(store, table).snapshot(method="probe")
    adds = write_data_files(store, table, snap, pa.table({"id": rows}))
    return encode_commit([CommitInfo(lakevilla_commit_info(txn, "WRITE")), *adds])


# ------------------------------------------------------------------------------------------ parsing (pure)
def test_a_valid_plan_parses_and_round_trips() -> None:
    plan, adds = parse_plan([entry(), entry(table="m", version=0, mode=OVERWRITE_MARKER, etag="e1", blind=True)],
                            {"ro": 3})
    assert [(e.table, e.version, e.mode, e.etag, e.blind) for e in plan] == [
        ("a", 1, CREATE_MODE, None, False), ("m", 0, OVERWRITE_MARKER, "e1", True)]
    assert plan[0].data == COMMIT.encode() and adds == {"ro": 3}
    assert parse_plan(None, None) == ((), {})
    rec = LockRecord.decode(key())
    assert rec.state == COMMITTING and not rec.invalid and rec.plan == (PlannedCommit("a", 1, COMMIT.encode()),)
    assert LockRecord.decode(rec.encode()) == rec


BAD_ENTRIES = [
    ("parent-dir", dict(table="../evil"), "path separator"),
    ("dotdot", dict(table="a..b"), "'..'"),
    ("reserved", dict(table="_lakevilla"), "reserved"),
    ("empty-table", dict(table=""), "empty"),
    ("table-int", dict(table=5), "must be a string"),
    ("control-char", dict(table="a\x01"), "control character"),
    ("negative-version", dict(version=-1), "non-negative integer"),
    ("string-version", dict(version="1"), "non-negative integer"),
    ("float-version", dict(version=1.5), "non-negative integer"),
    ("bool-version", dict(version=True), "non-negative integer"),
    ("null-version", dict(version=None), "non-negative integer"),
    ("unknown-mode", dict(mode="overwrite"), "mode must be one of"),
    ("null-mode", dict(mode=None), "mode must be one of"),
    ("marker-without-etag", dict(mode=OVERWRITE_MARKER), "etag"),
    ("etag-int", dict(mode=OVERWRITE_MARKER, etag=7), "etag must be a string"),
    ("blind-string", dict(blind="false"), "blind"),
    ("commit-empty-object", dict(commit="{}"), "exactly one key"),
    ("commit-not-json", dict(commit="not json"), "invalid JSON"),
    ("commit-two-keys", dict(commit='{"add":{},"remove":{}}'), "exactly one key"),
    ("commit-bad-line", dict(commit=COMMIT + "\n[1, 2]"), "line 3"),
    ("commit-bad-add", dict(commit='{"add":{"path":"p"}}'), "bad 'add' action"),
    ("commit-empty", dict(commit=""), "no action"),
    ("commit-not-string", dict(commit={"add": {}}), "commit must be a string"),
    ("commit-lone-surrogate", dict(commit="\ud800"), "not valid text"),
    ("missing-table", dict(table=DROP), "misses 'table'"),
    ("missing-commit", dict(commit=DROP), "misses 'commit'"),
]


@pytest.mark.parametrize("over,fragment", [c[1:] for c in BAD_ENTRIES], ids=[c[0] for c in BAD_ENTRIES])
def test_a_malformed_entry_is_refused(over: dict[str, Any], fragment: str) -> None:
    plan = [entry(table="ok"), entry(**over)]
    with pytest.raises(InvalidPlan, match=re.escape(fragment)):
        parse_plan(plan)
    rec = LockRecord.decode(key(plan))
    assert rec.invalid and fragment in rec.invalid_reason
    assert (rec.txn, rec.state, rec.plan, dict(rec.additions), rec.plan_txn) == ("foreign", COMMITTING, (), {},
                                                                                "foreign")
    assert (rec.lease_s, rec.lease_expires) == (1.0, 1.0)  # its lease is kept: a live holder is respected


BAD_PLANS = [
    ("plan-not-list", dict(plan={"a": 1})),
    ("plan-string", dict(plan="abc")),
    ("entry-not-object", dict(plan=[[1, 2]])),
    # one table twice only as a same-table group (issue 38): at increasing versions, none blind
    ("duplicate-table-version", dict(plan=[entry(), entry()])),
    ("same-table-going-back", dict(plan=[entry(version=2), entry()])),
    ("same-table-blind", dict(plan=[entry(), entry(version=2, blind=True)])),
    ("addition-invalid-table", dict(additions={"../x": 1})),
    ("addition-negative", dict(additions={"ro": -1})),
    ("addition-string", dict(additions={"ro": "1"})),
    ("additions-list", dict(additions=[1])),
    ("gvl-base-below-minus-one", dict(gvl_base=-2)),
    ("gvl-base-string", dict(gvl_base="3")),
    ("gvl-base-bool", dict(gvl_base=True)),
    ("plan-txn-int", dict(plan_txn=5)),
    ("plan-txn-empty", dict(plan_txn="")),
]


@pytest.mark.parametrize("over", [c[1] for c in BAD_PLANS], ids=[c[0] for c in BAD_PLANS])
def test_a_malformed_plan_reads_as_invalid(over: dict[str, Any]) -> None:
    plan = over.pop("plan", None)
    rec = LockRecord.decode(key(plan, **over))
    assert rec.invalid and rec.invalid_reason and rec.state == COMMITTING and rec.txn == "foreign"
    assert rec.plan == () and dict(rec.additions) == {}
    with pytest.raises(ValueError, match="must not be written back"):
        rec.encode()


def test_check_plan_on_built_entries() -> None:
    good = PlannedCommit("a", 1, COMMIT.encode())
    check_plan([good, PlannedCommit("b", 0, COMMIT.encode(), OVERWRITE_MARKER, "e", True)], {"c": 0})
    assert check_entry(good) is good
    for bad in (PlannedCommit("../evil", 1, COMMIT.encode()), PlannedCommit("a", -1, COMMIT.encode()),
                PlannedCommit("a", 1, b"{}"), PlannedCommit("a", 1, b"\xff\xfe"), PlannedCommit("a", 1, b"")):
        with pytest.raises(InvalidPlan):
            check_entry(bad)
    with pytest.raises(InvalidPlan, match="twice"):
        check_plan([good, good])
    with pytest.raises(InvalidPlan, match="addition"):
        check_plan([good], {"_lakevilla": 1})


def test_validating_records_and_garbage_read_as_before() -> None:
    rec = LockRecord.decode(json.dumps({"txn": "v", "state": VALIDATING, "lease_s": 2, "lease_expires": 5,
                                        "gvl_base": 3, "plan": [entry(table="../evil")]}).encode())
    assert (rec.state, rec.gvl_base, rec.plan, rec.invalid) == (VALIDATING, 3, (), False)  # plan never read
    for garbage in (b"garbage", b"[1]", key(state="frozen"), key(lease_s="x"), key(lease_expires=math.nan),
                    key(lease_s=math.inf)):
        g = LockRecord.decode(garbage)
        assert (g.txn, g.state, g.lease_expires, g.invalid) == ("?", VALIDATING, 0.0, False)


# ------------------------------------------------------------------------------------------ takeover
def test_an_expired_invalid_plan_is_rolled_back_not_forward(local_store: ObjectStore) -> None:
    store = local_store
    create_table(store, "a", "id BIGINT")
    base = GlobalLog(store).publish(EMPTY, {"a": 0}, "setup")
    data = commit_bytes(store, "a", "foreign", [1])
    plan = [{"table": "a", "version": 1, "mode": "create", "commit": data.decode()},
            {"table": "../evil", "version": 0, "mode": "create", "commit": "{}"}]
    store.put(LOCK_KEY, key(plan, gvl_base=base.version), mode=CREATE)
    for i in range(2):  # every validator gets the lock; nothing of the plan is ever written or published
        with ValidationLock(store, lease_s=5, skew_s=0).acquire(f"next-{i}", timeout_s=5) as held:
            assert [(t.previous_txn, t.previous_state, t.action, t.result) for t in held.takeovers] == (
                [("foreign", COMMITTING, "invalid-plan-rolled-back", None)] if i == 0 else [])
            assert held.record.txn == f"next-{i}" and held.record.state == VALIDATING
        assert ValidationLock(store).read() is None
    assert not store.exists(commit_key("a", 1))  # the valid entry of the invalid plan is not executed either
    assert GlobalLog(store).head() == base


def test_a_live_invalid_plan_keeps_its_lease(local_store: ObjectStore) -> None:
    """Malformed is not expired: the holder's lease is respected (it may still be running)."""
    store = local_store
    store.put(LOCK_KEY, key([entry(table="../evil")], lease_s=30.0, lease_expires=time.time() + 30), mode=CREATE)
    with pytest.raises(ValidationTimeout, match="held by transaction foreign"):
        ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=0.3)
    rec, _ = ValidationLock(store).read() or (None, None)
    assert rec is not None and rec.invalid and rec.txn == "foreign"


def test_a_half_executed_valid_plan_is_still_rolled_forward(local_store: ObjectStore) -> None:
    """The check refuses only malformed plans: a legitimate one crashed half way completes as before."""
    store = local_store
    for t in ("a", "b"):
        create_table(store, t, "id BIGINT")
    base = GlobalLog(store).publish(EMPTY, {"a": 0, "b": 0}, "setup")
    mv, metag, _ = place_marker(store, "a", 1, MarkerInfo("crashed"))
    plan = (PlannedCommit("a", mv, commit_bytes(store, "a", "crashed", [1]), OVERWRITE_MARKER, metag),
            PlannedCommit("b", 1, commit_bytes(store, "b", "crashed", [2]), CREATE_MODE, None, True))
    rec = LockRecord("crashed", COMMITTING, 1.0, 1.0, "dead:1", 0.0, base.version, plan, "crashed", {"c": 3})
    store.put(LOCK_KEY, rec.encode(), mode=CREATE)
    store.put(commit_key("b", 1), plan[1].data, mode=CREATE)  # crashed after writing b
    assert LockRecord.decode(rec.encode()) == rec
    with ValidationLock(store, lease_s=5, skew_s=0).acquire("next", timeout_s=5) as held:
        (tk,) = held.takeovers
        assert tk.action == "rolled-forward" and tk.result is not None and tk.result.versions == {"a": 1, "b": 1}
    head = GlobalLog(store).head()
    assert (head.version, dict(head.tables), head.txn) == (base.version + 1, {"a": 1, "b": 1, "c": 3}, "crashed")


@pytest.mark.parametrize("case", ["base-missing", "next-taken"])
def test_a_well_formed_plan_that_cannot_complete_is_rolled_back(local_store: ObjectStore, case: str) -> None:
    """A foreign key whose base global version does not exist, or whose next global version another
    transaction published, would fail every validator that takes it over: it is rolled back once."""
    store = local_store
    create_table(store, "a", "id BIGINT")
    glog = GlobalLog(store)
    base = glog.publish(EMPTY, {"a": 0}, "setup")
    if case == "next-taken":
        glog.publish(base, {"a": 0}, "someone-else")
    gvl_base = 50 if case == "base-missing" else base.version
    plan = [{"table": "a", "version": 1, "mode": "create", "commit": commit_bytes(store, "a", "foreign", [1]).decode()}]
    store.put(LOCK_KEY, key(plan, gvl_base=gvl_base), mode=CREATE)
    for i in range(2):
        with ValidationLock(store, lease_s=5, skew_s=0).acquire(f"next-{i}", timeout_s=5) as held:
            assert [t.action for t in held.takeovers] == (["impossible-plan-rolled-back"] if i == 0 else [])
        assert ValidationLock(store).read() is None


# ------------------------------------------------------------------------------------------ recover
@pytest.mark.parametrize("valid", [True, False], ids=["valid-plan", "invalid-plan"])
def test_recover_rolls_forward_only_a_valid_plan(local_store: ObjectStore, valid: bool) -> None:
    store = local_store
    create_table(store, "a", "id BIGINT")
    mv, metag, _ = place_marker(store, "a", 1, MarkerInfo("foreign"))  # lease 0: expired
    data = commit_bytes(store, "a", "foreign", [1])
    plan = [{"table": "a", "version": mv, "mode": OVERWRITE_MARKER, "etag": metag, "commit": data.decode()}]
    if not valid:
        plan.append({"table": "a", "version": -3, "mode": "create", "commit": "{}"})
    store.put(LOCK_KEY, key(plan), mode=CREATE)
    rep = recover(store)
    st = read_version(store, "a", mv)
    if valid:
        # the expired validation key is taken over first, and its plan rolled forward by the takeover
        assert rep.validation_lock == "rolled-forward" and st.kind == "commit", rep.summary()
    else:
        assert rep.freed == [("a", mv, "foreign")] and rep.rolled_forward == [] and st.kind == "freed"
