"""Where serializable writers' commit time goes under contention (issue 38): YCSB A on one table.

    python -m benchmarks.group_trace [--clients 8] [--ops 120] [--system serializable]

Runs the YCSB A configuration of :mod:`benchmarks.protocol_speed` (1,000 records one per file, 20 ms
per request) with each client process instrumented from outside (wrappers, no change to the product):
how each commit went (the fast path with a free key, decided by another holder's group, or the key
taken after waiting), the requests holders served or left to their owners and why (the DEBUG records
of :mod:`lv_core.txn.group`), serving rounds, and the time spent settling markers, waiting for the key
and under it. Prints one JSON summary summed over the clients.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any, Callable

_COUNTS: Counter[str] = Counter()
_TIMES: Counter[str] = Counter()
_LOCK = threading.Lock()
_EVENTS: list[tuple[float, float, str, str, str]] = []  # (start, end, kind, key, outcome) of each request


def _count(key: str, n: int = 1) -> None:
    with _LOCK:
        _COUNTS[key] += n


def _timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            with _LOCK:
                _TIMES[key] += time.monotonic() - t0
                _COUNTS[f"calls {key}"] += 1
    return wrapper


class _Reasons(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("left to owner"):
            _count(f"left to owner: {record.args[0]}")  # type: ignore[index]


def _install() -> None:
    from lv_core.storage.instrumented import InstrumentedStore
    from lv_core.txn import group, isolation

    request = InstrumentedStore._request

    def traced(self: Any, kind: str, key: str, call: Callable[[], Any]) -> Any:
        t0, outcome = time.time(), "ok"
        try:
            return request(self, kind, key, call)
        except Exception as e:
            outcome = type(e).__name__
            raise
        finally:
            _EVENTS.append((t0, time.time(), kind, key, outcome))

    InstrumentedStore._request = traced  # type: ignore[method-assign]

    lg = logging.getLogger("lv_core.txn.group")
    lg.setLevel(logging.DEBUG)
    lg.addHandler(_Reasons())
    claim = isolation._Run.claim_with_plan

    def claim_with_plan(self: Any) -> Any:
        out = claim(self)
        _count(f"fast path {'queued' if self.waiter is not None else 'first'}: {out.value}")
        return out

    isolation._Run.claim_with_plan = claim_with_plan  # type: ignore[method-assign]
    for name in ("settle_markers", "commit_isolated"):
        setattr(isolation, name, _timed(name, getattr(isolation, name)))
    joined = group.joined

    def joined_(*a: Any, **k: Any) -> Any:
        _count("decided in another holder's group")
        return joined(*a, **k)

    group.joined = joined_
    serve = group.serve  # (isolation calls it as group.serve too)

    def serve_(store: Any, state: Any, chosen: list) -> Any:
        where = "keep_serving" if sys._getframe(1).f_code.co_name == "keep_serving" else "own commit"
        g = serve(store, state, chosen)
        _count(f"serve ({where}): rounds")
        _count(f"serve ({where}): requests read", len(chosen))
        _count(f"serve ({where}): requests served", len(g.members))
        return g

    group.serve = serve_
    serve_same = group.serve_same  # (same-table members join after serve: counted here)

    def serve_same_(store: Any, state: Any, txn: str, own: Any, behind: Any, g: Any) -> Any:
        where = "keep_serving" if sys._getframe(1).f_code.co_name == "keep_serving" else "own commit"
        before = len(g.members)
        out = serve_same(store, state, txn, own, behind, g)
        _count(f"serve ({where}): same-table requests read", len(behind.cands))
        _count(f"serve ({where}): same-table requests served", len(g.members) - before)
        return out

    group.serve_same = serve_same_
    isolation.serve_same = serve_same_


def client_run(args: dict[str, Any], ready: Callable[[], float]) -> dict[str, Any]:
    """A YCSB client (:func:`benchmarks.ycsb.client_run`) with the counters above."""
    from benchmarks import ycsb

    _install()
    if os.environ.get("LV_TRACE_POLL_MAX"):
        opened = ycsb.open_lakehouse
        ycsb.open_lakehouse = lambda *a, **k: opened(*a, **k, poll_max_s=float(os.environ["LV_TRACE_POLL_MAX"]))
    out = ycsb.client_run(args, ready)
    time.sleep(0.5)  # (a background serving session ends)
    out["trace"] = {"counts": dict(_COUNTS), "seconds": {k: round(v, 2) for k, v in _TIMES.items()},
                    "events": [e for e in _EVENTS if e[0] >= out["t_start"]]}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--ops", type=int, default=120)
    ap.add_argument("--system", default="serializable")
    ap.add_argument("--poll-max", type=float, help="the clients' Lakehouse(poll_max_s=...)")
    ap.add_argument("--timeline", help="write every client's requests, in time order, to this file")
    ap.add_argument("--keep", help="run in this (new) folder and keep the warehouse there, to read its logs after")
    args = ap.parse_args(argv)
    if args.poll_max:
        os.environ["LV_TRACE_POLL_MAX"] = str(args.poll_max)
    from benchmarks import ycsb
    from benchmarks.common import ClientPool, store_spec

    params = {"records": 1000, "ops": args.ops, "seed": 42, "bundle": 10, "max_retries": 10, "timeout_s": 60.0,
              "max_seconds": 240.0, "ops_split": True}
    if args.keep:
        ycsb.remove_warehouse = lambda *a: None  # type: ignore[assignment]
    pool = ClientPool(args.clients)
    traces: list[dict[str, Any]] = []
    real = pool.run

    def run(fn: str, args_list: list[dict[str, Any]], timeout_s: float, on_ready: Any = None) -> list[Any]:
        res = real("benchmarks.group_trace:client_run", args_list, timeout_s, on_ready)
        traces.extend(r.pop("trace") for r in res)
        return res

    pool.run = run  # type: ignore[method-assign]
    try:
        with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="lv-trace-")
              ) as workdir:
            runner = ycsb.YcsbRunner(pool, store_spec("local-20ms"), os.path.join(workdir, "ycsb"), params)
            try:
                res = runner.run(system=args.system, workload="A", clients=args.clients, mode="single", per_file=1)
            finally:
                runner.close()
    finally:
        pool.close()
    if args.timeline:
        events = sorted((e[0], e[1], c, *e[2:]) for c, t in enumerate(traces) for e in t["events"])
        t0 = events[0][0] if events else 0.0
        with open(args.timeline, "w") as f:
            for e in events:
                f.write(f"{(e[0] - t0) * 1000:9.1f} {(e[1] - e[0]) * 1000:6.1f} c{e[2]} {e[3]:<13} {e[5]:<18} {e[4]}\n")
    counts: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    for t in traces:
        counts.update(t["counts"])
        seconds.update(t["seconds"])
    print(json.dumps({"throughput_ops_s": res.get("throughput_ops_s"), "aborts": res.get("aborts"),
                      "requests_per_op": res.get("client_requests_per_op"), "error": res.get("error"),
                      "counts": dict(sorted(counts.items())),
                      "seconds": {k: round(v, 2) for k, v in sorted(seconds.items())}}, indent=1))


if __name__ == "__main__":
    main()
