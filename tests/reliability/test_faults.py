"""Storage faults during a concurrent workload: a transaction commits fully or not at all.

The store wrapper (lv_core/storage/instrumented.py) fails a fraction of all requests, some of them
after the request landed (a lost response), and delays some responses. Client threads, each with its
own Lakehouse, run transfers between balance rows of three tables (random LakeVilla presets) and
serializable read-only audits. A transaction's outcome is one of:

- committed: its transfer is in the tables;
- aborted (TransactionAborted, or StorageError/LvError while it was still undecided; state "aborted"):
  nothing of it may ever become visible;
- unknown (the commit was decided and then a request failed: state "unknown", or CommitPending):
  it becomes visible completely or not at all (roll forward by whoever finds it).

Afterwards the faults stop, leases expire, `lv recover` runs, and the tables must be explained:
every balance = initial + committed transfers + a subset of the unknown ones, each transfer whole
(the total is conserved), no audit ever saw a broken total, no pending marker or debris is left,
every version loads with delta-rs.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field

import pytest

import lv_core
from lv_core.errors import LvError, StorageError, TransactionAborted
from lv_core.protocol import layout
from lv_core.protocol.lease import keeper
from lv_core.protocol.markers import read_version
from lv_core.protocol.vlock import CommitPending
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.txn.cleaner import drain
from tests.helpers import oracle as O
from tests.reliability.anomalies import setup_tables

TABLES = ["f0", "f1", "f2"]
ACCOUNTS = 3
#: repeatable_read (R+CT without I) is left out until the bugs shown by
#: test_lost_response_to_a_single_table_commit_keeps_its_data and
#: test_lost_response_to_the_decision_never_half_commits are fixed: there a lost response deletes
#: committed data files.
PRESETS = [("serializable", None), ("snapshot", None), ("write_serializable", None)]


class FlakyStore(InstrumentedStore):
    """InstrumentedStore that also answers some requests slowly (seeded)."""

    def __init__(self, inner, *, slow_rate: float, slow_s: float, seed: int, **kw) -> None:
        super().__init__(inner, seed=seed, **kw)
        self._slow_rng = random.Random(seed + 1)
        self._slow_lock = threading.Lock()
        self.slow_rate, self.slow_s = slow_rate, slow_s

    def _request(self, kind, key, call):  # the base class's signature
        with self._slow_lock:
            slow = self.slow_rate and self._slow_rng.random() < self.slow_rate
        if slow:
            time.sleep(self.slow_s)
        return super()._request(kind, key, call)


@dataclass
class Outcomes:
    transfers: list[tuple[tuple[str, int], tuple[str, int], float, str, str]] = field(default_factory=list)
    audits: list[float] = field(default_factory=list)
    audit_outcomes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for *_, cat, _detail in self.transfers:
            out[cat] = out.get(cat, 0) + 1
        return out


def _client(store, seed: int, stop: threading.Event, out: Outcomes, presets) -> None:
    rng = random.Random(seed)
    lh = lv_core.Lakehouse(store, lease_s=2.0, cycle_check_s=0.1, shift_after_s=1.0)
    while not stop.is_set():
        if rng.random() < 0.25:
            _audit(lh, out)
            continue
        a = (rng.choice(TABLES), rng.randrange(ACCOUNTS))
        b = a
        while b == a:
            b = (rng.choice(TABLES), rng.randrange(ACCOUNTS))
        amount = float(rng.randrange(1, 20))
        preset, features = rng.choice(presets)
        cat, detail = "aborted", ""
        txn = None
        try:
            txn = lh.begin(preset, features=features, timeout_s=20)
            O.run_op(txn, O.add(a[0], a[1], -amount))
            O.run_op(txn, O.add(b[0], b[1], amount))
            txn.commit()
            cat = "committed"
        except CommitPending as e:
            cat, detail = "unknown", f"CommitPending: {e}"
            keeper().unregister(txn.id)  # the client gives up: see test_decided_commit_..._blocks_nobody
        except TransactionAborted as e:
            cat, detail = "aborted", e.rule
        except LvError as e:
            detail = f"{type(e).__name__}: {e}"
            cat = "unknown" if txn is not None and txn.state == "unknown" else "aborted"
            if cat == "unknown":  # as if its process ended: see test_decided_commit_..._blocks_nobody
                keeper().unregister(txn.id)
            if txn is not None and txn.state not in ("aborted", "unknown", "committed"):
                try:
                    txn.rollback()
                except LvError:
                    pass  # left to its lease and to `lv recover`
        except Exception as e:  # not an LvError: a bug
            with out.lock:
                out.errors.append(f"{type(e).__name__}: {e}")
            cat, detail = "unknown", f"{type(e).__name__}"
        with out.lock:
            out.transfers.append((a, b, amount, cat, detail))


def _audit(lh, out: Outcomes) -> None:
    try:
        txn = lh.begin("serializable", timeout_s=20)
        total = sum(v for t in TABLES for _, v in O.run_op(txn, O.scan(t)))
        txn.commit()
    except (TransactionAborted, StorageError, LvError) as e:
        key = getattr(e, "rule", type(e).__name__)
        with out.lock:
            out.audit_outcomes[key] = out.audit_outcomes.get(key, 0) + 1
        return
    with out.lock:
        out.audits.append(total)
        out.audit_outcomes["committed"] = out.audit_outcomes.get("committed", 0) + 1


def _explain_balances(initial: dict, final: dict, out: Outcomes) -> str | None:
    """None if final = initial + committed + some subset of the unknown transfers; else why not."""
    base = dict(initial)
    for a, b, amount, cat, _ in out.transfers:
        if cat == "committed":
            base[a] -= amount
            base[b] += amount
    unknown = [(a, b, amount) for a, b, amount, cat, _ in out.transfers if cat == "unknown"]
    if len(unknown) > 16:
        return None if sum(final.values()) == sum(initial.values()) else "total not conserved"
    for n in range(len(unknown) + 1):
        for subset in itertools.combinations(unknown, n):
            got = dict(base)
            for a, b, amount in subset:
                got[a] -= amount
                got[b] += amount
            if all(round(got[k] - final.get(k, float("nan")), 6) == 0 for k in got):
                return None
    diff = {k: (base[k], final.get(k)) for k in base if round(base[k] - final.get(k, 0), 6) != 0}
    return f"no subset of the {len(unknown)} unknown transfers explains the balances: {diff}"


#: Request kinds the workload's faults hit (every kind the store has).
FAULT_KINDS = ["GET", "HEAD", "LIST", "PUT", "PUT-create", "PUT-if-match", "DELETE"]


def run_faults(tmp_path, *, seed: int, threads: int, seconds: float, fault_rate: float, capsys=None,
               kinds: list[str] = FAULT_KINDS, presets=None) -> None:
    wh = str(tmp_path / "wh")
    plain = lv_core.connect(wh, lease_s=2.0)
    setup_tables(plain, {t: [(k, 100.0) for k in range(ACCOUNTS)] for t in TABLES})
    store = FlakyStore(plain.store, seed=seed, slow_rate=0.01, slow_s=0.15, fault_rate=fault_rate,
                       fault_after_rate=0.4, fault_kinds=kinds)
    out = Outcomes()
    stop = threading.Event()
    ts = [threading.Thread(target=_client, args=(store, seed * 100 + i, stop, out, presets or PRESETS), daemon=True)
          for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts), "a client hung"
    store.clear_faults()
    injected = len(store.injected)

    # Faults are over: leases expire, recovery runs, one more transaction resolves what waits.
    time.sleep(2.5)
    lh = lv_core.connect(wh, lease_s=2.0)
    for _ in range(3):
        lh.recover()
    fin = lh.begin("repeatable_read", timeout_s=30)
    for t in TABLES:
        O.run_op(fin, O.add_where(t, O.ALL, 0))
    fin.commit()
    time.sleep(2.5)
    rep = lh.recover()

    initial = {(t, k): 100.0 for t in TABLES for k in range(ACCOUNTS)}
    final = {(t, k): v for t in TABLES for k, v in O.table_rows(lh.store.url(t))}
    counts = out.count()
    why_aborted: dict[str, int] = {}
    for *_, cat, detail in out.transfers:
        if cat != "committed":
            k = f"{cat}:{detail.split(':')[0]}"
            why_aborted[k] = why_aborted.get(k, 0) + 1
    msg = (f"seed {seed}: {injected} faults injected; transfers {counts} ({why_aborted}); audits "
           f"{out.audit_outcomes}; recover: {rep.summary()}")
    if capsys is not None:
        with capsys.disabled():
            print("\n" + msg)
    assert not out.errors, f"{msg}\nnon-LvError exceptions reached the caller: {out.errors[:5]}"
    assert injected > 0 and counts.get("committed", 0) > 0, msg
    assert len(final) == len(initial), f"{msg}\nrows lost or duplicated: {sorted(final)}"
    assert sum(final.values()) == sum(initial.values()), f"{msg}\na transfer is half visible: {final}"
    why = _explain_balances(initial, final, out)
    assert why is None, f"{msg}\n{why}"
    broken = [t for t in out.audits if t != sum(initial.values())]
    assert not broken, f"{msg}\nserializable audits saw broken totals: {broken}"
    for t in TABLES:
        for v in range(lh.version(t) + 1):
            assert not read_version(lh.store, t, v).pending, f"{msg}\n{t}@{v} still pending"
            O.table_rows(lh.store.url(t), v)
    drain(60.0)  # finished transactions' clean-up runs in the background
    left = sorted(m.key for m in lh.store.list(layout.TXNS))
    assert not left, f"{msg}\nleftovers: {left[:10]}"
    assert lh.validation_lock.read() is None, msg  # free (a free record, or no key)


def test_faults_short(tmp_path, capsys):
    run_faults(tmp_path, seed=1, threads=4, seconds=6, fault_rate=0.02, capsys=capsys)


@pytest.mark.slow
@pytest.mark.parametrize("seed,rate", [(2, 0.005), (3, 0.01), (4, 0.02)])
def test_faults_long(tmp_path, capsys, seed, rate):
    run_faults(tmp_path, seed=seed, threads=6, seconds=40, fault_rate=rate, capsys=capsys)


@pytest.mark.slow
def test_faults_every_kind_and_preset(tmp_path, capsys):
    run_faults(tmp_path, seed=5, threads=6, seconds=40, fault_rate=0.01, capsys=capsys,
               kinds=["*"], presets=[*PRESETS, ("repeatable_read", None)])


# ----------------------------------------------------------------------------------- deterministic faults


def _two_tables(tmp_path, lease_s: float = 1.0, tuning=None):
    from lv_core import Lakehouse

    plain = lv_core.connect(str(tmp_path / "wh"), lease_s=lease_s)
    setup_tables(plain, {"kv": [(1, 100.0)], "kv2": [(1, 100.0)]})
    store = InstrumentedStore(plain.store)
    return plain, store, Lakehouse(store, lease_s=lease_s, tuning=tuning)


def _loads(plain, table: str):
    try:
        return O.table_rows(plain.store.url(table))
    except Exception as e:  # what a reader gets
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def test_lost_response_in_lv_i_commit_is_retried(tmp_path):
    """serializable: the table commit lands but its response is lost: the plan is retried, it commits."""
    plain, store, lh = _two_tables(tmp_path)
    txn = lh.begin("serializable")
    O.run_op(txn, O.add("kv", 1, 5))
    store.fail("PUT-create", key_contains="kv/_delta_log/", after=True)
    txn.commit()
    assert _loads(plain, "kv") == [(1, 105.0)]


def test_lost_response_to_a_single_table_commit_keeps_its_data(tmp_path):
    plain, store, lh = _two_tables(tmp_path)
    txn = lh.begin("repeatable_read")
    O.run_op(txn, O.add("kv", 1, 5))
    store.fail("PUT-create", key_contains="kv/_delta_log/", after=True)
    try:
        txn.commit()
    except LvError:
        pass
    got = _loads(plain, "kv")
    assert got in ([(1, 100.0)], [(1, 105.0)]), got
    assert (got == [(1, 105.0)]) == (txn.state in ("committed", "unknown")), (got, txn.state)


def test_lost_response_to_the_decision_never_half_commits(tmp_path):
    # the decision object is what this test is about: parts never carry each other
    plain, store, lh = _two_tables(tmp_path, tuning=lv_core.Tuning(embed_max=0))
    txn = lh.begin("repeatable_read")
    O.run_op(txn, O.add("kv", 1, -5))
    O.run_op(txn, O.add("kv2", 1, 5))
    store.fail("PUT", key_contains="decision.json", after=True)
    store.fail("PUT-create", key_contains="kv2/_delta_log/", times=1)
    try:
        txn.commit()  # it may learn that the decision landed and commit after all
    except LvError:
        pass
    time.sleep(1.5)  # the owner's lease ran out
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0)
    t = other.begin("repeatable_read", timeout_s=20)
    try:
        O.run_op(t, O.add("kv2", 1, 1))
        t.commit()
    except LvError:
        pass
    kv, kv2 = _loads(plain, "kv"), _loads(plain, "kv2")
    assert isinstance(kv, list) and isinstance(kv2, list), (kv, kv2)
    assert kv[0][1] + kv2[0][1] in (200.0, 201.0), (kv, kv2)  # all or nothing of the transfer


def test_unknown_decision_then_abort_is_never_rolled_forward_half_way(tmp_path):
    """The decision lands but neither its PUT response nor a GET of it comes back: the client cannot
    know it decided, so it aborts: it frees kv, cannot free kv2 (another fault) and lets its lease run
    out. The next transaction on kv2 finds the decision, sees that kv's half was freed and frees kv2
    instead of rolling it forward: nothing of the transfer becomes visible."""
    # the decision object is what this test is about: parts never carry each other
    plain, store, lh = _two_tables(tmp_path, tuning=lv_core.Tuning(embed_max=0))
    txn = lh.begin("repeatable_read")
    O.run_op(txn, O.add("kv", 1, -5))
    O.run_op(txn, O.add("kv2", 1, 5))
    store.fail("PUT", key_contains="decision.json", after=True)
    store.fail("GET", key_contains="decision.json")
    store.fail("PUT-create", key_contains="kv2/_delta_log/", times=2)  # the free (into the log) and its one retry
    with pytest.raises(LvError):
        txn.commit()
    assert txn.state == "aborted"
    assert plain.store.head(f"_lakevilla/txns/{txn.id}/decision.json") is not None  # it did land
    time.sleep(1.2)  # the owner's lease ran out
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0)
    t = other.begin("repeatable_read", timeout_s=10)
    O.run_op(t, O.add("kv2", 1, 1))
    t.commit()
    assert _loads(plain, "kv") == [(1, 100.0)] and _loads(plain, "kv2") == [(1, 101.0)]


def test_global_versions_hold_a_multi_table_commit_outside_the_log_whole(tmp_path):
    """A repeatable_read transfer (LV[CT], outside the global log) is half published: kv committed, kv2
    still its pending marker. A serializable writer of kv publishes a global version naming kv past
    that part: it must wait for kv2's part (rolled forward once the lease ran out) and name kv2 past
    it too, so a reader at that global version sees the transfer whole (found by the fault workload:
    serializable audits saw 908 of 900)."""
    plain, store, lh = _two_tables(tmp_path)
    both = plain.begin("serializable")  # both tables in the global log
    O.run_op(both, O.add("kv", 1, 0))
    O.run_op(both, O.add("kv2", 1, 0))
    both.commit()
    txn = lh.begin("repeatable_read")
    O.run_op(txn, O.add("kv", 1, -5))
    O.run_op(txn, O.add("kv2", 1, 5))
    store.fail("PUT-create", key_contains="kv2/_delta_log/", times=3)
    with pytest.raises(LvError):
        txn.commit()
    assert txn.state == "unknown" and _loads(plain, "kv") == [(1, 95.0)] and _loads(plain, "kv2") == [(1, 100.0)]
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0)
    w = other.begin("serializable", timeout_s=10)
    O.run_op(w, O.add("kv", 1, 1))
    g = w.commit().gvl_version
    state = other.global_state(g)
    a = O.table_rows(plain.store.url("kv"), state.tables["kv"])
    b = O.table_rows(plain.store.url("kv2"), state.tables["kv2"])
    assert a[0][1] + b[0][1] == 201.0, (g, state.tables, a, b)


@pytest.mark.parametrize("preset", ["repeatable_read", "serializable"])
def test_decided_commit_whose_publish_failed_blocks_nobody(tmp_path, preset):
    plain, store, lh = _two_tables(tmp_path)
    txn = lh.begin(preset)
    O.run_op(txn, O.add("kv", 1, -5))
    O.run_op(txn, O.add("kv2", 1, 5))
    store.fail("PUT-create", key_contains="kv2/_delta_log/", times=3)
    with pytest.raises(LvError):
        txn.commit()
    assert txn.state == "unknown"
    t0 = time.monotonic()
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=1.0)
    t = other.begin(preset, timeout_s=5)
    O.run_op(t, O.add("kv2", 1, 1))
    t.commit()  # today: TransactionAborted (timeout), after 5 s
    assert time.monotonic() - t0 < 1.0 + BOUND
    assert _loads(plain, "kv") == [(1, 95.0)] and _loads(plain, "kv2") == [(1, 106.0)]  # rolled forward


BOUND = 5.0


@pytest.mark.parametrize("preset", ["repeatable_read", "serializable"])
def test_cleanup_failure_after_a_commit_keeps_its_data(tmp_path, preset):
    plain, store, lh = _two_tables(tmp_path)
    txn = lh.begin(preset)
    O.run_op(txn, O.add("kv", 1, 5))
    store.fail("DELETE", key_contains="/sublog/")
    try:
        txn.commit()
    except LvError:
        pass
    drain(60.0)  # the failing clean-up runs in the background: it changes nothing committed
    assert _loads(plain, "kv") == [(1, 105.0)]
    assert txn.state == "committed"


def test_a_failed_release_of_the_validation_key_neither_fails_the_commit_nor_stays(tmp_path):
    """serializable: everything is published, then the release of the validation key (the PUT-if-match
    leaving the free record) fails. The commit stands (not an error), and `lv recover` frees the key once
    its lease ran out (found by the fault workload in a clean-clone run: a key left behind after the
    final recovery)."""
    plain, store, lh = _two_tables(tmp_path)
    first = lh.begin("serializable")
    O.run_op(first, O.add("kv2", 1, 1))
    first.commit()  # lh released the key last: the next commit takes it with its plan (1 PUT-if-match)
    drain(60.0)
    txn = lh.begin("serializable")
    O.run_op(txn, O.add("kv", 1, 5))
    fault = store.fail("PUT-if-match", key_contains="validation.lock", skip=1)  # the release fails
    txn.commit()
    drain(60.0)
    assert fault.fired == 1 and txn.state == "committed" and _loads(plain, "kv") == [(1, 105.0)]
    assert plain.validation_lock.read() is not None  # still held (committing) by the finished transaction
    time.sleep(2.2)  # its lease (1 s) and the recovery grace (lease_s: 1 s) ran out
    rep = plain.recover()
    assert rep.validation_lock == "rolled-forward" and plain.validation_lock.read() is None, rep.summary()
    assert _loads(plain, "kv") == [(1, 105.0)]
    assert plain.global_state().tables["kv"] == plain.version("kv")


def test_recover_keeps_files_committed_before_a_checkpoint(tmp_path):
    plain, store, lh = _two_tables(tmp_path)
    txn = lh.begin("serializable")
    O.run_op(txn, O.add("kv", 1, 5))
    store.fail("DELETE", key_contains="/sublog/")  # the clean-up after the commit fails: the sublog stays
    try:
        txn.commit()
    except LvError:
        pass
    drain(60.0)
    assert _loads(plain, "kv") == [(1, 105.0)]
    for _ in range(12):  # later commits; a checkpoint is written past the transaction's version
        t = plain.begin("serializable")
        O.run_op(t, O.add("kv", 1, 0))
        t.commit()
    time.sleep(1.2)  # its lease ran out
    from lv_core.protocol.recovery import recover

    recover(plain.store, lease_grace_s=0.0)
    for v in range(plain.version("kv") + 1):
        assert isinstance(_loads_at(plain, "kv", v), list), (v, _loads_at(plain, "kv", v))


def _loads_at(plain, table: str, version: int):
    try:
        return O.table_rows(plain.store.url(table), version)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


class _BargeIn(InstrumentedStore):
    """Runs ``before`` once, just before the first PUT-create of a key containing ``key_contains``."""

    def __init__(self, inner, key_contains: str, before) -> None:
        super().__init__(inner)
        self.key_contains, self.before, self.fired = key_contains, before, False

    def _request(self, kind, key, call):  # the base class's signature
        if kind == "PUT-create" and self.key_contains in key and not self.fired:
            self.fired = True
            # another client barges in: on a thread of its own, as another process would (this request
            # may run on a pool thread, whose tasks may not wait on the pools the other client uses)
            other = threading.Thread(target=self.before)
            other.start()
            other.join()
        return super()._request(kind, key, call)


@pytest.mark.parametrize("exposed,kv_last", [(False, False), (True, False), (False, True)])
def test_decided_commit_whose_marker_is_taken_redoes_onto_what_committed_meanwhile(tmp_path, exposed, kv_last):
    """A repeatable_read transfer is decided; just before it writes kv2's version, a delta-preset insert
    (which ignores markers) takes that version and another transaction commits an update of the same
    kv2 row at the next one. The transfer publishes kv, claims a new kv2 marker behind that update and
    must redo its kv2 write onto it (it cannot abort any more: kv is published). Before the fix the
    redo was skipped once decided: kv2 ended with two rows for key 1 (the old commit's and the other's).
    With kv written last, the redo from the kv2 step must keep the published kv write as it is (a
    re-run would stage a new file that the process's cache then named although clean-up deleted it)."""
    plain = lv_core.connect(str(tmp_path / "wh"))
    setup_tables(plain, {"kv": [(1, 100.0)], "kv2": [(1, 100.0)]})
    other = lv_core.connect(str(tmp_path / "wh"))

    def barge_in() -> None:
        d = other.begin("delta")
        O.run_op(d, O.insert("kv2", 50, 1.0))  # takes the transfer's marker version in the log
        d.commit()
        t2 = other.begin("repeatable_read")
        O.run_op(t2, O.add("kv2", 1, 7))        # its marker comes next: nothing pending below it
        t2.commit()

    store = _BargeIn(plain.store, "kv2/_delta_log/", barge_in)
    lh = lv_core.Lakehouse(store)
    txn = lh.begin("repeatable_read")
    if not kv_last:
        O.run_op(txn, O.add("kv", 1, -5))
    if exposed:
        assert O.run_op(txn, O.read("kv2", 1)) == 100.0  # returned to the caller: changes in the redo
    O.run_op(txn, O.add("kv2", 1, 5))
    if kv_last:
        O.run_op(txn, O.add("kv", 1, -5))
    res = txn.commit()
    assert store.fired
    assert O.table_rows(plain.store.url("kv")) == [(1, 95.0)]
    assert O.table_rows(plain.store.url("kv2")) == [(1, 112.0), (50, 1.0)]
    assert res.redo_count >= 1
    later = lh.begin("repeatable_read")  # reads through the process's cached snapshots
    assert O.run_op(later, O.read("kv", 1)) == 95.0 and O.run_op(later, O.read("kv2", 1)) == 112.0
    later.commit()
    drain()
