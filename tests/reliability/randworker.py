"""A client process running random transactions and recording its history.

    python -m tests.reliability.randworker WAREHOUSE SEED PROC SECONDS OUT NTABLES [CONFIGS]

Transactions (presets chosen at random among tests.reliability.anomalies.CONFIGS): transfers between
two balance rows of t0..t{NTABLES-1} (optionally reading both first), reads of a few balances, audits
(a scan of every table), inserts of new rows (ids >= 1000) and deletes of rows this process inserted.
CONFIGS is a comma-separated subset of those names (default: all). The workload is a pure function
of (SEED, PROC, CONFIGS); the interleaving is not.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import lv_core
from lv_core.errors import LvError, TransactionAborted
from tests.helpers import oracle as O
from tests.helpers.history import HistoryWriter, TxnLog, record_op
from tests.reliability.anomalies import CONFIGS

ACCOUNTS = 4

#: Presets that run inserts (blind appends): all of them.
INSERT_CONFIGS = set(CONFIGS)
KINDS = ["transfer", "read", "audit", "insert", "delete"]
WEIGHTS = [45, 15, 10, 15, 15]


def plan(rng: random.Random, config: str, tables: list[str], inserted: list[tuple[str, int]], proc: int,
         seq: int) -> tuple[str, list[O.Op]]:
    kind = rng.choices(KINDS, WEIGHTS)[0]
    if kind == "transfer" and config == "delta":
        # The delta preset ignores markers by design (docs/PROTOCOL.md, hazards): its statements commit
        # past a pending marker without seeing what the marker becomes, so an UPDATE racing a LakeVilla
        # commit of the same row duplicates the row. Delta transactions only read, insert and delete
        # their own rows here; the anomaly suite shows what the baseline does to shared rows.
        kind = "read"
    if kind == "delete" and not inserted:
        kind = "insert"
    if kind == "insert" and config not in INSERT_CONFIGS:
        kind = "audit"
    if kind == "transfer":
        a = (rng.choice(tables), rng.randrange(ACCOUNTS))
        b = a
        while b == a:
            b = (rng.choice(tables), rng.randrange(ACCOUNTS))
        amount = float(rng.randrange(1, 30))
        ops = [O.read(*a), O.read(*b)] if rng.random() < 0.4 else []
        return kind, ops + [O.add(a[0], a[1], -amount), O.add(b[0], b[1], amount)]
    if kind == "read":
        keys = {(rng.choice(tables), rng.randrange(ACCOUNTS)) for _ in range(rng.randint(1, 3))}
        return kind, [O.read(t, k) for t, k in sorted(keys)]
    if kind == "audit":
        return kind, [O.scan(t) for t in tables]
    if kind == "insert":
        return kind, [O.insert(rng.choice(tables), 1_000_000 * (proc + 1) + seq, float(rng.randrange(1, 100)))]
    t, k = rng.choice(inserted)
    return kind, [O.delete(t, O.key(k))]


def _check_cache(lh: lv_core.Lakehouse, log: TxnLog) -> None:
    """Debug aid (LV_CHECK_CACHE=1): the Lakehouse's cached resolved snapshots must equal a fresh read."""
    from lv_core.delta.log import DeltaLog

    for t, snap in list(lh.logs.resolved_tables().items()):
        fresh = DeltaLog(lh.store, t).snapshot(snap.version, method="probe", check=False)
        if set(fresh.files) != set(snap.files):
            print(f"CACHE DIVERGED after {log.name} ({log.kind}, {log.outcome}, versions {log.versions}): "
                  f"{t}@{snap.version}: cached-only {sorted(set(snap.files) - set(fresh.files))}, "
                  f"missing {sorted(set(fresh.files) - set(snap.files))}", file=sys.stderr, flush=True)
            lh.logs.forget(t)


def main(argv: list[str]) -> None:
    wh, seed, proc, seconds, out, ntables = argv[0], argv[1], int(argv[2]), float(argv[3]), argv[4], int(argv[5])
    rng = random.Random(f"{seed}-{proc}")
    lh = lv_core.connect(wh, lease_s=10.0, cycle_check_s=0.1, shift_after_s=2.0)
    writer = HistoryWriter(out)
    tables = [f"t{i}" for i in range(ntables)]
    inserted: list[tuple[str, int]] = []
    names = sorted(argv[6].split(",")) if len(argv) > 6 else sorted(CONFIGS)
    deadline = time.monotonic() + seconds
    seq = 0
    while time.monotonic() < deadline:
        seq += 1
        config = rng.choice(names)
        preset, features = CONFIGS[config]
        kind, ops = plan(rng, config, tables, inserted, proc, seq)
        log = TxnLog(proc, seq, kind, config, preset, sorted(features) if features else None)
        t0 = time.monotonic()
        txn = lh.begin(preset, features=features, timeout_s=30)
        try:
            for op in ops:
                log.ops.append(record_op(txn, op))
                if rng.random() < 0.3:
                    time.sleep(rng.random() * 0.01)
            res = txn.commit()
            log.outcome = "committed"
            log.versions, log.read_versions = dict(res.versions), dict(res.read_versions)
            log.gvl_version, log.redo_count = res.gvl_version, res.redo_count
        except TransactionAborted as e:
            log.outcome = e.rule
            txn.rollback()
        except LvError as e:
            log.outcome = f"error:{type(e).__name__}"
            log.error = str(e)
            txn.rollback()
        log.elapsed_s = time.monotonic() - t0
        done = log.committed or config == "delta"
        if kind == "insert" and (done and log.ops):
            inserted.append((ops[0].table, int(ops[0].key or 0)))
        if kind == "delete" and (done and log.ops):
            inserted.remove((ops[0].table, int(ops[0].pred.a)))  # type: ignore[union-attr]
        writer.write(log)
        if os.environ.get("LV_CHECK_CACHE"):
            _check_cache(lh, log)
        if os.environ.get("LV_TRACE_EVENTS"):  # debug aid: every event of every transaction, one JSON line each
            with open(out + ".events", "a") as f:
                for e in txn.events.history:
                    f.write(json.dumps({"name": log.name, **e.to_dict()}, default=str) + "\n")
    writer.close()
    print(f"proc {proc}: {seq} transactions", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
