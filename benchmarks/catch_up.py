"""A serializable UPDATE after commits made outside the global log, before/after the catch-up at write
time (``lv_core/txn/current.catch_up``): its time, redo count, statement runs and requests.

    PYTHONPATH=. python -m benchmarks.catch_up [--base /path/to/old/checkout] [--rows 400000] [--out FILE]

One table of ``--rows`` rows in 8 files (local store, Arrow operations, no Spark) is known to the global
log; then, for each N, N plain ``delta`` commits (appends and a one-row update), and one ``serializable``
transaction (one process: it knows the table moved) updates a tenth of the rows in every file. Before
the catch-up that UPDATE ran again inside ``commit()`` (redo on the version below its marker); after,
it runs once. With ``--base``, the same run is made with that tree's ``lv_core`` in a subprocess
first, and both are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def run(rows: int = 400_000, ns: tuple[int, ...] = (1, 4, 16), repeats: int = 3) -> dict[str, Any]:
    """Per N: median seconds of the UPDATE transaction, its redo count, statement runs and requests."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import lv_core
    from lv_core.engine import arrow_ops as ops

    out: dict[str, Any] = {}
    for n in ns:
        times, redos, runs_seen, reqs = [], [], [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                lh = lv_core.connect(f"{tmp}/wh", lease_s=30.0)
                lh.create_table("t", "id BIGINT, val DOUBLE")
                load = lh.begin("delta")
                per = rows // 8
                for f in range(8):
                    ids = pa.array(range(f * per, (f + 1) * per), pa.int64())
                    load.execute(ops.append("t", pa.table({"id": ids, "val": pc.cast(ids, pa.float64())})))
                load.commit()
                known = lh.begin("serializable")  # the table enters the global log
                known.execute(ops.update("t", ops.eq("id", 0), ops.add_to("val", 0.0)))
                known.commit()
                for i in range(n):
                    plain = lh.begin("delta")
                    if i % 2:
                        plain.execute(ops.update("t", ops.eq("id", 1), ops.add_to("val", 1.0)))
                    else:
                        plain.execute(ops.append("t", pa.table({"id": pa.array([rows + i], pa.int64()),
                                                                "val": pa.array([1.0], pa.float64())})))
                    plain.commit()
                op = ops.update("t", lambda t: pc.equal(pc.bit_wise_and(t["id"], 7), 0), ops.add_to("val", 1.0))
                inner, counted = op.run, []

                def counting(ctx: Any, inner: Any = inner, counted: list = counted) -> Any:
                    counted.append(1)
                    return inner(ctx)

                op.run = counting
                t0 = time.perf_counter()
                txn = lh.begin("serializable")
                txn.execute(op)
                res = txn.commit()
                times.append(time.perf_counter() - t0)
                redos.append(res.redo_count)
                runs_seen.append(len(counted))
                reqs.append(sum(txn.core.requests().values()))
        times.sort()
        out[str(n)] = {"median_s": round(times[len(times) // 2], 4), "redo": max(redos),
                       "statement_runs": max(runs_seen), "requests": sorted(reqs)[len(reqs) // 2]}
    return {"rows": rows, "repeats": repeats, "by_plain_commits": out}


def _in_tree(tree: Path, rows: int) -> dict[str, Any]:
    # this file run by path: the tree's own lv_core is the only one importable
    code = (f"import json, runpy; m = runpy.run_path({str(Path(__file__).resolve())!r}); "
            f"print(json.dumps(m['run'](rows={rows})))")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="an older checkout to run the same measurement with")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    res: dict[str, Any] = {}
    if a.base is not None:
        res["base"] = _in_tree(a.base, a.rows)
    res["this"] = _in_tree(HERE, a.rows)
    for name, got in res.items():
        for n, row in got["by_plain_commits"].items():
            print(f"{name:5} N={n:>3}: {row['median_s'] * 1000:8.1f} ms  redo {row['redo']}  "
                  f"statement runs {row['statement_runs']}  requests {row['requests']}")
    if a.out is not None:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
