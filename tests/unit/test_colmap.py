"""Column mapping (issue 17 item 4): logical <-> physical names, on hand-built column-mapped tables.

Fixtures: :mod:`tests.helpers.colmap_fixtures` (pyarrow files with physical names, hand-written logs). The
independent reader is delta-rs through its DataFusion provider (``QueryBuilder``): its
``to_pyarrow_table()`` does not apply column mapping (it reads Parquet columns by logical name).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lv_core.delta import DeltaLog, commit
from lv_core.delta.actions import CommitInfo
from lv_core.delta.colmap import ColumnMapping, column_mapping, mapping_mode
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.writer import write_data_files
from lv_core.engine.arrow_io import read_data_files
from lv_core.engine.skipping import file_filter
from lv_core.errors import LvError, UnsupportedFeature
from lv_core.storage.local import LocalStore
from tests.helpers.colmap_fixtures import FIELD_ID, ColmapTable, build_colmap_table, row

TABLE = "cm"


def delta_rs_rows(root: Path, version: int | None = None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(str(root), version=version)
    return pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t ORDER BY id").read_all()).to_pylist()


@pytest.fixture(params=[("name", False), ("name", True), ("id", False), ("id", True)],
                ids=["name", "name-partitioned", "id", "id-partitioned"])
def fx(request: pytest.FixtureRequest, tmp_path: Path) -> ColmapTable:
    mode, partitioned = request.param
    t = build_colmap_table(tmp_path / TABLE, mode, partitioned=partitioned)
    for v, want in t.rows.items():
        assert delta_rs_rows(t.root, v) == want  # the fixture is a valid column-mapped table
    return t


def lv_rows(store: LocalStore, version: int | None = None) -> list[dict[str, Any]]:
    snap = DeltaLog(store, TABLE).snapshot(version)
    data = read_data_files(store, TABLE, snap.files.values(), snap.schema, snap.partition_columns,
                           column_mapping(snap))
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def test_mapping_of_a_fixture(fx: ColmapTable) -> None:
    snap = DeltaLog(LocalStore(fx.root.parent), TABLE).snapshot()
    cm = column_mapping(snap)
    assert cm.active and cm.mode == fx.mode
    assert dict(cm.names) == fx.physical
    assert cm.physical_name("AMOUNT") == "price"  # case-insensitive, like Spark
    s = cm.physical.field(fx.physical["s"])
    assert [f.name for f in s.type.fields] == [k.physical for k in fx.column("s").children]  # type: ignore[union-attr]
    assert cm.physical_partition_columns == tuple(fx.physical[p] for p in fx.partition_by)
    arrow = cm.physical_arrow
    assert arrow.names == [fx.physical[c.name] for c in fx.columns]
    if fx.mode == "id":
        assert [int(f.metadata[FIELD_ID]) for f in arrow] == [c.id for c in fx.columns]
        assert [int(f.metadata[FIELD_ID]) for f in arrow.field(fx.physical["s"]).type] == [5, 6]
    else:
        assert all(not f.metadata for f in arrow)


def test_arrow_round_trip_keeps_values_and_nulls() -> None:
    schema = DeltaSchema.from_json({"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "c1"}},
        {"name": "st", "type": {"type": "struct", "fields": [
            {"name": "y", "type": "string", "nullable": True,
             "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "c3"}}]},
         "nullable": True, "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "c2"}},
        {"name": "l", "type": {"type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
            {"name": "z", "type": "integer", "nullable": True,
             "metadata": {"delta.columnMapping.id": 5, "delta.columnMapping.physicalName": "c5"}}]}},
         "nullable": True, "metadata": {"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "c4"}},
    ]})
    cm = ColumnMapping("id", schema)
    data = pa.Table.from_pylist([{"x": 1, "st": {"y": "a"}, "l": [{"z": 1}, None]}, {"x": None, "st": None, "l": None}],
                                schema=cm.logical_arrow)
    phys = cm.to_physical(data)
    assert phys.column_names == ["c1", "c2", "c4"]
    assert phys.schema.field("c2").type.field(0).name == "c3"
    assert phys.schema.field("c4").type.value_type.field(0).name == "c5"
    assert int(phys.schema.field("c4").type.value_type.field(0).metadata[FIELD_ID]) == 5
    assert phys.to_pylist() == [{"c1": 1, "c2": {"c3": "a"}, "c4": [{"c5": 1}, None]},
                                {"c1": None, "c2": None, "c4": None}]
    assert cm.to_logical(phys).to_pylist() == data.to_pylist()
    assert cm.to_logical(phys, ["l", "x"]).column_names == ["l", "x"]
    assert ColumnMapping("none", schema).to_physical(data) is data


def test_bad_mapping_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedFeature, match="unknown column mapping mode 'position'"):
        mapping_mode({"delta.columnMapping.mode": "Position"})
    assert mapping_mode({}) == "none" and mapping_mode({"delta.columnMapping.mode": "ID"}) == "id"
    no_name = DeltaSchema.from_json({"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {"delta.columnMapping.id": 1}}]})
    with pytest.raises(LvError, match="'x' has no delta.columnMapping.physicalName"):
        _ = ColumnMapping("name", no_name).physical
    no_id = DeltaSchema.from_json({"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "c"}}]})
    assert ColumnMapping("name", no_id).names == {"x": "c"}
    with pytest.raises(LvError, match="'x' has no delta.columnMapping.id"):
        _ = ColumnMapping("id", no_id).physical


def test_arrow_path_reads_every_version(fx: ColmapTable) -> None:
    store = LocalStore(fx.root.parent)
    for v, want in fx.rows.items():
        assert lv_rows(store, v) == want


def test_arrow_writes_use_physical_names(fx: ColmapTable) -> None:
    store = LocalStore(fx.root.parent)
    log = DeltaLog(store, TABLE)
    snap = log.snapshot()
    new = [row(20, "z"), row(21, None)]
    if not fx.partition_by:
        new = [{k: v for k, v in r.items() if k != "p"} for r in new]
    adds = write_data_files(store, TABLE, snap, pa.Table.from_pylist(new))
    commit(store, TABLE, snap.version + 1, [CommitInfo.create("WRITE", {}), *adds])
    assert delta_rs_rows(fx.root) == fx.rows[snap.version] + new
    assert lv_rows(store) == fx.rows[snap.version] + new
    phys = fx.physical
    data_cols = [c for c in fx.columns if c.name not in fx.partition_by]
    for a in adds:
        schema = pq.read_schema(fx.root / a.path)
        assert schema.names == [c.physical for c in data_cols]
        assert schema.field(phys["s"]).type.field(1).name == "b_old"
        if fx.mode == "id":
            assert [int(f.metadata[FIELD_ID]) for f in schema] == [c.id for c in data_cols]
        assert set(a.partition_values) == {phys[p] for p in fx.partition_by}
        stats = json.loads(a.stats or "{}")
        assert set(stats["nullCount"]) == {c.physical for c in data_cols}
        assert stats["minValues"][phys["amount"]] in (30.0, 31.5)
        if fx.partition_by:
            assert a.path.startswith(f"{phys['p']}=")  # the folder names the physical column too


def test_skipping_reads_stats_and_partition_values_by_physical_name(fx: ColmapTable) -> None:
    snap = DeltaLog(LocalStore(fx.root.parent), TABLE).snapshot(1)
    cm = column_mapping(snap)
    files = sorted(snap.files.values(), key=lambda f: json.loads(f.stats or "{}")["minValues"][fx.physical["id"]])

    def kept(where: str) -> list[bool]:
        ff = file_filter(where, snap.schema, snap.partition_columns, cm.names)
        return [ff(f) for f in files]

    assert kept("id = 5") == [False, True, False]
    assert kept("amount > 12") == [False, False, True]
    assert kept("id > 100") == [False, False, False]
    if fx.partition_by:
        assert kept("p = 'x'") == [True, False, False]
        assert kept("p IS NULL") == [False, False, True]
