"""Spark tier, issue 17 item 4: column-mapped tables (modes ``name`` and ``id``) on both data paths.

Fixtures (:mod:`tests.helpers.colmap_fixtures`) store columns under physical names that would give wrong
rows if read by logical name (logical ``amount`` is stored as ``price``; logical ``price`` as ``col-...``;
struct field ``b`` as ``b_old``), one table per mode unpartitioned and partitioned by a mapped column.
LakeVilla reads every version as delta-rs does, then inserts, updates and deletes (Python API and SQL);
after each commit delta-rs reads exactly LakeVilla's rows, the new files use the physical names (Parquet
field ids in ``id`` mode), and their partition values and stats are keyed by physical name.

delta-rs is read through its DataFusion provider: ``DeltaTable.to_pyarrow_table()`` (deltalake 1.6)
ignores column mapping and reads Parquet columns by logical name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lv_core
from lv_core.engine import api
from tests.helpers.colmap_fixtures import FIELD_ID, ColmapTable, build_colmap_table, row

pytestmark = pytest.mark.spark

TABLE = "cm"


def delta_rs_rows(root: Path, version: int | None = None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(str(root), version=version)
    return pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t ORDER BY id").read_all()).to_pylist()


def lv_rows(lh: lv_core.Lakehouse, version: int | None = None) -> list[dict[str, Any]]:
    return sorted((r.asDict(recursive=True) for r in lh.read(TABLE, version).collect()), key=lambda r: r["id"])


def new_adds(root: Path, version: int) -> list[dict[str, Any]]:
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(x)["add"] for x in lines if x.strip() and "add" in json.loads(x)]


def check_files(fx: ColmapTable, version: int) -> int:
    """The files added by ``version`` use physical names (and field ids in id mode); returns how many."""
    phys = fx.physical
    data_cols = [c for c in fx.columns if c.name not in fx.partition_by]
    adds = new_adds(fx.root, version)
    for a in adds:
        schema = pq.read_schema(fx.root / a["path"])
        assert schema.names == [c.physical for c in data_cols], a["path"]
        assert [f.name for f in schema.field(phys["s"]).type] == [k.physical for k in fx.column("s").children]
        if fx.mode == "id":
            assert [int(f.metadata[FIELD_ID]) for f in schema] == [c.id for c in data_cols]
            assert [int(f.metadata[FIELD_ID]) for f in schema.field(phys["s"]).type] == [5, 6]
        assert set(a["partitionValues"]) == {phys[p] for p in fx.partition_by}
        stats = json.loads(a["stats"])
        assert set(stats["nullCount"]) == {c.physical for c in data_cols}
        assert phys["id"] in stats["minValues"] and "id" not in stats["minValues"]
    return len(adds)


@pytest.fixture(params=["direct", "arrow"])
def data_path(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("mode, partitioned", [("name", False), ("name", True), ("id", False), ("id", True)],
                         ids=["name", "name-partitioned", "id", "id-partitioned"])
def test_column_mapped_table_reads_and_writes_like_delta(spark: Any, tmp_path: Path, data_path: str, mode: str,
                                                         partitioned: bool) -> None:
    fx = build_colmap_table(tmp_path / "wh" / TABLE, mode, partitioned=partitioned)
    for v, rows in fx.rows.items():
        assert delta_rs_rows(fx.root, v) == rows  # the fixture is a valid column-mapped table
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)
    try:
        for v, rows in fx.rows.items():
            assert lv_rows(lh, v) == rows
            assert lh.read(TABLE, v).columns == [c.name for c in fx.columns]
        want = fx.rows[max(fx.rows)]
        version = max(fx.rows)

        scans = api.engine(lh).scans

        def step(run: Any, change: Any) -> list[int]:  # -> how many files each scan of the transaction read
            nonlocal want, version
            scans.clear()
            txn = lh.begin()
            run(txn)
            txn.commit()
            ran = [len(files) for _t, files in scans]
            version += 1
            want = sorted(change(want), key=lambda r: r["id"])
            assert lv_rows(lh) == want
            assert delta_rs_rows(fx.root) == want  # another reader sees the same table
            assert check_files(fx, version) >= 1
            return ran

        def shape(r: dict[str, Any]) -> dict[str, Any]:
            return r if partitioned else {k: v for k, v in r.items() if k != "p"}

        # INSERT: Python rows and SQL (a struct, a partition value, a null partition)
        new = [shape(row(20, "z")), shape(row(21, None)), shape(row(22, "x"))]
        step(lambda t: (t.insert(TABLE, new[:2]),
                        t.sql(f"INSERT INTO {TABLE} ({', '.join(new[2])}) VALUES (22, 33.0, 'p22', "
                              "named_struct('a', 220, 'b', 'b22')" + (", 'x')" if partitioned else ")"))),
             lambda rs: rs + new)
        # UPDATE (copy-on-write): by the API and by SQL, touching renamed, struct and partition columns

        def upd(r: dict[str, Any]) -> dict[str, Any]:
            if r["id"] in (1, 20):
                r = {**r, "amount": r["amount"] * 2, "price": r["price"] + "!"}
            if r["id"] == 2:
                r = {**r, "s": {"a": r["s"]["a"] + 1, "b": "B"}, **({"p": "moved"} if partitioned else {})}
            return r

        ran = step(lambda t: (t.update(TABLE, {"amount": "amount * 2", "price": "price || '!'"}, "id IN (1, 20)"),
                              t.sql(f"UPDATE {TABLE} SET s = named_struct('a', s.a + 1, 'b', 'B')"
                                    + (", p = 'moved'" if partitioned else "") + " WHERE id = 2")),
                   lambda rs: [upd(r) for r in rs])
        assert ran[0] == 2  # data skipping on physical stats: `id IN (1, 20)` read the two files holding them
        # DELETE: by the API (stats on a renamed column) and by SQL (on the column stored as col-...)
        # (`price` is stored under a col-... name and `amount` under "price": stats must be read by physical name)
        ran = step(lambda t: (t.delete(TABLE, "amount > 13 AND price = 'p9'"),  # id 9 only
                              t.sql(f"DELETE FROM {TABLE} WHERE price = 'p3'")),
                   lambda rs: [r for r in rs if r["id"] not in (9, 3)])
        assert ran[0] == 1  # the API delete read only the file holding id 9 (the others' price stats exclude 'p9')
    finally:
        lh.close()
