"""The list-append workload's operations on LakeVilla tables (pyarrow client path, no Spark).

A list-append table holds one row per key, ``k BIGINT, vals STRING`` (the list as space-separated
integers), each row in its own data file so that conflicts are per key. A transaction reads whole
lists and appends unique integers; what it observed is all a black-box checker may judge by.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lv_core.engine import arrow_ops as ops

__all__ = ["SCHEMA", "append", "create_list_table", "decode", "read_list", "read_lists_plain"]

SCHEMA = "k BIGINT, vals STRING"


def decode(text: str | None) -> tuple[int, ...]:
    """A stored list: space-separated integers ('' is the empty list)."""
    return tuple(int(x) for x in (text or "").split())


def create_list_table(lh: Any, table: str, keys: int) -> None:
    """Create ``table`` with ``keys`` empty lists, each row in its own data file (plain Delta commit)."""
    lh.create_table(table, SCHEMA)
    txn = lh.begin("delta")
    txn.execute(ops.append(table, pa.table({"k": pa.array(range(keys), pa.int64()),
                                            "vals": pa.array([""] * keys, pa.string())}), rows_per_file=1))
    txn.commit()


def read_list(txn: Any, table: str, key: int) -> tuple[int, ...]:
    """Read the whole list of ``table``/``key`` in ``txn`` (an exposed read: its value reaches the caller)."""
    got = txn.execute(ops.read(table, ops.eq("k", key), exposed=True))
    vals = got["vals"].to_pylist()
    if len(vals) > 1:  # two rows for one key: report it as one list the checker will refuse
        return tuple(x for v in vals for x in decode(v))
    return decode(vals[0]) if vals else ()


def _appended(elem: int) -> ops.Update:
    def f(rows: pa.Table) -> pa.Table:
        i = rows.schema.get_field_index("vals")
        joined = pc.binary_join_element_wise(rows["vals"], pa.scalar(str(elem)), " ")
        trimmed = pc.utf8_trim(joined, " ")
        return rows.set_column(i, "vals", trimmed)

    return f


def append(txn: Any, table: str, key: int, elem: int) -> int:
    """Append ``elem`` to the list of ``table``/``key`` in ``txn`` (read-modify-write of its row)."""
    return txn.execute(ops.update(table, ops.eq("k", key), _appended(elem),
                                  logical={"sql": f"UPDATE {table} SET vals = concat_ws(' ', vals, '{elem}') "
                                                  f"WHERE k = {key}"}))


def read_lists_plain(url: str, storage_options: dict[str, str] | None = None) -> dict[int, tuple[int, ...]]:
    """Every list of a table as a plain Delta reader (delta-rs) sees its latest version."""
    import deltalake

    t = deltalake.DeltaTable(url, storage_options=storage_options).to_pyarrow_table(columns=["k", "vals"])
    out: dict[int, tuple[int, ...]] = {}
    for k, v in zip(t["k"].to_pylist(), t["vals"].to_pylist(), strict=False):
        out[k] = out.get(k, ()) + decode(v) if k in out else decode(v)
    return out
