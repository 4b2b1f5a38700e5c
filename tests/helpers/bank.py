"""Small helpers shared by protocol tests: a key/value table with one row per data file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import lv_core
from lv_core.engine import arrow_ops as ops

SCHEMA = "id BIGINT, val DOUBLE"


def make_kv(lh: lv_core.Lakehouse, table: str, rows: dict[int, float], properties: dict | None = None) -> None:
    """Create ``table`` (with Delta table ``properties``) and append each row in its own file
    (file-granular conflicts per row)."""
    lh.create_table(table, SCHEMA, properties=properties)
    txn = lh.begin("delta")
    for k, v in rows.items():
        txn.execute(ops.append(table, pa.table({"id": pa.array([k], pa.int64()), "val": pa.array([v], pa.float64())})))
    txn.commit()


def read_kv(txn: lv_core.Transaction, table: str, key: int | None = None, *, exposed: bool = True) -> dict[int, float]:
    where = None if key is None else ops.eq("id", key)
    t = txn.execute(ops.read(table, where, exposed=exposed))
    return dict(zip(t["id"].to_pylist(), t["val"].to_pylist(), strict=False))


def write_kv(txn: lv_core.Transaction, table: str, key: int, value: float) -> int:
    return txn.execute(ops.update(table, ops.eq("id", key), ops.set_value("val", value),
                                  logical={"sql": f"UPDATE {table} SET val = {value} WHERE id = {key}"}))


def add_kv(txn: lv_core.Transaction, table: str, key: int, delta: float) -> int:
    return txn.execute(ops.update(table, ops.eq("id", key), ops.add_to("val", delta),
                                  logical={"sql": f"UPDATE {table} SET val = val + {delta} WHERE id = {key}"}))


def committed_kv(lh: lv_core.Lakehouse, table: str) -> dict[int, float]:
    """The latest committed state, read through a fresh plain-Delta reader (delta-rs)."""
    import deltalake

    t = deltalake.DeltaTable(lh.store.url(table)).to_pyarrow_table()
    return dict(zip(t["id"].to_pylist(), t["val"].to_pylist(), strict=False))


def total(t: pa.Table) -> float:
    return pc.sum(t["val"]).as_py() or 0.0


def logged_xy(path: str, x: dict[int, float]) -> lv_core.Lakehouse:
    """A warehouse at ``path`` with kv tables ``x`` (``x``'s rows) and ``y`` ({1: 100.0}), both already in the
    global version log (a serializable transaction wrote them), lease 5 s."""
    lh = lv_core.connect(path, lease_s=5.0)
    make_kv(lh, "x", x)
    make_kv(lh, "y", {1: 100.0})
    w = lh.begin("serializable")
    add_kv(w, "x", 1, 0)
    add_kv(w, "y", 1, 0)
    w.commit()
    return lh
