"""TPC-C's consistency conditions (specification 3.3.2), checked on the tables after a run.

The tables are read as a plain Delta reader sees their latest versions (delta-rs), not through
LakeVilla, so the check does not trust the system it judges. Conditions checked (one warehouse):

1. W_YTD = sum(D_YTD)
2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID), per district
3. max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER, per district
4. sum(O_OL_CNT) = rows in ORDER-LINE, per district
5. O_CARRIER_ID is null exactly for the orders in NEW-ORDER
6. O_OL_CNT = the order's rows in ORDER-LINE, per order
7. OL_DELIVERY_D is null exactly when the order's O_CARRIER_ID is null
8. W_YTD = sum(H_AMOUNT)
9. D_YTD = sum(H_AMOUNT of the district), per district
12. C_BALANCE + C_YTD_PAYMENT = sum(OL_AMOUNT of the customer's delivered lines), per customer

plus ``keys``: no primary key twice (a lost or doubled row). Conditions 10 and 11 are left out
(10 is implied by 12 and the history; 11 needs the full-scale initial population).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

CONDITIONS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "12", "keys")
KEYS = {"warehouse": ("w_id",), "district": ("d_id",), "customer": ("c_d_id", "c_id"), "stock": ("s_i_id",),
        "orders": ("o_d_id", "o_id"), "new_order": ("no_d_id", "no_o_id"),
        "order_line": ("ol_d_id", "ol_o_id", "ol_number")}


def read_tables(location: str) -> dict[str, list[dict[str, Any]]]:
    """Every TPC-C table of a local warehouse as rows, at its latest version (delta-rs)."""
    import deltalake

    from benchmarks.tpcc_txns import DDL

    return {t: deltalake.DeltaTable(f"{location}/{t}").to_pyarrow_table().to_pylist() for t in DDL}


def check(db: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Condition -> {"ok", "violations" (how many districts/orders/customers break it), "example"}."""
    out: dict[str, dict[str, Any]] = {}

    def verdict(name: str, bad: list[str]) -> None:
        out[name] = {"ok": not bad, "violations": len(bad), "example": bad[0] if bad else None}

    w_ytd = sum(r["w_ytd"] for r in db["warehouse"])
    districts = {r["d_id"]: r for r in db["district"]}
    verdict("1", [] if w_ytd == sum(r["d_ytd"] for r in districts.values())
            else [f"W_YTD {w_ytd} != sum(D_YTD) {sum(r['d_ytd'] for r in districts.values())}"])

    o_ids: dict[int, list[int]] = defaultdict(list)
    for r in db["orders"]:
        o_ids[r["o_d_id"]].append(r["o_id"])
    no_ids: dict[int, list[int]] = defaultdict(list)
    for r in db["new_order"]:
        no_ids[r["no_d_id"]].append(r["no_o_id"])
    bad2, bad3, bad4 = [], [], []
    lines_by_d = Counter(r["ol_d_id"] for r in db["order_line"])
    ol_cnt_by_d: Counter[int] = Counter()
    for r in db["orders"]:
        ol_cnt_by_d[r["o_d_id"]] += r["o_ol_cnt"]
    for d, dist in sorted(districts.items()):
        nxt = dist["d_next_o_id"] - 1
        mo, mno = max(o_ids[d], default=None), max(no_ids[d], default=None)
        if not (nxt == mo and (mno is None or nxt == mno)):
            bad2.append(f"district {d}: D_NEXT_O_ID-1 {nxt}, max(O_ID) {mo}, max(NO_O_ID) {mno}")
        if no_ids[d] and max(no_ids[d]) - min(no_ids[d]) + 1 != len(no_ids[d]):
            bad3.append(f"district {d}: NO_O_ID {min(no_ids[d])}..{max(no_ids[d])} but {len(no_ids[d])} rows")
        if ol_cnt_by_d[d] != lines_by_d[d]:
            bad4.append(f"district {d}: sum(O_OL_CNT) {ol_cnt_by_d[d]} != {lines_by_d[d]} ORDER-LINE rows")
    verdict("2", bad2)
    verdict("3", bad3)
    verdict("4", bad4)

    pending = {(r["no_d_id"], r["no_o_id"]) for r in db["new_order"]}
    lines: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in db["order_line"]:
        lines[(r["ol_d_id"], r["ol_o_id"])].append(r)
    bad5, bad6, bad7 = [], [], []
    delivered_amount: Counter[tuple[int, int]] = Counter()
    for r in db["orders"]:
        k = (r["o_d_id"], r["o_id"])
        if (r["o_carrier_id"] is None) != (k in pending):
            bad5.append(f"order {k}: carrier {r['o_carrier_id']}, in NEW-ORDER {k in pending}")
        if r["o_ol_cnt"] != len(lines[k]):
            bad6.append(f"order {k}: O_OL_CNT {r['o_ol_cnt']} but {len(lines[k])} lines")
        if any((ln["ol_delivery_d"] is None) != (r["o_carrier_id"] is None) for ln in lines[k]):
            bad7.append(f"order {k}: carrier {r['o_carrier_id']} but delivery dates "
                        f"{sorted({ln['ol_delivery_d'] is None for ln in lines[k]})} (null?)")
        if r["o_carrier_id"] is not None:
            delivered_amount[(r["o_d_id"], r["o_c_id"])] += sum(ln["ol_amount"] for ln in lines[k])
    verdict("5", bad5)
    verdict("6", bad6)
    verdict("7", bad7)

    h_total = sum(r["h_amount"] for r in db["history"])
    verdict("8", [] if w_ytd == h_total else [f"W_YTD {w_ytd} != sum(H_AMOUNT) {h_total}"])
    h_by_d: Counter[int] = Counter()
    for r in db["history"]:
        h_by_d[r["h_d_id"]] += r["h_amount"]
    verdict("9", [f"district {d}: D_YTD {r['d_ytd']} != sum(H_AMOUNT) {h_by_d[d]}"
                  for d, r in sorted(districts.items()) if r["d_ytd"] != h_by_d[d]])
    verdict("12", [f"customer {(r['c_d_id'], r['c_id'])}: C_BALANCE + C_YTD_PAYMENT "
                   f"{r['c_balance'] + r['c_ytd_payment']} != delivered OL_AMOUNT "
                   f"{delivered_amount[(r['c_d_id'], r['c_id'])]}"
                   for r in db["customer"]
                   if r["c_balance"] + r["c_ytd_payment"] != delivered_amount[(r["c_d_id"], r["c_id"])]])

    dup = []
    for t, cols in KEYS.items():
        seen = Counter(tuple(r[c] for c in cols) for r in db[t])
        dup += [f"{t} {k} x{n}" for k, n in seen.items() if n > 1]
    verdict("keys", dup)
    return out


def failed(result: dict[str, dict[str, Any]]) -> list[str]:
    """The conditions that do not hold, in specification order."""
    return [c for c in CONDITIONS if not result[c]["ok"]]
