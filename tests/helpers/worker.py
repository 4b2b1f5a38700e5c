"""Client processes for multi-process protocol tests: ``python -m tests.helpers.worker CMD ...``.

counter WAREHOUSE N        N transactions each adding 1 to kv row 1 (retrying aborted ones);
                           prints JSON {"commits", "aborts", "redos"}
transfer WAREHOUSE LEASE   one transfer kv[1] -= 1, kv2[1] += 1 in one transaction (used with
                           LV_TEST_PAUSE_AT to be SIGKILLed at a protocol step; LV_TEST_EMBED_MAX=0
                           makes it record a decision instead of parts carrying each other)
hold WAREHOUSE LEASE       adds 1 to kv row 1, prints HOLDING, commits once a line arrives on stdin;
                           prints JSON {"state", "versions", "redo"} (or {"state", "rule"})
add WAREHOUSE LEASE        adds 10 to kv row 1 in one transaction, printing WAITING when it waits for
                           another; prints JSON like ``hold`` (LV_TEST_CLOCK_SKEW_S skews its clock)
"""

from __future__ import annotations

import json
import os
import sys

import lv_core
from lv_core.errors import TransactionAborted
from tests.helpers.bank import add_kv

#: LV_TEST_EMBED_MAX=0: multi-table commits record their decision first (Tuning.embed_max)
TUNING = lv_core.Tuning(embed_max=int(os.environ["LV_TEST_EMBED_MAX"])) if "LV_TEST_EMBED_MAX" in os.environ else None


def say(line: str) -> None:
    """One line on stdout in one write, flushed: a crash point's ``LV-PAUSED`` line, written by a background
    thread (a holder serving the queue after ``commit()`` returned), never lands inside it."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def counter(warehouse: str, n: int) -> None:
    lh = lv_core.connect(warehouse, lease_s=10.0, tuning=TUNING)
    commits = aborts = redos = 0
    while commits < n:
        txn = lh.begin("repeatable_read", timeout_s=120)
        try:
            add_kv(txn, "kv", 1, 1)
            res = txn.commit()
        except TransactionAborted:
            aborts += 1
            continue
        commits += 1
        redos += res.redo_count
    say(json.dumps({"commits": commits, "aborts": aborts, "redos": redos}))


def transfer(warehouse: str, lease_s: float, preset: str = "repeatable_read") -> None:
    lh = lv_core.connect(warehouse, lease_s=lease_s, tuning=TUNING)
    txn = lh.begin(preset, timeout_s=60)
    add_kv(txn, "kv", 1, -1)
    add_kv(txn, "kv2", 1, +1)
    res = txn.commit()
    say(json.dumps({"versions": res.versions}))
    lh.close()  # waits for the background work (a holder serving the queue)


def _outcome(txn: lv_core.Transaction) -> None:
    try:
        res = txn.commit()
        say(json.dumps({"state": txn.state, "versions": res.versions, "redo": res.redo_count}))
    except TransactionAborted as e:
        say(json.dumps({"state": txn.state, "rule": e.rule, "reason": str(e)}))


def hold(warehouse: str, lease_s: float) -> None:
    lh = lv_core.connect(warehouse, lease_s=lease_s, tuning=TUNING)
    txn = lh.begin("repeatable_read", timeout_s=60)
    add_kv(txn, "kv", 1, 1)
    say("HOLDING")
    sys.stdin.readline()
    _outcome(txn)


def add(warehouse: str, lease_s: float) -> None:
    from lv_core import events as ev

    lh = lv_core.connect(warehouse, lease_s=lease_s, tuning=TUNING)
    txn = lh.begin("repeatable_read", timeout_s=60)
    txn.events.subscribe(lambda e: say("WAITING") if isinstance(e, ev.Waiting) else None)
    add_kv(txn, "kv", 1, 10)
    _outcome(txn)


def transfers(warehouse: str, n: int, seed: int) -> None:
    """N random transfers across tables t0..t3 (accounts 0..3 each); prints outcomes."""
    import random
    import time

    rng = random.Random(seed)
    lh = lv_core.connect(warehouse, lease_s=10.0, cycle_check_s=0.1, shift_after_s=2.0, tuning=TUNING)
    outcomes: dict[str, int] = {}
    longest = 0.0
    for _ in range(n):
        a = (f"t{rng.randrange(4)}", rng.randrange(4))
        b = (f"t{rng.randrange(4)}", rng.randrange(4))
        while b == a:
            b = (f"t{rng.randrange(4)}", rng.randrange(4))
        amount = float(rng.randrange(1, 50))
        t0 = time.monotonic()
        txn = lh.begin("repeatable_read", timeout_s=30)
        try:
            add_kv(txn, a[0], a[1], -amount)
            add_kv(txn, b[0], b[1], +amount)
            txn.commit()
            key = "committed"
        except TransactionAborted as e:
            key = e.rule
        outcomes[key] = outcomes.get(key, 0) + 1
        longest = max(longest, time.monotonic() - t0)
    say(json.dumps({"outcomes": outcomes, "longest_s": longest}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "counter":
        counter(sys.argv[2], int(sys.argv[3]))
    elif cmd == "transfers":
        transfers(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "hold":
        hold(sys.argv[2], float(sys.argv[3]))
    elif cmd == "add":
        add(sys.argv[2], float(sys.argv[3]))
    elif cmd == "transfer":
        transfer(sys.argv[2], float(sys.argv[3]), *sys.argv[4:5])
    else:
        raise SystemExit(f"unknown command {cmd}")
