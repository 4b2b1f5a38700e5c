"""CAB-style mixed streams on TPC-H data: metadata vs data phase latency per preset (paper Figure 11).

    PYTHONPATH=. python -m benchmarks.cab [--scale 0.1] [--ops 6] [--rounds 2] [--presets ...] [--modes ...] [--out DIR]

Needs the ``bench`` extra: ``tpchgen-cli`` (or ``tpcgen-cli tpch``) generates TPC-H at ``--scale`` at
run time into ``--workdir``; the tables are loaded as Delta tables through the product.

As the paper's CAB-LV (section 6.5) there are two kinds of streams, each operation one transaction:

- a *read stream* runs TPC-H queries (Q1, Q3, Q5, Q6, Q12, Q14, in this project's own Spark SQL
  rendering of the TPC-H specification's query definitions, validation parameters) and collects
  the result;
- a *write stream* inserts 1-100 rows into a random table (80%; rows drawn from the generated data)
  or updates rows of one table by key (20%; ``UPDATE ... WHERE key = k``).

Phases of each transaction (wall clock, on the calling thread):

- *metadata* (Figure 11's phase): ``begin()``, the first access of each table the operation uses
  (``txn.snapshot(t)``: marker placement under LV[R]/LV[CT], the snapshot under LV[I], the latest
  version under ``delta``), and ``commit()`` (waiting, redo, validation, publishing). Split from the
  transaction's events (:func:`commit_split`) into LakeVilla's own work (*protocol*), *waiting* for
  other transactions (their markers, the validation key) and *redo* (statements run again on newer
  state inside the commit: data work), so that a share of "metadata" does not hide either;
- *data*: the statement in Spark (the query planned, executed and collected; the insert or the
  copy-on-write update written).

Modes (``--modes``): ``sequential`` (one read stream, then one write stream, alone) and ``concurrent``
(``--readers`` read and ``--writers`` write streams at once, threads of this process, each with its
own ``Lakehouse`` on the same warehouse and one shared Spark server). Presets alternate: every round
runs each preset once per mode, rotating which goes first, and every preset runs the same operations.
An aborted transaction is counted and not retried. Writes ``<out>/<name>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.cab_events import commit_split, timeline, waited_on
from benchmarks.common import RESULTS, environment, log, write_json
from benchmarks.report_sections import md_table

PRESETS = ("delta", "repeatable_read", "serializable")
MODES = ("sequential", "concurrent")
#: Labels of the paper's feature combinations for the presets (Figure 11's LV[DL], LV[R, CT], LV[I]...).
LABELS = {"delta": "LV[DL]", "repeatable_read": "LV[R,CT]", "serializable": "LV[R,CT,I]"}

# Our own Spark SQL for TPC-H queries (definitions and validation parameters of the TPC-H
# specification, section 2.4); with the tables each one reads.
READS: dict[str, tuple[tuple[str, ...], str]] = {
    "Q1": (("lineitem",), """
        SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
               sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
               avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc,
               count(*) AS count_order
        FROM lineitem WHERE l_shipdate <= DATE '1998-09-02'
        GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus"""),
    "Q3": (("customer", "orders", "lineitem"), """
        SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
          AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority ORDER BY revenue DESC, o_orderdate LIMIT 10"""),
    "Q5": (("customer", "orders", "lineitem", "supplier", "nation", "region"), """
        SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM customer, orders, lineitem, supplier, nation, region
        WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
          AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
          AND r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
        GROUP BY n_name ORDER BY revenue DESC"""),
    "Q6": (("lineitem",), """
        SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem
        WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
          AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"""),
    "Q12": (("orders", "lineitem"), """
        SELECT l_shipmode,
               sum(CASE WHEN o_orderpriority IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END) AS high_line_count,
               sum(CASE WHEN o_orderpriority NOT IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END) AS low_line_count
        FROM orders, lineitem
        WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate
          AND l_shipdate < l_commitdate AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01'
        GROUP BY l_shipmode ORDER BY l_shipmode"""),
    "Q14": (("lineitem", "part"), """
        SELECT 100.00 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * (1 - l_discount) ELSE 0 END)
               / sum(l_extendedprice * (1 - l_discount)) AS promo_revenue
        FROM lineitem, part
        WHERE l_partkey = p_partkey AND l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'"""),
}
#: Single-table updates of the write streams: table -> (SET clause, key column).
UPDATES = {"orders": ("o_comment = 'cab update'", "o_orderkey"), "customer": ("c_acctbal = c_acctbal + 1", "c_custkey"),
           "part": ("p_retailprice = p_retailprice + 1", "p_partkey"), "lineitem": ("l_tax = 0.01", "l_orderkey"),
           "supplier": ("s_acctbal = s_acctbal + 1", "s_suppkey"),
           "partsupp": ("ps_availqty = ps_availqty + 1", "ps_partkey")}
TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")


def available() -> tuple[bool, str]:
    from benchmarks.tpcgen import generator

    if generator("tpch") is None:
        return False, "no TPC-H generator installed (pip install -e '.[bench]': tpchgen-cli)"
    return True, ""


def begin_spec(preset: str) -> tuple[str, str | None]:
    """``lh.begin`` arguments for a preset name or a feature label such as ``LV[R]`` / ``LV[I]``."""
    if preset.startswith("LV[") and preset.endswith("]"):
        feats = preset[3:-1]
        return ("serializable" if "I" in feats.split(",") else "repeatable_read"), feats
    return preset, None


def one_txn(lh: Any, preset: str, tables: tuple[str, ...], work: Any) -> dict[str, Any]:
    """One transaction: begin + first access of ``tables`` + ``work(txn)`` + commit, timed by phase."""
    from lv_core.errors import TransactionAborted

    name, feats = begin_spec(preset)
    t0 = time.perf_counter()
    txn = lh.begin(name, features=feats, timeout_s=300)
    seen: list[Any] = []
    txn.events.subscribe(seen.append)
    try:
        for t in tables:
            txn.snapshot(t)
        t1 = time.perf_counter()
        work(txn)
        t2, w2 = time.perf_counter(), time.time()
        txn.commit()
        t3, w3 = time.perf_counter(), time.time()
    except TransactionAborted as e:
        return {"aborted": getattr(e, "rule", None) or type(e).__name__, "total_s": time.perf_counter() - t0,
                "waited_on": waited_on(seen), "txn": txn.id, "ended_at": time.time()}
    except Exception as e:
        if txn.state == "active":
            txn.rollback()
        return {"error": f"{type(e).__name__}: {str(e)[:200]}", "total_s": time.perf_counter() - t0}
    return {"metadata_s": (t1 - t0) + (t3 - t2), "begin_s": t1 - t0, "commit_s": t3 - t2, "data_s": t2 - t1,
            "total_s": t3 - t0, "requests": sum(txn.requests().values()), **commit_split(seen, w2, w3),
            "waited_on": waited_on(seen), "txn": txn.id, "events": timeline(seen, w2), "commit_at": w2}


def catch_up_log(lh: Any, preset: str, tries: int = 3) -> dict[str, int]:
    """Before a phase of a preset with LV[I]: bring the global version log up to every table's latest
    commit, untimed. The presets without LV[I] (``delta``, LV[R], LV[R,CT]) commit outside the global
    log; a transaction with LV[I] reads each table at the version the log names, so the first updates
    of a phase that follows them ran on a stale version and were redone in their commit (``serializable``)
    or aborted (LV[I]): the cost of switching presets on one warehouse, not of the preset (the paper's
    phases last 20 minutes). A serializable read of each table whose commit finds such commits aborts
    with R1 once and catches the log up (docs/PROTOCOL.md, "Coexistence with plain Delta writers").
    Returns the aborts per table (tables whose first read committed: none)."""
    from lv_core.errors import TransactionAborted

    if begin_spec(preset)[0] != "serializable":
        return {}
    aborts: dict[str, int] = {}
    for t in TABLES:
        for _ in range(tries):
            txn = lh.begin("serializable", timeout_s=60)
            try:
                txn.sql(f"SELECT count(*) FROM {t}").collect()
                txn.commit()
                break
            except TransactionAborted:
                aborts[t] = aborts.get(t, 0) + 1
            except Exception as e:  # the phase runs anyway: its first updates pay the catch-up then
                log(f"cab: catching the global log up on {t} failed: {type(e).__name__}: {e}")
                if txn.state == "active":
                    txn.rollback()
                break
    return aborts


class Streams:
    """The operations of the streams over one loaded warehouse: per-table row pools for inserts."""

    def __init__(self, folder: Path, seed: int) -> None:
        import pyarrow.parquet as pq

        from benchmarks.tpcgen import delta_schema, table_files

        self.seed = seed
        self.pools: dict[str, Any] = {}
        for t, files in table_files(folder).items():
            schema = delta_schema(files)
            self.pools[t] = pq.ParquetFile(files[0]).read_row_group(0).slice(0, 1000).cast(schema)

    def read_op(self, rng: random.Random) -> tuple[str, tuple[str, ...], Any]:
        q = rng.choice(sorted(READS))
        tables, text = READS[q]
        return q, tables, lambda txn: txn.sql(text).collect()

    def write_op(self, rng: random.Random) -> tuple[str, tuple[str, ...], Any]:
        if rng.random() < 0.8:
            t = rng.choice(TABLES)
            pool = self.pools[t]
            n = rng.randint(1, min(100, pool.num_rows))
            rows = pool.take(sorted(rng.sample(range(pool.num_rows), n)))
            return f"insert {t}", (t,), lambda txn: txn.insert(t, rows)
        t = rng.choice(sorted(UPDATES))
        sets, key = UPDATES[t]
        k = rng.choice(self.pools[t].column(key).to_pylist())
        return f"update {t}", (t,), lambda txn: txn.sql(f"UPDATE {t} SET {sets} WHERE {key} = {k}")

    def stream(self, lh: Any, kind: str, preset: str, ops: int, label: str, out: list[dict[str, Any]],
               key: str | None = None) -> None:
        """``ops`` transactions of one stream. ``key`` (default ``label``) seeds its operations: the runs of
        every preset pass the same key, so each preset runs the same operations (a write stream's time is
        dominated by its updates, which a per-preset draw gave to some presets and not to others)."""
        rng = random.Random(f"{self.seed}/{key or label}")
        for i in range(ops):
            op, tables, work = (self.read_op if kind == "read" else self.write_op)(rng)
            got = one_txn(lh, preset, tables, work)
            got.update(kind=kind, op=op, stream=label, i=i)
            out.append(got)


def _stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "mean_ms": None}
    s = sorted(xs)
    return {"n": len(s), "p50_ms": round(1000 * statistics.median(s), 1),
            "p90_ms": round(1000 * s[min(len(s) - 1, int(0.9 * len(s)))], 1),
            "mean_ms": round(1000 * statistics.fmean(s), 1)}


#: The parts of the metadata phase (Figure 11's, ``metadata_s``), from :func:`commit_split`: LakeVilla's own
#: work, waiting for other transactions, and statements redone on newer state inside the commit.
SPLIT = {"protocol": ("begin_s", "protocol_s"), "waiting": ("wait_s", "key_wait_s"), "redo": ("redo_s",)}


def _share(ok: list[dict[str, Any]], keys: tuple[str, ...]) -> float | None:
    """The time of ``keys`` summed over ``ok`` as a share of their total time (None without samples, or
    for samples of a run before the split was measured)."""
    if not ok or any(k not in s for s in ok for k in keys):
        return None
    return round(sum(s[k] for s in ok for k in keys) / sum(s["total_s"] for s in ok), 4)


def summarize(samples: list[dict[str, Any]], presets: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in [m for m in MODES if any(s["mode"] == m for s in samples)]:
        for p in presets:
            for kind in ("read", "write"):
                sel = [s for s in samples if (s["mode"], s["preset"], s["kind"]) == (mode, p, kind)]
                ok = [s for s in sel if "metadata_s" in s]
                out.setdefault(mode, {}).setdefault(p, {})[kind] = {
                    "metadata": _stats([s["metadata_s"] for s in ok]), "data": _stats([s["data_s"] for s in ok]),
                    "begin": _stats([s["begin_s"] for s in ok]), "commit": _stats([s["commit_s"] for s in ok]),
                    "total": _stats([s["total_s"] for s in ok]),
                    "metadata_share": _share(ok, ("metadata_s",)),
                    "split": {part: _share(ok, keys) for part, keys in SPLIT.items()},
                    # per kind of operation (insert, update, query): an insert of 1-100 rows writes one small
                    # file, an update rewrites files in Spark; the stream's share depends on their mix
                    "by_op": {op: {"n": len(xs), "metadata_share": _share(xs, ("metadata_s",)),
                                   "protocol_share": _share(xs, SPLIT["protocol"])}
                              for op in sorted({s["op"].split()[0] for s in ok})
                              for xs in [[s for s in ok if s["op"].split()[0] == op]]},
                    "requests_p50": statistics.median([s["requests"] for s in ok]) if ok else None,
                    "aborts": sum(1 for s in sel if "aborted" in s), "errors": sum(1 for s in sel if "error" in s)}
    return out


def run(*, scale: float = 0.1, ops: int = 6, rounds: int = 2, readers: int = 2, writers: int = 2,
        presets: tuple[str, ...] = PRESETS, workdir: Path = Path("/tmp/lv-bench-cab"), parts: int = 4,
        seed: int = 42, driver_memory: str = "3g", modes: tuple[str, ...] = MODES,
        catch_up: bool = True) -> dict[str, Any]:
    ok, why = available()
    params = {"scale": scale, "ops_per_stream": ops, "rounds": rounds, "readers": readers, "writers": writers,
              "presets": list(presets), "parts": parts, "seed": seed, "driver_memory": driver_memory,
              "reads": sorted(READS), "updates": sorted(UPDATES), "insert_share": 0.8, "modes": list(modes),
              "same_ops_per_preset": True, "catch_up": catch_up}
    if not ok:
        return {"skipped": why, "params": params}
    from benchmarks.tpcgen import loaded

    res: dict[str, Any] = {"params": params, "machine": environment(), "load_average_before": os.getloadavg()}
    samples: list[dict[str, Any]] = []
    errors: list[str] = []
    caught: list[tuple[str, int, str, dict[str, int] | None]] = []
    with loaded("tpch", scale, workdir, parts=parts, spark_conf={"spark.driver.memory": driver_memory},
                tables=list(TABLES), connections=max(readers + writers, 2)) as setup:
        lhs = setup.lakehouses
        res.update(setup.timings)
        res["tables"] = setup.tables
        streams = Streams(setup.folder, seed)
        # warm-up, untimed: every query once, one insert and one update
        warm: list[dict[str, Any]] = []
        for tables, text in READS.values():
            warm.append(one_txn(lhs[0], "delta", tables, lambda txn, text=text: txn.sql(text).collect()))
        streams.stream(lhs[1], "write", "delta", 2, "warm-up", warm)
        errors += [f"warm-up: {w['error']}" for w in warm if "error" in w]
        for rnd in range(rounds):
            order = list(presets[rnd % len(presets):] + presets[:rnd % len(presets)])
            for p in order if "sequential" in modes else ():  # one read stream, then one write stream, alone
                caught.append(("sequential", rnd, p, catch_up_log(lhs[0], p) if catch_up else None))
                t0 = time.perf_counter()
                got: list[dict[str, Any]] = []
                streams.stream(lhs[0], "read", p, ops, f"seq-r-{rnd}-{p}", got, f"seq-r-{rnd}")
                streams.stream(lhs[1], "write", p, ops, f"seq-w-{rnd}-{p}", got, f"seq-w-{rnd}")
                for g in got:
                    g.update(mode="sequential", preset=p, round=rnd)
                samples += got
                log(f"cab round {rnd} sequential {p}: {time.perf_counter() - t0:.1f} s, "
                    f"{sum('aborted' in g for g in got)} aborts, {sum('error' in g for g in got)} errors")
            for p in order if "concurrent" in modes else ():  # readers + writers at once, one Lakehouse each
                caught.append(("concurrent", rnd, p, catch_up_log(lhs[0], p) if catch_up else None))
                t0 = time.perf_counter()
                got = []
                threads = [threading.Thread(target=streams.stream, args=(
                    lhs[i], "read" if i < readers else "write", p, ops, f"con-{i}-{rnd}-{p}", got, f"con-{i}-{rnd}"))
                    for i in range(readers + writers)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                for g in got:
                    g.update(mode="concurrent", preset=p, round=rnd)
                samples += got
                log(f"cab round {rnd} concurrent {p}: {time.perf_counter() - t0:.1f} s, "
                    f"{sum('aborted' in g for g in got)} aborts, {sum('error' in g for g in got)} errors")
            res["partial"] = summarize(samples, list(presets))
        errors += [f"{s['mode']} {s['preset']} {s['op']}: {s['error']}" for s in samples if "error" in s]
    res.pop("partial", None)
    res["summary"] = summarize(samples, list(presets))
    res["samples"] = samples
    res["catch_ups"] = [{"mode": m, "round": r, "preset": p, "aborts": a} for m, r, p, a in caught if a is not None]
    res["errors"] = errors[:20]
    res["load_average_after"] = os.getloadavg()
    return res


def report_section(res: dict[str, Any] | None, rel: str, name: str = "cab") -> list[str]:
    """The RESULTS.md section of results file ``name``: metadata vs data phase per mode, preset and
    stream kind (Figure 11)."""
    if res is None:
        return []
    which = "" if name == "cab" else f", `{name}`"
    head = [f"## CAB-style mixed streams: metadata vs data phase (paper Figure 11){which}", ""]
    if res.get("skipped"):
        return head + [f"Skipped: {res['skipped']}.", ""]
    p = res["params"]
    load = res.get("load_average_before") or []
    split = any(r.get("split") for by in res["summary"].values() for kinds in by.values() for r in kinds.values())
    rows = [_row(mode, preset, kind, r, split) for mode, by_preset in res["summary"].items()
            for preset, by_kind in by_preset.items() for kind, r in by_kind.items()]
    modes = "" if p.get("modes", list(MODES)) == list(MODES) else f" --modes {','.join(p['modes'])}"
    L = head + [
        f"`python -m benchmarks.cab --scale {p['scale']:g} --ops {p['ops_per_stream']} --rounds {p['rounds']} "
        f"--presets {','.join(p['presets'])}{modes}`: "
        f"TPC-H SF{p['scale']:g} (tpchgen-cli) loaded as Delta tables through the product. Read streams run TPC-H "
        f"{', '.join(p['reads'])} (this project's own Spark SQL of the specification's queries); write streams insert "
        "1-100 rows into a random table (80%) or update one table by key (20%). Each operation is one transaction. "
        "*metadata*: `begin()` + first access of the operation's tables (`txn.snapshot`: markers, snapshot or "
        "global version) + `commit()`; *data*: the statement in Spark. Under `delta` every statement commits on its "
        "own, inside the statement: its commit is counted in the data phase. `sequential`: one read stream, then one "
        f"write stream, alone; `concurrent`: {p['readers']} read + {p['writers']} write streams at once (threads, one "
        f"Lakehouse each, one Spark server). {p['ops_per_stream']} operations per stream per phase, {p['rounds']} "
        "round(s), presets rotating" + ("; every preset runs the same operations" if p.get("same_ops_per_preset")
                                         else "; operations drawn per preset") + _caught(res)
        + ". Medians (p90) in ms; aborts are not retried. Load average at start "
        f"{' / '.join(f'{x:.1f}' for x in load)} (shared machine).", "",
        *(_split_note(res) if split else []),
        md_table(["mode", "preset", "stream", "metadata p50 (p90)", "data p50 (p90)", "metadata share",
                  *(["of it: protocol / waiting / redo", "inserts / updates: metadata (protocol)"] if split else []),
                  "requests p50", "aborts"], rows), ""]
    L += ["The paper (TPC-H SF10 on S3, 20-minute phases) finds LV[DL] and LV[I] best for sequential reads "
          "(no markers), all features together worst. Its Figure 11(b) plots the latency of the metadata operations "
          "under concurrency, waiting included (it has no separate phase for it): LV[I] readers fastest (one global "
          "version instead of a version per table), LV[R] writers unaffected by LV[I] readers, and with LV[CT] on "
          "both \"more outliers for the writes and slower reads\" because readers place markers and compete with "
          "the writers. It notes the effects are visible only at a small scale factor, the data phase dominating "
          "otherwise."]
    if split:
        con = res["summary"].get("concurrent", {})
        L += ["", "Against Figure 11(b), metadata p50 (p90) of the concurrent streams, ms: reads " + ", ".join(
            f"{LABELS.get(p, p)} {r['read']['metadata']['p50_ms']} ({r['read']['metadata']['p90_ms']})"
            for p, r in con.items()) + "; writes " + ", ".join(
            f"{LABELS.get(p, p)} {r['write']['metadata']['p50_ms']} ({r['write']['metadata']['p90_ms']})"
            for p, r in con.items()) + ".", "", *_updates(res), *_longest(res.get("samples", []))]
    rules: dict[str, int] = {}
    for smp in res.get("samples", []):
        if "aborted" in smp:
            k = f"{smp['mode']} {smp['preset']} {smp['kind']}: {smp['aborted']}"
            rules[k] = rules.get(k, 0) + 1
    if rules:
        L += ["", "Aborts by mode, preset, stream and rule: " + ", ".join(f"{k} x{v}" for k, v in sorted(rules.items()))
              + ". `exposed_read`: a read transaction's SELECT would have to be redone on newer files (marker "
              "presets); `R1`: validation found a newer commit that changed what was read (LV[I]); `conflict`: "
              "`delta`'s own commit conflict."]
    if res.get("errors"):
        L += ["", "Errors: " + "; ".join(res["errors"][:5])]
    return L + ["", f"![{name}]({rel}/{name}.png)", ""]


def _caught(res: dict[str, Any]) -> str:
    if not res["params"].get("catch_up"):
        kinds = {begin_spec(p)[0] == "serializable" for p in res["params"]["presets"]}
        return ("; the global version log was not brought up to date between presets (before `catch_up_log`): the "
                "first updates of a phase with LV[I] on a table the presets without it had written ran on a stale "
                "version and were redone or aborted") if kinds == {True, False} else ""
    n = sum(sum(c["aborts"].values()) for c in res.get("catch_ups", []))
    return ("; before each phase of a preset with LV[I] the global version log is brought up to the commits the "
            f"presets without it made outside the log (untimed, `catch_up_log`: {n} reads aborted once to do it)")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _row(mode: str, preset: str, kind: str, r: dict[str, Any], split: bool) -> list[Any]:
    m, d = r["metadata"], r["data"]
    label = f"{preset} ({LABELS[preset]})" if preset in LABELS else preset
    cells: list[Any] = [mode, label, kind, f"{m['p50_ms']} ({m['p90_ms']})", f"{d['p50_ms']} ({d['p90_ms']})",
                        _pct(r["metadata_share"])]
    if split:
        sp, ops = r.get("split") or {}, r.get("by_op") or {}
        cells.append(" / ".join(_pct(sp.get(k)) for k in SPLIT))
        cells.append(" / ".join(f"{_pct(o['metadata_share'])} ({_pct(o['protocol_share'])})" if o else "-"
                                for o in (ops.get("insert"), ops.get("update"))) if kind == "write" else "")
    return cells + [r["requests_p50"], r["aborts"]]


def _updates(res: dict[str, Any]) -> list[str]:
    """What became of the write streams' updates per mode and preset: redone inside ``commit()``, aborted
    (left out of every share above), or neither."""
    cells = []
    for mode in MODES:
        for p in res["params"]["presets"]:
            ups = [s for s in res.get("samples", []) if s.get("mode") == mode and s["preset"] == p
                   and s["kind"] == "write" and s["op"].startswith("update")]
            redone = sum(1 for s in ups if s.get("redo_s", 0) > 0)
            gone = sum(1 for s in ups if "aborted" in s)
            if redone or gone:
                cells.append(f"{mode} {p}: {redone} redone, {gone} aborted of {len(ups)}")
    return ["Updates redone inside `commit()` or aborted (an aborted operation counts in no share): "
            + ("; ".join(cells) if cells else "none") + ".", ""]


def _longest(samples: list[dict[str, Any]], n: int = 6) -> list[str]:
    """The ``n`` longest metadata phases of the run and what filled them."""
    top = sorted((s for s in samples if "protocol_s" in s), key=lambda s: -s["metadata_s"])[:n]
    if not top:
        return []
    return ["Longest metadata phases (ms; protocol / waiting / redo): " + "; ".join(
        f"{s['mode']} {s['preset']} {s['op']}: {1000 * s['metadata_s']:.0f} "
        f"({1000 * (s['begin_s'] + s['protocol_s']):.0f} / {1000 * (s['wait_s'] + s['key_wait_s']):.0f} "
        f"/ {1000 * s['redo_s']:.0f}; data {1000 * s['data_s']:.0f})"
        for s in top) + "."]


def _split_note(res: dict[str, Any]) -> list[str]:
    return ["*metadata share*: the metadata phase's time summed over the stream's committed operations, over their "
            "total time (Figure 11's phase). *of it*: the same share split into LakeVilla's own work (*protocol*: "
            "`begin()`, first accesses, and the commit's requests, validation and publishing), *waiting* for other "
            "transactions (behind the pending markers of earlier transactions in a table, LV[CT]'s order, and for "
            "the validation key, LV[I]) and *redo*: statements the commit ran again on newer state because a "
            "predecessor invalidated them (an `UPDATE ... WHERE key = k` scanned the table while another "
            "transaction's insert added a file whose statistics may hold the key: the update is redone, in Spark, "
            "inside `commit()`; data work in the metadata phase). Taken from each transaction's events "
            "(`Waiting`/`WaitEnded`, `Redo`, `Validated`). *inserts / updates*: the metadata share of the write "
            "stream's inserts and of its updates separately, LakeVilla's own work in brackets.", ""]


def plot(res: dict[str, Any], path: Path) -> None:
    """Figure 11's shape: per mode, the metadata phase (and, when measured, LakeVilla's own part of it) and
    the data phase latencies per preset and stream kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = res["params"]["presets"]
    modes = [m for m in MODES if any(s.get("mode") == m for s in res["samples"])]
    split = any("protocol_s" in s for s in res["samples"])
    phases = [("metadata", ("metadata_s",))] + ([("of it: protocol", SPLIT["protocol"])] if split else [])
    phases.append(("data", ("data_s",)))
    fig, axes = plt.subplots(len(modes), len(phases), figsize=(6 * len(phases), 3.8 * len(modes)), squeeze=False)
    for row, mode in enumerate(modes):
        for col, (title, keys) in enumerate(phases):
            ax = axes[row][col]
            data, labels = [], []
            for kind in ("read", "write"):
                for p in presets:
                    xs = [max(1000 * sum(s[k] for k in keys), 1e-3) for s in res["samples"]
                          if s.get("mode") == mode and s["preset"] == p and s["kind"] == kind
                          and all(k in s for k in keys)]
                    data.append(xs or [float("nan")])
                    labels.append(f"{kind}\n{LABELS.get(p, p)}")
            ax.boxplot(data, showfliers=True)
            ax.set_xticks(range(1, len(labels) + 1))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("ms", fontsize=8)
            ax.set_title(f"{mode}: {title} phase", fontsize=9)
    fig.suptitle(f"CAB-style streams, TPC-H SF{res['params']['scale']:g} (local store, one Spark server)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--ops", type=int, default=6, help="operations per stream per phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--presets", default=",".join(PRESETS), help="presets or feature labels (LV[R], LV[I], ...)")
    ap.add_argument("--modes", default=",".join(MODES), help="sequential, concurrent or both")
    ap.add_argument("--no-catch-up", action="store_true",
                    help="do not bring the global version log up to date before a phase with LV[I] (catch_up_log)")
    ap.add_argument("--parts", type=int, default=4, help="generated files per table")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--workdir", default="/tmp/lv-bench-cab", help="generated data (reused) and the warehouse")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", default="cab")
    args = ap.parse_args(argv)
    res = run(scale=args.scale, ops=args.ops, rounds=args.rounds, readers=args.readers, writers=args.writers,
              presets=tuple(p.strip() for p in args.presets.split(",") if p.strip()), workdir=Path(args.workdir),
              parts=args.parts, seed=args.seed, driver_memory=args.driver_memory,
              modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()), catch_up=not args.no_catch_up)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{args.name}.json", res)
    if res.get("samples"):
        plot(res, out / f"{args.name}.png")
    print(json.dumps(res.get("skipped") or res["summary"], indent=1)[:4000])
    return res


if __name__ == "__main__":
    main()
