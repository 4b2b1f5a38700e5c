"""TPC-C results: tpcc.png (committed/aborted per type, throughput, failed conditions) and the RESULTS.md section."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(data: dict[str, Any], path: Path) -> None:
    """One row of panels per client count: stacked committed/aborted per type, and throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.tpcc_txns import TYPES

    runs = [r for r in data["runs"] if "error" not in r]
    counts = sorted({r["clients"] for r in runs})
    if not counts:
        return
    fig, axes = plt.subplots(len(counts), 2, figsize=(13, 3.8 * len(counts)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1]})
    colors = dict(zip(TYPES, ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974"), strict=True))
    for row, c in enumerate(counts):
        rs = [r for r in runs if r["clients"] == c]
        ax, ax2 = axes[row]
        width = 0.8 / len(TYPES)
        for k, t in enumerate(TYPES):
            xs = [i + (k - len(TYPES) / 2 + 0.5) * width for i in range(len(rs))]
            com = [r["per_type"][t]["committed"] for r in rs]
            ab = [r["per_type"][t]["aborted"] + r["per_type"][t]["error"] for r in rs]
            ax.bar(xs, com, width, color=colors[t], label=f"{t} committed" if row == 0 else None)
            ax.bar(xs, ab, width, bottom=com, color=colors[t], alpha=0.35, hatch="//",
                   label=f"{t} aborted" if row == 0 else None)
        labels = []
        for r in rs:
            bad = r["conditions_failed"]
            labels.append(f"{r['system']}\n" + ("consistent" if not bad else "VIOLATES " + ",".join(bad)))
        ax.set_xticks(range(len(rs)), labels, fontsize=8)
        ax.set_ylabel("transactions")
        ax.set_title(f"TPC-C, {c} client{'s' if c > 1 else ''}, {rs[0]['seconds']:g} s per run: "
                     "committed (solid) and aborted (hatched) per type")
        ax2.bar(range(len(rs)), [r["throughput_txn_s"] or 0 for r in rs],
                color=["#c44e52" if r["conditions_failed"] else "#55a868" for r in rs])
        ax2.set_xticks(range(len(rs)), [r["system"] for r in rs], rotation=30, fontsize=8)
        ax2.set_ylabel("committed txn/s")
        ax2.set_title("throughput (red: conditions violated)", fontsize=9)
    axes[0][0].legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


SHORT = {"new_order": "NO", "payment": "P", "order_status": "OS", "delivery": "D", "stock_level": "SL"}


def _expected(system: str, clients: int) -> str:
    """What the paper's Table 4 leads one to expect of a run."""
    if clients == 1:
        return "consistent, no aborts"
    return "violations" if system in ("delta", "LV[R]") else "consistent, aborts"


def _observed(r: dict[str, Any]) -> str:
    if r["conditions_failed"]:
        return "violations"
    return "consistent, " + ("aborts" if r["aborted"] or r["errors"] else "no aborts")


def section(data: dict[str, Any] | None, rel: str) -> list[str]:
    """The RESULTS.md section: every run against the paper's Table 4."""
    if data is None:
        return []
    from benchmarks.tpcc_txns import TYPES

    p, sc = data["params"], data["scale"]
    rows = []
    for r in data["runs"]:
        if "error" in r:
            rows.append([r["system"], r["clients"], "error: " + r["error"][:120], "", "", "", "", "", "", ""])
            continue
        per = ", ".join(f"{SHORT[t]} {r['per_type'][t]['committed']}/"
                        f"{r['per_type'][t]['aborted'] + r['per_type'][t]['error']}" for t in TYPES)
        partial = sum(r["per_type"][t]["partial"] for t in TYPES)
        paper = data["paper_table4"].get(r["system"], {}).get("sequential" if r["clients"] == 1 else "concurrent", "-")
        exp, obs = _expected(r["system"], r["clients"]), _observed(r)
        rows.append([r["system"], r["clients"], f"{r['committed']}/{r['attempted']}", per,
                     f"{r['throughput_txn_s']:.2f}" if r["throughput_txn_s"] is not None else "-", r["tpmC"],
                     (", ".join(r["conditions_failed"]) or "none") + (f" ({partial} half-done)" if partial else ""),
                     paper, obs, "yes" if (exp == obs or (exp.startswith("consistent") and obs.startswith("consistent")
                                                          and r["clients"] > 1)) else "**no**"])
    L = ["## TPC-C (paper section 6.5, Table 4)", "",
         f"`python -m benchmarks.tpcc --clients {max(p['clients'])} --seconds {p['seconds']:g}`: all five transaction "
         f"types with TPC-C's mix, one warehouse (as the paper) of {sc['districts']} districts, "
         f"{sc['customers_per_district']} customers per district and {sc['items']} items (scaled down; "
         "`benchmarks/tpcc_txns.py`), through the operations API (pyarrow, no Spark), a local folder store with "
         f"{p['latency_ms']:g} ms injected per request. Each client is its own process and Lakehouse; each run "
         f"starts from a fresh copy of the loaded tables and lasts {p['seconds']:g} s; an aborted transaction is "
         "counted, not retried. After each run TPC-C's consistency conditions 1-9 and 12 (and unique primary keys) "
         "are checked on the tables as delta-rs reads them (`benchmarks/tpcc_check.py`). Per type: committed/aborted "
         "(NO New-Order, P Payment, OS Order-Status, D Delivery, SL Stock-Level). The paper's cell gives its "
         "outcome and throughput (its unit; ours is committed txn/s). `as expected`: consistent with no aborts "
         "sequentially; under concurrency violations for `delta` and LV[R], none for LV[CT], LV[I] and "
         "serializable (R+CT+I).", "",
         _table(["system", "clients", "committed/attempted", "per type", "txn/s", "tpmC", "conditions failed",
                 "paper (Table 4)", "observed", "as expected"], rows), "",
         "Aborts by rule (concurrent runs): " + "; ".join(
             f"{r['system']}: " + (", ".join(f"{k} {v}" for k, v in sorted(r["rules"].items())) or "none")
             for r in data["runs"] if r["clients"] > 1 and "error" not in r) + ". `half-done`: aborted "
         "transactions some of whose writes committed anyway: under `delta` every statement commits on its own, "
         "and LV[R] alone publishes each table on its own (docs/PROTOCOL.md, \"LV[R] alone versus LV[R]+LV[CT]\"), "
         "so an abort after one table was published leaves it (conditions 1, 4, 6 and 8: a Payment's warehouse "
         "update without its history row, a New-Order's order without its lines). Throughput is CPU-bound here "
         f"({max(p['clients'])} client processes on {data.get('environment', {}).get('cpus', '?')} cores shared with "
         "other work; runs of one system are minutes apart, so "
         "sequential throughputs differ by the machine's load as much as by the system). Under LV[CT] and "
         "serializable most aborts are deadlocks (\"gave up after 8 marker shifts (cycle)\"): markers order "
         "transactions per table, from the first access, "
         "and New-Order, Payment and Delivery all touch several of the same small tables (WAREHOUSE, DISTRICT, "
         "CUSTOMER, NEW-ORDER, ORDERS) in different interleavings, so two of them are easily ordered one way in "
         "one table and the other way in the next. Under LV[I] alone New-Order fails R1 whenever a Payment "
         "rewrote the warehouse row it read (W_TAX and W_YTD share a row, hence a file) or a stock row it "
         "updates.", "",
         f"![tpcc]({rel}/tpcc.png)", ""]
    return L


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("-" if c is None else str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
