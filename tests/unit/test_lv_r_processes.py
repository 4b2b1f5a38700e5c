"""LV[R] across real client processes: contention on one row, and SIGKILL at protocol steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import pytest

import lv_core
from lv_core.cli import main as lv_main
from lv_core.protocol import layout
from lv_core.protocol.markers import read_version
from lv_core.protocol.recovery import alive_until
from lv_core.protocol.scan import transaction_ids
from tests.helpers.bank import add_kv, committed_kv, make_kv
from tests.unit.test_in_commit_timestamps import assert_increasing

# issue 18: the SIGKILL crash points run under the log-immutability checker (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("log_immutability")

ROOT = Path(__file__).resolve().parents[2]


def _worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.worker", *args], cwd=ROOT, env=e,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_eight_processes_increment_one_counter(tmp_path, capsys):
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh)
    make_kv(lh, "kv", {1: 0.0})
    procs = [_worker("counter", wh, "25") for _ in range(8)]
    stats = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        stats.append(json.loads(out.strip().splitlines()[-1]))
    assert committed_kv(lh, "kv") == {1: 200.0}
    aborts = sum(s["aborts"] for s in stats)
    redos = sum(s["redos"] for s in stats)
    with capsys.disabled():
        print(f"\n8x25 increments: 200 commits, {redos} redos, {aborts} aborts (retry bound)")
    assert sum(s["commits"] for s in stats) == 200
    assert not list(lh.store.list(layout.TXNS))  # every transaction cleaned up after itself


POINTS = ["marker-placed", "data-staged", "decision-written", "between-markers"]
#: (point, in-commit timestamps, parts carry each other): "decision-written" exists only when the
#: decision is recorded first (parts too big to carry each other, forced with LV_TEST_EMBED_MAX=0)
CASES = [("marker-placed", False, True), ("data-staged", False, True), ("decision-written", False, False),
         ("between-markers", False, False), ("between-markers", False, True), ("marker-placed", True, True),
         ("decision-written", True, False), ("between-markers", True, True)]


@pytest.mark.parametrize("point, ict, embed", CASES)
def test_sigkill_at_protocol_step(tmp_path, point, ict, embed):
    """``ict``: tables with in-commit timestamps; the recoverer's roll forward and the empty commits of
    freed markers are stamped too. ``embed``: the transfer's parts carry each other (no decision
    record); killed between them, the next client rolls the missing part forward from the one in
    the log."""
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh, lease_s=5.0)
    props = {"delta.enableInCommitTimestamps": "true"} if ict else None
    make_kv(lh, "kv", {1: 100.0}, props)
    make_kv(lh, "kv2", {1: 100.0}, props)
    lease = 1.5
    env = {"LV_TEST_PAUSE_AT": point, **({} if embed else {"LV_TEST_EMBED_MAX": "0"})}
    p = _worker("transfer", wh, str(lease), env=env)
    line = p.stdout.readline()
    assert line.strip() == f"LV-PAUSED {point}", p.stderr.read()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    decided = point in ("decision-written", "between-markers")

    # Another client proceeds on both tables within lease + bound.
    t0 = time.monotonic()
    txn = lh.begin("repeatable_read", timeout_s=30)
    add_kv(txn, "kv", 1, 10)
    add_kv(txn, "kv2", 1, 10)
    txn.commit()
    assert time.monotonic() - t0 < lease + 10

    # Nothing committed is lost; the dead transaction is all or nothing.
    moved = 1.0 if decided else 0.0
    assert committed_kv(lh, "kv") == {1: 110.0 - moved}
    assert committed_kv(lh, "kv2") == {1: 110.0 + moved}
    for t in ("kv", "kv2"):  # every version loads with a plain Delta reader
        dt = deltalake.DeltaTable(lh.store.url(t))
        for v in range(dt.version() + 1):
            deltalake.DeltaTable(lh.store.url(t), version=v).to_pyarrow_table()

    # `lv recover` frees what is left and removes the dead transaction's debris (once its lease, or what
    # its sublog promised, ran out).
    deadline = time.monotonic() + 10
    while any(alive_until(lh.store, txn, lease_s=lease) >= time.time() for txn in transaction_ids(lh.store)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert lv_main(["recover", wh, "--grace", "0", "--lease", str(lease)]) == 0
    assert not list(lh.store.list(layout.TXNS))
    live = {m.key.split("/", 1)[1] for t in ("kv", "kv2") for m in lh.store.list(f"{t}/part-")}
    referenced = {f"{a}" for t in ("kv", "kv2") for a in lh.snapshot(t).files}
    tomb = {f"{a}" for t in ("kv", "kv2") for a in lh.snapshot(t).tombstones}
    assert live <= referenced | tomb  # no orphaned staged files
    for t in ("kv", "kv2"):
        for v in range(lh.version(t) + 1):
            assert not read_version(lh.store, t, v).pending
        if ict:
            assert_increasing(tmp_path / "wh" / t)


def test_recover_keeps_a_live_transaction(tmp_path):
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh, lease_s=30.0)
    make_kv(lh, "kv", {1: 1.0})
    txn = lh.begin("repeatable_read")
    before = {m.key for m in lh.store.list("kv/part-")}
    add_kv(txn, "kv", 1, 1)
    staged = {m.key for m in lh.store.list("kv/part-")} - before
    assert len(staged) == 1  # (named by no sublog entry: the marker covers it)
    rep = lh.recover(lease_grace_s=0)
    assert [m[2] for m in rep.live_markers] == [txn.id] and not rep.deleted_files
    assert staged <= {m.key for m in lh.store.list("kv/part-")}
    txn.commit()
    assert committed_kv(lh, "kv") == {1: 2.0}


def test_eight_processes_random_transfers_over_four_tables(tmp_path, capsys):
    """LV[CT]: every transaction terminates within its timeout, the total is conserved, no marker is left."""
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh)
    for i in range(4):
        make_kv(lh, f"t{i}", {k: 100.0 for k in range(4)})
    procs = [_worker("transfers", wh, "20", str(seed)) for seed in range(8)]
    stats = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        stats.append(json.loads(out.strip().splitlines()[-1]))
    outcomes: dict[str, int] = {}
    for s in stats:
        for k, v in s["outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
    with capsys.disabled():
        print(f"\n8x20 random transfers: {outcomes}, longest {max(s['longest_s'] for s in stats):.1f}s")
    assert sum(outcomes.values()) == 160
    assert max(s["longest_s"] for s in stats) < 30 + 10  # timeout + bound
    assert sum(sum(committed_kv(lh, f"t{i}").values()) for i in range(4)) == 1600.0
    for i in range(4):
        for v in range(lh.version(f"t{i}") + 1):
            assert not read_version(lh.store, f"t{i}", v).pending
    assert not list(lh.store.list(layout.TXNS))
