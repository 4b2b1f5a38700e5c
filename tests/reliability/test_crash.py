"""SIGKILL a client at each protocol step (LV_TEST_PAUSE_AT, lv_core/testing.py), under each preset.

tests/unit/test_lv_r_processes.py kills repeatable_read transfers at marker-placed, data-staged,
decision-written and between-markers; tests/unit/test_lv_i_concurrency.py kills serializable ones at
validation-key-held, between-table-writes and gvl-published and checks the global versions. This
file covers the remaining (preset, step) pairs and checks everything after every kill:

- another client commits on the same tables within the lease plus a bound;
- the killed transfer is all or nothing (decided steps: all), in the latest tables and, under LV[I],
  at every global version published since (no partial multi-table commit is ever visible);
- every version of every table loads with delta-rs;
- `lv recover` leaves no debris: nothing under _lakevilla/txns, no validation key, no data file that
  no version references, no pending marker.

The slow tier repeats every case while two random-workload processes run on other tables (the
recovery runs while they are live) and checks their histories too.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

import lv_core
from lv_core.cli import main as lv_main
from lv_core.protocol import layout
from lv_core.protocol.markers import read_version
from lv_core.protocol.recovery import alive_until
from lv_core.protocol.scan import transaction_ids
from tests.helpers import history as H
from tests.helpers import oracle as O
from tests.helpers.bank import add_kv
from tests.reliability.anomalies import setup_tables
from tests.reliability.procs import spawn, wait_all, wait_paused

LEASE = 1.5
BOUND = 10.0

#: (config, preset, features, point, moved): moved = what the killed transfer must have done (1: all)
CASES = [
    ("repeatable_read", "repeatable_read", "", "waiting", 0),
    ("repeatable_read", "repeatable_read", "", "committed", 1),
    ("serializable", "serializable", "", "marker-placed", 0),
    ("serializable", "serializable", "", "data-staged", 0),
    ("serializable", "serializable", "", "waiting", 0),
    ("serializable", "serializable", "", "validation-key-held", 0),
    ("serializable", "serializable", "", "between-table-writes", 1),
    ("serializable", "serializable", "", "gvl-published", 1),
    ("serializable", "serializable", "", "committed", 1),
    # warm: the victim released the validation key last and takes it with its plan in one request
    ("serializable-warm", "serializable", "", "plan-recorded", 1),
    ("serializable-warm", "serializable", "", "between-table-writes", 1),
    ("serializable-warm", "serializable", "", "gvl-published", 1),
    ("snapshot", "snapshot", "", "between-table-writes", 1),
    ("write_serializable", "write_serializable", "", "data-staged", 0),
    ("R", "repeatable_read", "R", "marker-placed", 0),
    ("R", "repeatable_read", "R", "data-staged", 0),
    ("R", "repeatable_read", "R", "committed", 1),
]


def _ids():
    return [f"{c.values[0]}-{c.values[3]}" if hasattr(c, "values") else f"{c[0]}-{c[3]}" for c in CASES]


def _files_ever_referenced(lh, table: str) -> set[str]:
    from lv_core.delta.actions import AddFile, decode_commit

    out: set[str] = set()
    for v in range(lh.version(table) + 1):
        st = read_version(lh.store, table, v)
        if st.kind == "commit":
            out |= {a.path for a in decode_commit(st.raw) if isinstance(a, AddFile)}
    return out


def _wait_leases_expired(lh, timeout_s: float = 20.0) -> None:
    """Until no transaction may still be alive: its heartbeat object, or (a transaction writes one only
    once it needs a renewal) what its sublog promised, ran out."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = [txn for txn in transaction_ids(lh.store) if alive_until(lh.store, txn, lease_s=LEASE) >= time.time()]
        if not live:
            return
        assert time.monotonic() < deadline, f"transactions still live: {live}"
        time.sleep(0.05)


def crash_and_check(tmp_path, config, preset, features, point, moved, *, background: int = 0, capsys=None):
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh, lease_s=5.0)
    setup_tables(lh, {"kv": [(1, 100.0)], "kv2": [(1, 100.0)]})
    bg_tables = ["t0", "t1", "t2"]
    bg, outs = [], []
    if background:
        setup_tables(lh, {t: [(k, 100.0) for k in range(4)] for t in bg_tables})
        outs = [str(tmp_path / f"history-{i}.jsonl") for i in range(background)]
        bg = [spawn("tests.reliability.randworker", wh, f"crash-{point}", str(i), "12", outs[i], "3",
                    "repeatable_read,serializable,snapshot,write_serializable,delta") for i in range(background)]
    base_gvl = lh.global_state().version

    blocker = None
    if point == "waiting":  # someone holds the first marker of kv: the victim waits for it at commit
        blocker = lh.begin("repeatable_read", timeout_s=30)
        add_kv(blocker, "kv", 1, 0)
    victim = spawn("tests.reliability.crashworker", wh, str(LEASE), preset, features,
                   *(["warm"] if config.endswith("-warm") else []), env={"LV_TEST_PAUSE_AT": point})
    wait_paused(victim, point)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    if blocker is not None:
        blocker.commit()

    # another client goes on, on both tables, within the lease plus a bound
    t0 = time.monotonic()
    other = lv_core.connect(wh, lease_s=5.0)
    txn = other.begin("serializable" if preset != "repeatable_read" else "repeatable_read", timeout_s=30)
    add_kv(txn, "kv", 1, 10)
    add_kv(txn, "kv2", 1, 10)
    txn.commit()
    took = time.monotonic() - t0
    assert took < LEASE + BOUND, f"the next client needed {took:.1f}s"

    # all or nothing, now and at every global version since
    kv, kv2 = O.table_rows(lh.store.url("kv")), O.table_rows(lh.store.url("kv2"))
    assert kv == [(1, 110.0 - moved)] and kv2 == [(1, 110.0 + moved)], (point, kv, kv2)
    head = lh.global_state()
    for g in range(max(base_gvl, 0), head.version + 1):
        state = lh.global_state(g)
        if "kv" in state.tables and "kv2" in state.tables:
            a = O.table_rows(lh.store.url("kv"), state.tables["kv"])
            b = O.table_rows(lh.store.url("kv2"), state.tables["kv2"])
            assert len(a) == len(b) == 1 and a[0][1] + b[0][1] in (200.0, 220.0), (g, a, b)
            assert a[0][1] in (100.0, 99.0, 110.0, 110.0 - moved), (g, a, b)
    if preset != "repeatable_read":  # an LV[I] reader sees one consistent state
        r = other.begin("serializable")
        x = O.run_op(r, O.read("kv", 1))
        y = O.run_op(r, O.read("kv2", 1))
        r.commit()
        assert x + y == 220.0

    # background clients finish (they ran through the crash and the recovery below)
    _wait_leases_expired(lh) if not bg else None
    if bg:
        time.sleep(0.5)
    # `lv recover` while (maybe) others are live, then again once everything finished (``--lease``: the
    # longest lease of a client that may be live, the background workers' 10 s)
    assert lv_main(["recover", wh, "--grace", "0", "--lease", "10" if bg else str(LEASE)]) == 0
    results = wait_all(bg, 120)
    assert all(rc == 0 for rc, _, _ in results), [e[-2000:] for _, _, e in results]
    _wait_leases_expired(lh)
    assert lv_main(["recover", wh, "--grace", "0", "--lease", str(LEASE)]) == 0

    tables = ["kv", "kv2", *(bg_tables if background else [])]
    left = sorted(m.key for m in lh.store.list(layout.TXNS))
    assert not left, left
    assert lh.validation_lock.read() is None  # free (a free record, or no key)
    orphans = []
    for t in tables:
        referenced = _files_ever_referenced(lh, t)
        on_disk = {m.key.split("/", 1)[1] for m in lh.store.list(f"{t}/") if "/_delta_log/" not in m.key}
        orphans += [f"{t}/{p}" for p in sorted(on_disk - referenced)]
        for v in range(lh.version(t) + 1):
            assert not read_version(lh.store, t, v).pending, f"{t}@{v} still pending"
            O.table_rows(lh.store.url(t), v)  # loads with delta-rs
    if background:
        logs = H.load(outs)
        initial = {t: {k: 100.0 for k in range(4)} for t in bg_tables}
        problems = H.check(logs, tables=bg_tables, initial=initial, lh=lh, gvl=lh.global_log.at)
        assert not problems, problems[:20]
        assert sum(t.committed for t in logs) > 0
        if capsys is not None:
            with capsys.disabled():
                print(f"\n{config}/{point}: next client after {took:.1f}s; background: {len(logs)} transactions")
    assert not orphans, f"data files no version references survived `lv recover`: {orphans}"


@pytest.mark.parametrize("config,preset,features,point,moved", CASES, ids=_ids())
def test_sigkill(tmp_path, config, preset, features, point, moved):
    crash_and_check(tmp_path, config, preset, features, point, moved)


@pytest.mark.slow
@pytest.mark.parametrize("config,preset,features,point,moved", CASES, ids=_ids())
def test_sigkill_under_load(tmp_path, config, preset, features, point, moved, capsys):
    crash_and_check(tmp_path, config, preset, features, point, moved, background=2, capsys=capsys)
