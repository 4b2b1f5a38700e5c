"""The TPC-C consistency check (benchmarks/tpcc_check.py) on real Delta tables: the loaded population
and a run of every transaction type keep every condition; each kind of damage a concurrent run can do
(a lost update, a half-committed New-Order, a doubled order id) breaks the conditions it should."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.tpcc_check import check, failed, read_tables  # noqa: E402
from benchmarks.tpcc_ops import insert, select, set_columns, update  # noqa: E402
from benchmarks.tpcc_txns import PROGRAMS, load, rows_table  # noqa: E402
from lv_core import Lakehouse  # noqa: E402
from lv_core.storage.local import LocalStore  # noqa: E402

CUSTOMERS, ITEMS = 6, 20


@pytest.fixture()
def loaded(tmp_path: Path) -> Any:
    lh = Lakehouse(LocalStore(str(tmp_path)))
    load(lh, CUSTOMERS, ITEMS, seed=1)
    yield lh, str(tmp_path)
    lh.close()


def _conditions(location: str) -> list[str]:
    return failed(check(read_tables(location)))


def test_population_and_every_transaction_type_keep_the_conditions(loaded: Any) -> None:
    lh, loc = loaded
    assert _conditions(loc) == []
    rng = random.Random(3)
    for kind in ("new_order", "payment", "delivery", "order_status", "stock_level", "new_order", "delivery"):
        txn = lh.begin("serializable")
        PROGRAMS[kind](txn, rng, CUSTOMERS, ITEMS)
        txn.commit()
    assert _conditions(loc) == []


def test_lost_warehouse_update_breaks_conditions_1_and_8(loaded: Any) -> None:
    lh, loc = loaded
    txn = lh.begin("delta")
    txn.execute(update("warehouse", {"w_id": 1}, set_columns({"w_ytd": 1}), "w_ytd = 1"))
    txn.commit()
    assert _conditions(loc) == ["1", "8"]


def test_half_committed_new_order_and_doubled_order_id(loaded: Any) -> None:
    lh, loc = loaded
    txn = lh.begin("delta")  # an order row without its lines and its NEW-ORDER row, reusing id 1
    d = txn.execute(select("district", {"d_id": 2})).to_pylist()[0]
    txn.execute(insert("orders", rows_table([{"o_id": 1, "o_d_id": 2, "o_w_id": 1, "o_c_id": 1, "o_entry_d": 0,
                                         "o_carrier_id": None, "o_ol_cnt": 5, "o_all_local": 1}], "orders")))
    txn.commit()
    got = _conditions(loc)
    assert {"4", "5", "6", "keys"} <= set(got), got
    assert d["d_next_o_id"] == CUSTOMERS + 1


def test_statements_read_only_the_files_their_where_may_match(tmp_path: Path) -> None:
    """tpcc_ops' statements are arrow_ops' own with a file filter: an UPDATE of a key reads and rewrites
    only the data file whose statistics may hold it, and declares that filter as its predicate read
    (so a concurrent statement on another file's keys does not conflict)."""
    import pyarrow as pa

    lh = Lakehouse(LocalStore(str(tmp_path)))
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.int64())])
    lh.create_table("t", schema)
    for keys in ((1, 2), (10, 11)):  # two files with disjoint key ranges
        txn = lh.begin("delta")
        txn.execute(insert("t", pa.table({"k": list(keys), "v": [0, 0]}, schema=schema)))
        txn.commit()
    files = lh.snapshot("t").files
    results: list[Any] = []
    op = update("t", {"k": 10}, set_columns({"v": 7}), "v = 7")
    run = op.run
    op.run = lambda ctx: results.append(run(ctx)) or results[-1]
    txn = lh.begin("serializable")
    assert txn.execute(op) == 1
    txn.commit()
    res = results[-1]
    assert len(res.reads["t"]) == 1 and len(res.removes["t"]) == 1
    read = next(iter(res.reads["t"]))
    assert read in files and res.may_match["t"] is not None
    lh.close()
