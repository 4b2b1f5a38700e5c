"""Abort rates before/after in one run (issue 19): YCSB A and a multi-table transfer workload.

    python -m benchmarks.aborts --base /path/to/old/checkout [--out benchmarks/results/compare_aborts.json]

Each source tree runs the same benchmark code (this tree's ``benchmarks``) with its own ``lv_core``:
the subprocess's ``PYTHONPATH`` puts a folder holding only the tree's ``lv_core`` before this tree, so
client processes (spawned, same environment) use it too. The trees run one after the other.

Workloads (local folder store, client processes in parallel, every aborted transaction retried):

- ``ycsb-A``: YCSB workload A (50% read / 50% update, zipfian), every operation one transaction
  (benchmarks/ycsb.py: point reads and updates with data skipping and ``may_match``).
- ``transfer``: two tables of ``accounts`` rows (one row per file); 80% of the transactions move an
  amount from an account in ``bank_a`` to one in ``bank_b`` (read both, update both), 20% are audits
  reading two random accounts of each table (read-only).

Reported per preset: transactions committed, aborts (by rule) and the abort rate = aborts / attempts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import tree_process

HERE = Path(__file__).resolve().parents[1]
PRESETS = ("serializable", "write_serializable", "snapshot")
TABLES = ("bank_a", "bank_b")


# ----------------------------------------------------------------------------------- transfer workload
def _key_ops(table: str, key: int) -> tuple[Any, Callable[[float], Any]]:
    """A point read of ``key`` and an update factory ``delta -> operation``, both with data skipping."""
    import pyarrow.compute as pc

    from lv_core.engine import arrow_ops
    from lv_core.engine.arrow_io import read_data_files
    from lv_core.txn.ops import Operation, OpResult

    def match(add: Any) -> bool:
        s = json.loads(add.stats) if add.stats else {}
        lo, hi = s.get("minValues", {}).get("id"), s.get("maxValues", {}).get("id")
        return lo is None or hi is None or int(lo) <= key <= int(hi)

    def read(ctx: Any) -> OpResult:
        snap = ctx.snapshot(table)
        files = [f for f in ctx.files(table).values() if match(f)]
        data = read_data_files(ctx.store, table, files, snap.schema, snap.partition_columns)
        vals = data.filter(pc.equal(data["id"], key))["val"].to_pylist()
        return OpResult(value=vals[0] if vals else None, reads={table: {f.path for f in files}}, scans={table},
                        may_match={table: match})

    def update(delta: float) -> Any:
        op = arrow_ops.update(table, arrow_ops.eq("id", key), arrow_ops.add_to("val", delta),
                              logical={"sql": f"UPDATE {table} SET val = val + {delta} WHERE id = {key}"})
        inner = op.run

        def run(ctx: Any) -> OpResult:  # the same rewrite, touching only the files that may hold the key
            res = inner(_Skipping(ctx, table, match))
            res.may_match = {table: match}
            return res

        return Operation("update", (table,), run, logical=op.logical)

    return Operation("read", (table,), read, logical={"read": table, "key": key}, exposed=False), update


class _Skipping:
    """An operation context whose ``files(table)`` keeps only the files ``match`` accepts."""

    def __init__(self, ctx: Any, table: str, match: Callable[[Any], bool]) -> None:
        self._ctx, self._table, self._match = ctx, table, match

    def files(self, table: str) -> Any:
        files = self._ctx.files(table)
        return {p: f for p, f in files.items() if self._match(f)} if table == self._table else files

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def transfer_client(args: dict[str, Any], ready: Callable[[], float]) -> dict[str, Any]:
    """One client process of the transfer workload (called through ClientPool)."""
    from benchmarks.common import StoreSpec, open_lakehouse
    from lv_core.errors import TransactionAborted

    lh, _store = open_lakehouse(StoreSpec(**args["store"]), args["location"], lease_s=30.0)
    rng = random.Random(f"{args['seed']}-{args['client']}")
    n = args["accounts"]
    aborts: Counter[str] = Counter()
    committed = attempts = 0
    start = ready()
    time.sleep(max(0.0, start - time.time()))
    for _ in range(args["txns"]):
        audit = rng.random() < 0.2
        keys = [rng.randrange(n) for _ in range(4)]
        amount = float(rng.randint(1, 10))
        for _attempt in range(args["max_retries"] + 1):
            attempts += 1
            txn = lh.begin(args["preset"], timeout_s=30.0)
            try:
                if audit:
                    for t, k in zip((*TABLES, *TABLES), keys, strict=False):
                        txn.execute(_key_ops(t, k)[0])
                else:
                    (ra, ua), (rb, ub) = _key_ops(TABLES[0], keys[0]), _key_ops(TABLES[1], keys[1])
                    txn.execute(ra)
                    txn.execute(rb)
                    txn.execute(ua(-amount))
                    txn.execute(ub(amount))
                txn.commit()
                committed += 1
                break
            except TransactionAborted as e:
                aborts[e.rule] += 1
            finally:
                if txn.state == "active":
                    txn.rollback()
    lh.close()
    return {"committed": committed, "attempts": attempts, "aborts": dict(aborts)}


def _load_bank(location: str, accounts: int) -> None:
    import pyarrow as pa

    import lv_core
    from lv_core.engine import arrow_ops

    lh = lv_core.connect(location)
    for t in TABLES:
        lh.create_table(t, "id BIGINT, val DOUBLE")
        txn = lh.begin("delta")
        txn.execute(arrow_ops.append(t, pa.table({"id": pa.array(range(accounts), pa.int64()),
                                                  "val": pa.array([100.0] * accounts, pa.float64())}),
                                     rows_per_file=1))
        txn.commit()
    w = lh.begin("serializable")  # both tables into the global version log
    for t in TABLES:
        w.execute(_key_ops(t, 0)[1](0.0))
    w.commit()
    lh.close()


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    aborts: Counter[str] = Counter()
    for r in rows:
        aborts.update(r["aborts"])
    attempts = sum(r["attempts"] for r in rows)
    n = sum(aborts.values())
    return {"committed": sum(r["committed"] for r in rows), "attempts": attempts, "aborts": n,
            "aborts_by_rule": dict(aborts), "abort_rate": round(n / attempts, 4) if attempts else 0.0}


def run(*, clients: int = 8, records: int = 1000, ops: int = 400, accounts: int = 40, txns: int = 25,
        seed: int = 7) -> dict[str, Any]:
    """Both workloads under every preset of PRESETS with this process's ``lv_core``."""
    import lv_core
    from benchmarks.common import ClientPool, StoreSpec
    from benchmarks.ycsb import YcsbRunner

    out: dict[str, Any] = {"lv_core": os.path.dirname(lv_core.__file__), "ycsb-A": {}, "transfer": {}}
    spec = StoreSpec("local-0ms")
    pool = ClientPool(clients)
    work = tempfile.mkdtemp(prefix="lv-aborts-")
    try:
        params = {"records": records, "ops": ops, "seed": seed, "bundle": 1, "max_retries": 10, "timeout_s": 30.0,
                  "max_seconds": 300.0}
        ycsb = YcsbRunner(pool, spec, f"{work}/ycsb", params)
        for p in PRESETS:
            r = ycsb.run(system=p, workload="A", clients=clients, mode="single", per_file=10)
            attempts = r.get("txns", 0) + r.get("aborts", 0)
            out["ycsb-A"][p] = {"committed": r.get("txns"), "attempts": attempts, "aborts": r.get("aborts"),
                                "aborts_by_rule": r.get("aborts_by_rule"), "error": r.get("error"),
                                "abort_rate": round(r.get("aborts", 0) / attempts, 4) if attempts else 0.0}
        ycsb.close()
        for p in PRESETS:
            loc = f"{work}/bank-{p}"
            _load_bank(loc, accounts)
            args = [{"store": spec.to_json(), "location": loc, "preset": p, "client": i, "seed": seed,
                     "accounts": accounts, "txns": txns, "max_retries": 10} for i in range(clients)]
            out["transfer"][p] = _summary(pool.run("benchmarks.aborts:transfer_client", args, timeout_s=600))
    finally:
        pool.close()
        shutil.rmtree(work, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------------- before/after
def _run_tree(tree: Path, kw: dict[str, int]) -> dict[str, Any]:
    """``run`` with ``tree``'s lv_core (and this tree's benchmark code) in a subprocess."""
    with tree_process(tree) as (shim, env):
        code = f"import json; from benchmarks import aborts; print(json.dumps(aborts.run(**{kw!r})))"
        res = subprocess.run([sys.executable, "-c", code], cwd=shim, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{tree}: {res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the 'before' source tree (a checkout or git worktree)")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--ops", type=int, default=400, help="YCSB operations in all")
    ap.add_argument("--txns", type=int, default=25, help="transfer transactions per client")
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results" / "compare_aborts.json"))
    args = ap.parse_args(argv)
    kw = {"clients": args.clients, "ops": args.ops, "txns": args.txns}
    before = _run_tree(Path(args.base).resolve(), kw)
    after = _run_tree(Path(args.head).resolve(), kw)
    print(f"{'workload':<10} {'preset':<20} {'before: aborts/attempts (rate) by rule':<46} after")
    for wl in ("ycsb-A", "transfer"):
        for p in PRESETS:
            cells = []
            for side in (before, after):
                r = side[wl][p]
                cells.append(f"{r['aborts']}/{r['attempts']} ({r['abort_rate']:.1%}) {r['aborts_by_rule'] or {}}")
            print(f"{wl:<10} {p:<20} {cells[0]:<46} {cells[1]}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"base": args.base, "head": args.head, "params": kw, "before": before,
                                          "after": after}, indent=1))


if __name__ == "__main__":
    main()
