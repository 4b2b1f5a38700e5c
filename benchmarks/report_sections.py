"""RESULTS.md sections of the before/after harnesses (list-append aborts, cold connect) and the
hand-written notes the report includes (``benchmarks/notes``): prose that no JSON holds lives in those
files, so ``run.py --report-only`` regenerates the whole of RESULTS.md without losing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NOTES = Path(__file__).resolve().parent / "notes"


def load_result(out: Path, name: str) -> dict[str, Any] | None:
    """``<out>/<name>.json`` (None: not in this run)."""
    p = out / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def fmt(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def note(key: str) -> list[str]:
    """The hand-written note ``notes/<key>.md`` that follows a generated section (none: nothing)."""
    p = NOTES / f"{key}.md"
    return p.read_text().rstrip("\n").split("\n") + [""] if p.exists() else []


def history() -> list[str]:
    """Every note of ``notes/history/`` in name order: earlier issues' before/after runs, each naming the
    results file (or the commit of it) its numbers come from."""
    out: list[str] = []
    for p in sorted((NOTES / "history").glob("*.md")):
        out += p.read_text().rstrip("\n").split("\n") + [""]
    return out


def listappend_section(out: Path, rel: str) -> list[str]:
    """Abort rates of the black-box list-append workload, two trees side by side (benchmarks/listappend.py)."""
    la = load_result(out, "listappend")
    if la is None:
        return []
    rows = la["rows"]
    keys = sorted({(r["preset"], r["mode"]) for r in rows})
    table = []
    for preset, mode in keys:
        cells: list[Any] = [preset, mode]
        for tree in ("before", "after"):
            got = [r for r in rows if (r["preset"], r["mode"], r["tree"]) == (preset, mode, tree)]
            txns = sum(r["stats"]["txns"] for r in got)
            aborted = sum(r["stats"]["aborted"] for r in got)
            secs = sum(r["seconds"] for r in got)
            found = sorted({k for r in got for k in r["anomalies"]})
            bad = sorted({k for r in got for k in r["violations"]})
            cells += [f"{aborted / txns:.3f}" if txns else "-", f"{txns / secs:.1f}" if secs else "-",
                      ", ".join(found) or "none", ", ".join(bad) or "none"]
        table.append(cells)
    spec = la["spec"]
    return ["## Black-box list-append: abort rates before and after (issue 34)", "",
            f"`python -m benchmarks.listappend --base OLD_TREE`: {la['clients']} client processes, {spec['txns']} "
            f"transactions each, {spec['tables']} tables x {spec['keys']} keys per generation, up to "
            f"{spec['max_ops']} reads/appends per transaction, {spec['latency_s'] * 1000:g} ms per request; "
            "`known`: the global version log knows the tables, `fresh`: every transaction of a client on tables "
            "new to it. The two trees alternate in one run; the checker (the same for both) judges every run from "
            "the values read alone. `found`: anomaly kinds seen; `forbidden`: those the preset forbids (`delta` "
            "forbids none but `lost`, which its half-committed statements show).", "",
            md_table(["preset", "tables", "before: abort rate", "before: txn/s", "before: found", "before: forbidden",
                    "after: abort rate", "after: txn/s", "after: found", "after: forbidden"], table),
            "", f"![listappend]({rel}/listappend.png)", ""]


def cold_connect_section(out: Path, rel: str) -> list[str]:
    """Cold ``%lv connect`` to the first result, two trees side by side (benchmarks/cold_connect.py): one
    table per results file (``cold_connect.json``: Run All; ``cold_connect_think*.json``: a pause)."""
    names = sorted(p.stem for p in out.glob("cold_connect*.json"))
    if not names:
        return []
    L = ["## Cold `%lv connect` to the first result (issue 37)", "",
         "`python -m benchmarks.cold_connect --base OLD_TREE [--think S]`: per sample a fresh IPython kernel "
         "(jupyter_client) with the tree first on PYTHONPATH gets `%lv connect` and a `%%lvsql` cell "
         "(CREATE TABLE, INSERT, SELECT): at once, as Run All sends them, or `S` seconds after the connect cell "
         "ended (a user reading and typing). Seconds from the connect cell sent to its \"Spark engine ready\" "
         "line, from there to the SELECT's result, in total, and from when the cell could start to its result "
         "(median, range). The trees alternate in one run. `stderr`: output chunks the kernel wrote to stderr "
         "(logs, stack traces) over all samples.", ""]
    metrics = ("connect_to_ready_s", "ready_to_result_s", "total_s", "cell_to_result_s")
    for name in names:
        cc = load_result(out, name)
        if cc is None:
            continue
        if "skipped" in cc:
            L += [f"`{name}`: skipped: {cc['skipped']}", ""]
            continue
        s = cc["summary"]
        rows = []
        for tree in ("before", "after"):
            got = s.get(tree, {})
            n = sum(1 for r in cc["rows"] if r["tree"] == tree and "error" not in r)
            rows.append([f"{tree} ({cc['base'] if tree == 'before' else 'this tree'})", n,
                         *[f"{fmt(got.get(m), 2)} ({fmt(got.get(m.replace('_s', '_min_s')), 1)}-"
                           f"{fmt(got.get(m.replace('_s', '_max_s')), 1)})" for m in metrics],
                         sum(r.get("stderr_chunks", 0) for r in cc["rows"] if r["tree"] == tree)])
        think = cc.get("think_s", 0.0)
        load = cc.get("environment", {}).get("load_avg_at_start") or []
        L += [f"`{name}` ({'Run All' if not think else f'the first cell sent {think:g} s after connect'}, "
              f"finished {cc.get('finished_utc', '?')}, load average at start "
              f"{' / '.join(f'{x:.1f}' for x in load) or '?'} on {cc.get('environment', {}).get('cpus', '?')} CPUs):",
              "",
              md_table(["tree", "kernels", "connect -> engine ready s", "engine ready -> first result s", "total s",
                      "cell -> first result s", "stderr"], rows)]
        L += [f"Failed sample ({r['tree']}, run {r['run']}): {r['error'][:200]}" for r in cc["rows"] if "error" in r]
        L += ["", f"![{name}]({rel}/{name}.png)", ""]
    return L


def statement_latency_section(out: Path, rel: str) -> list[str]:
    """Short statements on Spark Connect, two trees side by side (benchmarks/statement_latency.py)."""
    data = load_result(out, "statement_latency")
    if data is None:
        return []
    s, trees = data["summary"], data["trees"]
    commits = data.get("commits") or trees
    rows = []
    for kind, per in s.items():
        b, a = per.get("before", {}), per.get("after", {})
        rows.append([kind, fmt(b.get("ms_median"), 0), fmt(a.get("ms_median"), 0), fmt(per.get("after/before ms"), 2),
                     f"{fmt(b.get('spark_calls_by_method', {}).get('ExecutePlan'), 0)} -> "
                     f"{fmt(a.get('spark_calls_by_method', {}).get('ExecutePlan'), 0)}",
                     f"{fmt(b.get('spark_calls'), 1)} -> {fmt(a.get('spark_calls'), 1)}"])
    load = data.get("environment", {}).get("load_avg_at_start") or []
    return ["## Short statements on Spark Connect", "",
            "`python -m benchmarks.statement_latency --base OLD_TREE`: one-row statements, each its own `serializable` "
            "transaction on a local folder (tables of 10 files of 10 rows), both trees in child processes on one "
            f"Spark Connect server, alternating round by round ({len(data['rows']) // max(1, len(trees))} rounds of "
            f"{data['task']['n']} measured transactions per kind, after {data['task']['warmup']} warm-up ones; load "
            f"average at start {' / '.join(f'{x:.1f}' for x in load) or '?'}). Before: `{commits.get('before', '-')}`, "
            f"after: `{commits.get('after', '-')}`. Spark Connect calls are exact counts per transaction (all methods: "
            "ExecutePlan, AnalyzePlan, Config and the asynchronous ReleaseExecute).", "",
            md_table(["transaction", "before ms", "after ms", "after/before", "ExecutePlan", "Spark Connect calls"],
                     rows), "", f"![statement_latency]({rel}/statement_latency.png)", ""]


def bench_runs(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Benchmark -> the ``run.py`` run that wrote its results (``run.json``'s ``by_benchmark``; a
    ``run.json`` from before that field is the record of every benchmark it lists)."""
    own = {k: v for k, v in meta.items() if k != "by_benchmark"}
    return dict(meta.get("by_benchmark") or {b: own for b in meta.get("benchmarks", [])})


def run_label(rec: dict[str, Any] | None) -> str:
    """One line naming a ``run.py`` run: command, profile, tree, when, how long, on what machine load."""
    if not rec:
        return "Run: not recorded in `run.json`."
    env = rec.get("environment", {})
    load = env.get("load_avg_at_start") or []
    argv = " ".join(rec.get("argv") or [])
    head, dirty = (rec.get("commit") or "").partition("+dirty")[:2]
    tree = f", commit `{head[:12]}{dirty}`" if head else ""
    return (f"Run: `python benchmarks/run.py{' ' + argv if argv else ''}` (profile `{rec.get('profile', '?')}`, seed "
            f"{rec.get('seed')}{tree}), finished {rec.get('finished_utc', '?')}, {fmt(rec.get('duration_s'), 0)} s in "
            f"all, on {env.get('cpus', '?')} CPUs (load average at start "
            f"{' / '.join(f'{x:.2f}' for x in load) or '?'}), Python {env.get('python')}, pyarrow "
            f"{env.get('pyarrow')}, deltalake (delta-rs) {env.get('deltalake')}.")
