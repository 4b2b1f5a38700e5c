"""Exact object-store requests per transaction and per LakeVilla feature (paper Figure 14).

In one process on an InstrumentedStore over a local folder (no latency: counts do not depend on
it; the S3 server run of the YCSB benchmark counts the same requests on the server side). Tables
hold two rows, one per file; every measured transaction is warm (the client has seen the table).

Scenarios, each for the ``delta`` baseline, LV[R], LV[R,CT], LV[I] alone, and the three LV[R,CT,I]
presets:
- ``read``: read one key of one table; ``write``: update one key of one table.
- ``read_k`` / ``write_k``: the same over k tables (k = 1, 2, 4, 8): the cost of each extra table.
- ``contended_write_k``: a transaction T1 holds markers on the same k tables (one-row inserts, not
  yet committed) while T2 inserts one row into each of them; then T1 commits, then T2. T2's
  requests are counted: this is where LV[CT] tracks dependencies (edges, rule III reads, markers
  rewritten with the new edges). Blind inserts never conflict, so no redo muddles the comparison
  (the workload of the multi-table benchmark).
Per-feature deltas: LV[R] = R - delta, LV[CT] = (R+CT) - R, LV[I] = (R+CT+I) - (R+CT); per extra
table: the slope of requests in k.
"""

from __future__ import annotations

import tempfile
from typing import Any

from benchmarks.common import READ_KINDS, WRITE_KINDS, reads_writes

SYSTEMS: dict[str, dict[str, Any]] = {
    "delta": {"preset": "delta"},
    "R": {"preset": "repeatable_read", "features": ["R"]},
    "R+CT": {"preset": "repeatable_read"},
    "I": {"preset": "serializable", "features": ["I"]},
    "R+CT+I (serializable)": {"preset": "serializable"},
    "R+CT+I (snapshot)": {"preset": "snapshot"},
    "R+CT+I (write_serializable)": {"preset": "write_serializable"},
}
PAPER_FIG14 = "paper, section 6.7: LV[CT] adds 1 write and 5 reads per accessed table; LV[I] adds the fewest requests"


def _setup(tmp: str, n_tables: int):
    import lv_core
    from lv_core import Lakehouse
    from lv_core.storage.instrumented import InstrumentedStore
    from tests.helpers.bank import make_kv

    st = InstrumentedStore(lv_core.connect(tmp).store)
    lh = Lakehouse(st, lease_s=60.0)
    for i in range(n_tables):
        make_kv(lh, f"kv{i}", {1: 1.0, 2: 2.0})
    return lh, st


def _begin(lh: Any, system: str):
    s = SYSTEMS[system]
    return lh.begin(s["preset"], features=s.get("features"), timeout_s=30)


def _read(txn: Any, table: str) -> None:
    from tests.helpers.bank import read_kv

    read_kv(txn, table, 1, exposed=False)


def _write(txn: Any, table: str, key: int = 1) -> None:
    from tests.helpers.bank import add_kv

    add_kv(txn, table, key, 1.0)


def _insert(txn: Any, table: str, key: int) -> None:
    import pyarrow as pa

    from lv_core.engine import arrow_ops

    txn.execute(arrow_ops.append(table, pa.table({"id": pa.array([key], pa.int64()),
                                                  "val": pa.array([1.0], pa.float64())})))


def _one(lh: Any, st: Any, system: str, tables: list[str], write: bool) -> dict[str, int]:
    # warm: the same transaction once, uncounted (snapshot caches, global log head)
    for counted in (False, True):
        st.reset()
        txn = _begin(lh, system)
        for t in tables:
            (_write if write else _read)(txn, t)
        txn.commit()
        if counted:
            return st.counts()
    raise AssertionError


def _contended(lh: Any, st: Any, system: str, tables: list[str]) -> dict[str, Any]:
    """T1 holds markers on ``tables``; T2 writes all of them; T1 commits; T2 commits (T2 counted)."""
    from lv_core.storage.instrumented import KINDS

    t1 = _begin(lh, system)
    for t in tables:
        _insert(t1, t, 10)
    st.reset()
    t2 = _begin(lh, system)
    for t in tables:
        _insert(t2, t, 20)
    before_t1 = st.counts()
    t1.commit()
    after_t1 = st.counts()
    from lv_core.errors import TransactionAborted

    aborted = None
    try:
        t2.commit()
    except TransactionAborted as e:
        aborted = e.rule
    end = st.counts()
    t2_counts = {k: before_t1[k] + end[k] - after_t1[k] for k in KINDS}
    return {"requests": t2_counts, "t1_commit": {k: after_t1[k] - before_t1[k] for k in KINDS},
            "t2_redos": t2.redo_count, "t2_waits": t2.waits, "t2_aborted": aborted}


def _summ(c: dict[str, int]) -> dict[str, Any]:
    r, w = reads_writes(c)
    return {"requests": c, "reads": r, "writes": w, "total": r + w}


def run(ks: tuple[int, ...] = (1, 2, 4, 8), systems: tuple[str, ...] | None = None) -> dict[str, Any]:
    systems = systems or tuple(SYSTEMS)
    out: dict[str, Any] = {"ks": list(ks), "systems": {}, "note": PAPER_FIG14,
                           "read_kinds": list(READ_KINDS), "write_kinds": list(WRITE_KINDS)}
    kmax = max(ks)
    for system in systems:
        with tempfile.TemporaryDirectory(prefix="lv-bench-req-") as tmp:
            lh, st = _setup(tmp, kmax)
            tables = [f"kv{i}" for i in range(kmax)]
            # writes first: with LV[I] they put the tables into the global version log (steady state)
            row: dict[str, Any] = {"write": _summ(_one(lh, st, system, tables[:1], True)),
                                   "write_k": {k: _summ(_one(lh, st, system, tables[:k], True)) for k in ks}}
            row["read"] = _summ(_one(lh, st, system, tables[:1], False))
            row["read_k"] = {k: _summ(_one(lh, st, system, tables[:k], False)) for k in ks}
            row["contended_write_k"] = {}
            for k in ks:
                if system != "delta":
                    c = _contended(lh, st, system, tables[:k])
                    row["contended_write_k"][k] = {**_summ(c["requests"]), "t1_commit": c["t1_commit"],
                                                   "redos": c["t2_redos"], "waits": c["t2_waits"],
                                                   "aborted": c["t2_aborted"]}
            for scen in ("read_k", "write_k", "contended_write_k"):
                d = row[scen]
                if 1 in d and kmax in d and kmax > 1:
                    # slope from k=2 on: the decision record of a multi-table commit (1 PUT + 1 DELETE) is
                    # paid once per transaction, not per table
                    lo = 2 if 2 in d and kmax > 2 else 1
                    row[scen + "_per_extra_table"] = {
                        m: round((d[kmax][m] - d[lo][m]) / (kmax - lo), 2) for m in ("reads", "writes", "total")}
                    prev = max(k for k in d if k < kmax)
                    row[scen + "_marginal_at_kmax"] = {
                        m: round((d[kmax][m] - d[prev][m]) / (kmax - prev), 2) for m in ("reads", "writes", "total")}
            row["list_requests_read_only"] = max(row["read_k"][k]["requests"]["LIST"] for k in ks)
            out["systems"][system] = row
            lh.close()
    out["features"] = feature_deltas(out)
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {m: a[m] - b[m] for m in ("reads", "writes", "total")}


def feature_deltas(res: dict[str, Any]) -> dict[str, Any]:
    """What each feature adds (Figure 14): single-table read/write, and per extra table."""
    s = res["systems"]
    out: dict[str, Any] = {}
    pairs = {"LV[R] (R - delta)": ("R", "delta"), "LV[CT] (R+CT - R)": ("R+CT", "R"),
             "LV[I] (R+CT+I - R+CT)": ("R+CT+I (serializable)", "R+CT"), "LV[I] alone (I - delta)": ("I", "delta")}
    for name, (a, b) in pairs.items():
        if a not in s or b not in s:
            continue
        row = {"read": _diff(s[a]["read"], s[b]["read"]), "write": _diff(s[a]["write"], s[b]["write"])}
        for scen in ("write_k_per_extra_table", "read_k_per_extra_table", "contended_write_k_per_extra_table",
                     "contended_write_k_marginal_at_kmax"):
            if scen in s[a] and scen in s[b]:
                row[scen] = {m: round(s[a][scen][m] - s[b][scen][m], 2) for m in ("reads", "writes", "total")}
        out[name] = row
    return out


def targets(res: dict[str, Any]) -> dict[str, Any]:
    s = res["systems"]
    out: dict[str, Any] = {}
    ct = res["features"].get("LV[CT] (R+CT - R)", {})
    names = {"write_k_per_extra_table": "LV[CT] requests per extra table, uncontended updates",
             "contended_write_k_per_extra_table": "LV[CT] requests per extra table, contended inserts (mean slope)",
             "contended_write_k_marginal_at_kmax":
                 "LV[CT] requests per extra table, contended inserts (at the largest k)"}
    for scen, label in names.items():
        if scen in ct:
            v = ct[scen]
            out[label] = {
                "measured": v, "target": "<= 1 write + 2 reads", "met": v["writes"] <= 1 and v["reads"] <= 2}
    lists = {k: v["list_requests_read_only"] for k, v in s.items() if "I" in k}
    out["read-only LV[I] transactions make 0 LIST"] = {"measured": lists, "met": all(v == 0 for v in lists.values())}
    return out
