"""TPC-C's schema, a scaled-down initial population and its five transactions as client programs.

Scale (one warehouse, as the paper): 10 districts, ``customers`` customers per district (default 30
instead of 3,000), ``items`` items and stock rows (default 100 instead of 100,000), one initial
order per customer, the last 30% of them undelivered (in NEW-ORDER). Money is held in integer cents
(TPC-C's DECIMAL(12,2)) so the consistency conditions compare exactly. Left out of the specification:
customer selection by last name (always by id), remote warehouses (there is one), New-Order's 1%
user rollback, and the text columns that only pad rows.

Each transaction is written as the specification's embedded-SQL program: it SELECTs, computes in
the client, and writes what it computed (``UPDATE district SET d_next_o_id = :o_id + 1``), all in
one LakeVilla transaction ``txn`` (under preset ``delta`` every statement commits on its own).
Layout: one row per data file for WAREHOUSE, DISTRICT, CUSTOMER and STOCK (conflicts are per row,
as with row locks); one file per district for the initial ORDERS, NEW-ORDER, ORDER-LINE and
HISTORY rows, and one new file per inserting statement.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import pyarrow as pa

from benchmarks.tpcc_ops import delete, insert, select, set_by_key, set_columns, update

W = 1  # the warehouse
DISTRICTS = 10
MIX = {"new_order": 45, "payment": 43, "order_status": 4, "delivery": 4, "stock_level": 4}
TYPES = tuple(MIX)

DDL: dict[str, str] = {
    "warehouse": "w_id BIGINT, w_tax BIGINT, w_ytd BIGINT",
    "district": "d_id BIGINT, d_w_id BIGINT, d_tax BIGINT, d_ytd BIGINT, d_next_o_id BIGINT",
    "customer": ("c_id BIGINT, c_d_id BIGINT, c_w_id BIGINT, c_discount BIGINT, c_credit STRING, "
                 "c_balance BIGINT, c_ytd_payment BIGINT, c_payment_cnt BIGINT, c_delivery_cnt BIGINT"),
    "history": ("h_c_id BIGINT, h_c_d_id BIGINT, h_c_w_id BIGINT, h_d_id BIGINT, h_w_id BIGINT, "
                "h_date BIGINT, h_amount BIGINT"),
    "new_order": "no_o_id BIGINT, no_d_id BIGINT, no_w_id BIGINT",
    "orders": ("o_id BIGINT, o_d_id BIGINT, o_w_id BIGINT, o_c_id BIGINT, o_entry_d BIGINT, "
               "o_carrier_id BIGINT, o_ol_cnt BIGINT, o_all_local BIGINT"),
    "order_line": ("ol_o_id BIGINT, ol_d_id BIGINT, ol_w_id BIGINT, ol_number BIGINT, ol_i_id BIGINT, "
                   "ol_supply_w_id BIGINT, ol_delivery_d BIGINT, ol_quantity BIGINT, ol_amount BIGINT"),
    "item": "i_id BIGINT, i_price BIGINT",
    "stock": "s_i_id BIGINT, s_w_id BIGINT, s_quantity BIGINT, s_ytd BIGINT, s_order_cnt BIGINT, "
             "s_remote_cnt BIGINT",
}
PER_ROW = {"warehouse", "district", "customer", "stock"}
INITIAL_PAYMENT = 1000  # cents: every customer starts with one 10.00 payment in HISTORY


def rows_table(rows: list[dict[str, Any]], table: str) -> pa.Table:
    """Rows (column -> value dicts) of ``table`` as an Arrow table of its schema's columns."""
    names = [c.split()[0] for c in DDL[table].split(", ")]
    return pa.table({n: pa.array([r[n] for r in rows], pa.int64() if "credit" not in n else pa.string())
                     for n in names})


def now_ms() -> int:
    return int(time.time() * 1000)


def population(customers: int, items: int, seed: int) -> dict[str, list[pa.Table]]:
    """The initial rows, per table as a list of appends (one data file each unless PER_ROW)."""
    rng = random.Random(f"{seed}/tpcc/load")
    t0 = now_ms()
    out: dict[str, list[pa.Table]] = {t: [] for t in DDL}
    out["warehouse"].append(rows_table([{"w_id": W, "w_tax": rng.randint(0, 2000),
                                    "w_ytd": DISTRICTS * customers * INITIAL_PAYMENT}], "warehouse"))
    out["item"].append(rows_table([{"i_id": i, "i_price": rng.randint(100, 10000)} for i in range(1, items + 1)],
                                  "item"))
    out["stock"].append(rows_table([{"s_i_id": i, "s_w_id": W, "s_quantity": rng.randint(10, 100), "s_ytd": 0,
                                "s_order_cnt": 0, "s_remote_cnt": 0} for i in range(1, items + 1)], "stock"))
    districts, custs = [], []
    undelivered_from = customers - (customers * 3) // 10 + 1
    for d in range(1, DISTRICTS + 1):
        districts.append({"d_id": d, "d_w_id": W, "d_tax": rng.randint(0, 2000), "d_ytd": customers * INITIAL_PAYMENT,
                          "d_next_o_id": customers + 1})
        custs += [{"c_id": c, "c_d_id": d, "c_w_id": W, "c_discount": rng.randint(0, 5000),
                   "c_credit": "BC" if rng.random() < 0.1 else "GC", "c_balance": -INITIAL_PAYMENT,
                   "c_ytd_payment": INITIAL_PAYMENT, "c_payment_cnt": 1, "c_delivery_cnt": 0}
                  for c in range(1, customers + 1)]
        out["history"].append(rows_table([{"h_c_id": c, "h_c_d_id": d, "h_c_w_id": W, "h_d_id": d, "h_w_id": W,
                                      "h_date": t0, "h_amount": INITIAL_PAYMENT} for c in range(1, customers + 1)],
                                    "history"))
        order_c = list(range(1, customers + 1))
        rng.shuffle(order_c)
        orders, lines = [], []
        for o in range(1, customers + 1):
            delivered = o < undelivered_from
            n = rng.randint(5, 15)
            orders.append({"o_id": o, "o_d_id": d, "o_w_id": W, "o_c_id": order_c[o - 1], "o_entry_d": t0,
                           "o_carrier_id": rng.randint(1, 10) if delivered else None, "o_ol_cnt": n,
                           "o_all_local": 1})
            lines += [{"ol_o_id": o, "ol_d_id": d, "ol_w_id": W, "ol_number": k, "ol_i_id": rng.randint(1, items),
                       "ol_supply_w_id": W, "ol_delivery_d": t0 if delivered else None, "ol_quantity": 5,
                       "ol_amount": 0 if delivered else rng.randint(1, 999999)} for k in range(1, n + 1)]
        out["orders"].append(rows_table(orders, "orders"))
        out["order_line"].append(rows_table(lines, "order_line"))
        out["new_order"].append(rows_table([{"no_o_id": o, "no_d_id": d, "no_w_id": W}
                                       for o in range(undelivered_from, customers + 1)], "new_order"))
    out["district"].append(rows_table(districts, "district"))
    out["customer"].append(rows_table(custs, "customer"))
    return out


def load(lh: Any, customers: int, items: int, seed: int) -> None:
    """Create the nine tables and load the initial population (one plain Delta commit per table)."""
    from lv_core.engine import arrow_ops

    for table, parts in population(customers, items, seed).items():
        lh.create_table(table, DDL[table])
        txn = lh.begin("delta")
        for part in parts:
            txn.execute(arrow_ops.append(table, part, rows_per_file=1 if table in PER_ROW else None))
        txn.commit()


# ----------------------------------------------------------------------------------- transactions
def _one(rows: pa.Table, what: str) -> dict[str, Any]:
    if rows.num_rows != 1:
        raise LookupError(f"{what}: {rows.num_rows} rows")  # a broken database (duplicate or lost row)
    return {k: v[0] for k, v in rows.to_pydict().items()}


def new_order(txn: Any, rng: random.Random, customers: int, items: int) -> None:
    """2.4: take the district's next order id, insert the order and its lines, take the items from stock."""
    d, c = rng.randint(1, DISTRICTS), rng.randint(1, customers)
    ids = rng.sample(range(1, items + 1), rng.randint(5, 15))
    qty = {i: rng.randint(1, 10) for i in ids}
    _one(txn.execute(select("warehouse", {"w_id": W})), "warehouse")
    dist = _one(txn.execute(select("district", {"d_id": d})), "district")
    o_id = dist["d_next_o_id"]
    txn.execute(update("district", {"d_id": d}, set_columns({"d_next_o_id": o_id + 1}), f"d_next_o_id = {o_id + 1}"))
    _one(txn.execute(select("customer", {"c_d_id": d, "c_id": c})), "customer")
    t = now_ms()
    txn.execute(insert("orders", rows_table([{"o_id": o_id, "o_d_id": d, "o_w_id": W, "o_c_id": c, "o_entry_d": t,
                                         "o_carrier_id": None, "o_ol_cnt": len(ids), "o_all_local": 1}], "orders")))
    txn.execute(insert("new_order", rows_table([{"no_o_id": o_id, "no_d_id": d, "no_w_id": W}], "new_order")))
    key = frozenset(ids)
    price = dict(zip(*txn.execute(select("item", {"i_id": key})).select(["i_id", "i_price"]).to_pydict().values(),
                     strict=True))
    stock = txn.execute(select("stock", {"s_i_id": key})).to_pylist()
    new: dict[str, dict[int, int]] = {"s_quantity": {}, "s_ytd": {}, "s_order_cnt": {}}
    for s in stock:
        i, q = s["s_i_id"], qty[s["s_i_id"]]
        new["s_quantity"][i] = s["s_quantity"] - q if s["s_quantity"] - q >= 10 else s["s_quantity"] - q + 91
        new["s_ytd"][i] = s["s_ytd"] + q
        new["s_order_cnt"][i] = s["s_order_cnt"] + 1
    txn.execute(update("stock", {"s_i_id": key}, set_by_key("s_i_id", new), "s_quantity = :s_quantity, ..."))
    txn.execute(insert("order_line", rows_table([
        {"ol_o_id": o_id, "ol_d_id": d, "ol_w_id": W, "ol_number": n, "ol_i_id": i, "ol_supply_w_id": W,
         "ol_delivery_d": None, "ol_quantity": qty[i], "ol_amount": qty[i] * price[i]}
        for n, i in enumerate(ids, start=1)], "order_line")))


def payment(txn: Any, rng: random.Random, customers: int, items: int) -> None:
    """2.5: add the payment to the warehouse's, the district's and the customer's totals; record it."""
    d, c = rng.randint(1, DISTRICTS), rng.randint(1, customers)
    amount = rng.randint(100, 500000)
    w = _one(txn.execute(select("warehouse", {"w_id": W})), "warehouse")
    txn.execute(update("warehouse", {"w_id": W}, set_columns({"w_ytd": w["w_ytd"] + amount}),
                       f"w_ytd = {w['w_ytd'] + amount}"))
    dist = _one(txn.execute(select("district", {"d_id": d})), "district")
    txn.execute(update("district", {"d_id": d}, set_columns({"d_ytd": dist["d_ytd"] + amount}),
                       f"d_ytd = {dist['d_ytd'] + amount}"))
    cust = _one(txn.execute(select("customer", {"c_d_id": d, "c_id": c})), "customer")
    vals = {"c_balance": cust["c_balance"] - amount, "c_ytd_payment": cust["c_ytd_payment"] + amount,
            "c_payment_cnt": cust["c_payment_cnt"] + 1}
    txn.execute(update("customer", {"c_d_id": d, "c_id": c}, set_columns(vals),
                       ", ".join(f"{k} = {v}" for k, v in vals.items())))
    txn.execute(insert("history", rows_table([{"h_c_id": c, "h_c_d_id": d, "h_c_w_id": W, "h_d_id": d, "h_w_id": W,
                                          "h_date": now_ms(), "h_amount": amount}], "history")))


def order_status(txn: Any, rng: random.Random, customers: int, items: int) -> None:
    """2.6 (read-only): the customer's balance and last order with its lines."""
    d, c = rng.randint(1, DISTRICTS), rng.randint(1, customers)
    _one(txn.execute(select("customer", {"c_d_id": d, "c_id": c})), "customer")
    orders = txn.execute(select("orders", {"o_d_id": d, "o_c_id": c}))
    if orders.num_rows:
        o_id = max(orders["o_id"].to_pylist())
        txn.execute(select("order_line", {"ol_d_id": d, "ol_o_id": o_id}))


def delivery(txn: Any, rng: random.Random, customers: int, items: int) -> None:
    """2.7: deliver the oldest undelivered order of every district (one transaction)."""
    carrier = rng.randint(1, 10)
    for d in range(1, DISTRICTS + 1):
        pending = txn.execute(select("new_order", {"no_d_id": d}))
        if not pending.num_rows:
            continue
        o = min(pending["no_o_id"].to_pylist())
        txn.execute(delete("new_order", {"no_d_id": d, "no_o_id": o}))
        order = _one(txn.execute(select("orders", {"o_d_id": d, "o_id": o})), "order")
        txn.execute(update("orders", {"o_d_id": d, "o_id": o}, set_columns({"o_carrier_id": carrier}),
                           f"o_carrier_id = {carrier}"))
        lines = txn.execute(select("order_line", {"ol_d_id": d, "ol_o_id": o}))
        total = sum(lines["ol_amount"].to_pylist())
        t = now_ms()
        txn.execute(update("order_line", {"ol_d_id": d, "ol_o_id": o}, set_columns({"ol_delivery_d": t}),
                           f"ol_delivery_d = {t}"))
        c = order["o_c_id"]
        cust = _one(txn.execute(select("customer", {"c_d_id": d, "c_id": c})), "customer")
        vals = {"c_balance": cust["c_balance"] + total, "c_delivery_cnt": cust["c_delivery_cnt"] + 1}
        txn.execute(update("customer", {"c_d_id": d, "c_id": c}, set_columns(vals),
                           ", ".join(f"{k} = {v}" for k, v in vals.items())))


def stock_level(txn: Any, rng: random.Random, customers: int, items: int) -> None:
    """2.8 (read-only): how many items of the district's last 20 orders are below a threshold."""
    d, threshold = rng.randint(1, DISTRICTS), rng.randint(10, 20)
    dist = _one(txn.execute(select("district", {"d_id": d})), "district")
    nxt = dist["d_next_o_id"]
    lines = txn.execute(select("order_line", {"ol_d_id": d, "ol_o_id": (nxt - 20, nxt - 1)}))
    ids = frozenset(lines["ol_i_id"].to_pylist())
    if ids:
        stock = txn.execute(select("stock", {"s_i_id": ids}))
        sum(1 for q in stock["s_quantity"].to_pylist() if q < threshold)


PROGRAMS: dict[str, Callable[[Any, random.Random, int, int], None]] = {
    "new_order": new_order, "payment": payment, "order_status": order_status, "delivery": delivery,
    "stock_level": stock_level,
}


def choose(rng: random.Random) -> str:
    """A transaction type with TPC-C's minimum mix (45/43/4/4/4)."""
    return rng.choices(TYPES, [MIX[t] for t in TYPES])[0]
