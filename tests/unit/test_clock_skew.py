"""Leases do not trust other machines' clocks (issue 21): a client whose clock runs 60 s ahead waits
behind a live transaction of another client instead of freeing its marker. Real client processes on a
local warehouse; the skew is injected through ``LV_TEST_CLOCK_SKEW_S`` (lv_core.protocol.clock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import lv_core
from lv_core.protocol.lease import LeaseObserver
from lv_core.protocol.markers import MarkerInfo
from lv_core.storage.local import LocalStore
from tests.helpers.bank import committed_kv, make_kv

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 1.5


def _worker(*args: str, skew_s: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "LV_TEST_CLOCK_SKEW_S": str(skew_s)}
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.worker", *args], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(p: subprocess.Popen) -> list[str]:
    """The process's stdout lines as they arrive (read on a thread)."""
    out: list[str] = []

    def pump() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            out.append(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return out


def _await(lines: list[str], want: str, p: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while want not in lines:
        assert p.poll() is None or want in lines, f"exited without {want!r}: {lines}, {p.stderr.read()}"
        assert time.monotonic() < deadline, f"no {want!r}: {lines}"
        time.sleep(0.02)


def test_a_client_with_its_clock_ahead_waits_for_a_live_transaction(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh)
    make_kv(lh, "kv", {1: 0.0})
    holder = _worker("hold", wh, str(LEASE_S))
    held = _lines(holder)
    _await(held, "HOLDING", holder)
    ahead = _worker("add", wh, str(LEASE_S), skew_s=60.0)  # by its clock, the holder's lease ran out long ago
    seen = _lines(ahead)
    _await(seen, "WAITING", ahead)
    # The holder stays live for two lease periods (its heartbeat renewed every LEASE_S / 3) while the
    # other client waits: a judge that trusted the clocks would free the holder's marker now.
    time.sleep(2 * LEASE_S)
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0 and ahead.wait(timeout=60) == 0, (holder.stderr.read(), ahead.stderr.read())
    first, second = json.loads(held[-1]), json.loads(seen[-1])
    assert first["state"] == "committed", first  # the live transaction was not aborted by the other's clock
    assert second["state"] == "committed" and second["redo"] == 1, second  # it waited, then redid on top
    assert committed_kv(lh, "kv") == {1: 11.0}


def test_the_observer_frees_an_owner_that_stopped_changing(tmp_path: Path) -> None:
    """Expiry by observation: unchanged for the owner's lease period on the observer's own clock; a
    heartbeat renewal (new etag) starts the period again; a record long expired counts at once."""
    store = LocalStore(str(tmp_path))
    obs = LeaseObserver(skew_s=600.0)
    now = time.time()
    m = MarkerInfo("t1", created=now + 3600.0, lease_expires=now + 3600.2)  # a clock an hour ahead
    assert not obs.expired(store, "t1", m, "etag-1", "kv@1")
    t0 = time.monotonic()
    while not obs.expired(store, "t1", m, "etag-1", "kv@1"):
        assert time.monotonic() - t0 < 5.0
        time.sleep(0.01)
    assert time.monotonic() - t0 >= 0.2  # the lease period, measured here
    assert not obs.expired(store, "t1", m, "etag-2", "kv@1")  # the owner rewrote its marker: alive
    old = MarkerInfo("t2", created=now - 7200.0, lease_expires=now - 7100.0)
    assert obs.expired(store, "t2", old, "e", "kv@2")  # expired two hours ago even with 10 minutes of skew
