"""lv_core.connect and the Lakehouse's metadata API: no Spark needed, foreign tables listed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import pandas as pd
import pyarrow as pa
import pytest

import lv_core
from lv_core.errors import ConfigError, InvalidTableName, SchemaError, TableExists, TableNotFound
from lv_core.storage.local import LocalStore

ROOT = Path(__file__).resolve().parents[2]


def test_connect_forms(tmp_path, monkeypatch):
    a = lv_core.connect(str(tmp_path / "a"))
    b = lv_core.connect((tmp_path / "b").as_uri())
    assert isinstance(a.store, LocalStore) and a.url == (tmp_path / "a").as_uri()
    assert b.url == (tmp_path / "b").as_uri()
    monkeypatch.setenv("LV_WAREHOUSE", str(tmp_path / "env"))
    assert lv_core.connect().url == (tmp_path / "env").as_uri()
    monkeypatch.delenv("LV_WAREHOUSE")
    monkeypatch.chdir(tmp_path)
    assert lv_core.connect().url == (tmp_path / "lakehouse").as_uri()


@pytest.mark.parametrize("bad", ["ftp://x/y", "s3://", "file://otherhost/x"])
def test_connect_rejects_bad_uris(bad):
    with pytest.raises(ConfigError):
        lv_core.connect(bad)


def test_create_list_version(tmp_path):
    lh = lv_core.connect(str(tmp_path))
    lh.create_table("bank_x", "id BIGINT, balance DOUBLE")
    lh.create_table("bank_y", pa.schema([("id", pa.int64()), ("balance", pa.float64())]), partition_by=["id"])
    deltalake.write_deltalake(str(tmp_path / "foreign"), pd.DataFrame({"a": [1, 2]}))
    assert lh.list_tables() == ["bank_x", "bank_y", "foreign"]
    assert lh.version("bank_x") == 0 and lh.version("foreign") == 0
    dt = deltalake.DeltaTable(str(tmp_path / "bank_x"))
    assert dt.version() == 0 and [f.name for f in dt.schema().fields] == ["id", "balance"]
    assert deltalake.DeltaTable(str(tmp_path / "bank_y")).metadata().partition_columns == ["id"]
    with pytest.raises(TableExists):
        lh.create_table("bank_x", "id BIGINT")
    assert lh.create_table("bank_x", "id BIGINT", if_not_exists=True) is None
    with pytest.raises(TableNotFound, match="nope"):
        lh.version("nope")


@pytest.mark.parametrize("name", ["", "a/b", "..", "../x", "_lakevilla", ".hidden", "x" * 300, "tab\x01"])
def test_bad_table_names_change_nothing(tmp_path, name):
    lh = lv_core.connect(str(tmp_path))
    with pytest.raises(InvalidTableName):
        lh.create_table(name, "id BIGINT")
    assert list(lh.store.list("")) == []


@pytest.mark.parametrize("ddl", ["", "id", "id BIGINTEGER", "id BIGINT,", "id DECIMAL(3", "a INT, a INT"])
def test_bad_schemas_change_nothing(tmp_path, ddl):
    lh = lv_core.connect(str(tmp_path))
    with pytest.raises(SchemaError):
        lh.create_table("t", ddl)
    assert lh.list_tables() == []


def test_metadata_work_never_starts_spark(tmp_path):
    code = (
        "import sys, lv_core\n"
        f"lh = lv_core.connect({str(tmp_path)!r})\n"
        "lh.create_table('t', 'id BIGINT'); lh.list_tables(); lh.version('t')\n"
        "assert not [m for m in sys.modules if m.startswith('pyspark')], 'pyspark was imported'\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_presets_and_options_are_validated(tmp_path):
    lh = lv_core.connect(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown preset"):
        lh.begin("serialisable")
    with pytest.raises(ConfigError, match="unknown feature"):
        lh.begin(features={"R", "X"})
    with pytest.raises(ConfigError, match="slack"):
        lh.begin(slack=-1)
    with pytest.raises(ConfigError, match="timeout"):
        lh.begin(timeout_s=0)
    txn = lh.begin(features="R")
    assert txn.features == frozenset({"R"})
    txn.rollback()


def test_scan_markers_log_and_recover(tmp_path):
    from lv_core.protocol import layout
    from lv_core.protocol.lease import keeper
    from tests.helpers.bank import add_kv, make_kv

    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=0.3)
    make_kv(lh, "kv", {1: 1.0})
    make_kv(lh, "other", {1: 1.0})
    txn = lh.begin("repeatable_read", timeout_s=5)
    add_kv(txn, "kv", 1, 1)
    v = txn.marker_versions()["kv"]
    [kv, other] = lh.scan_markers()
    assert (kv.table, kv.version, kv.errors) == ("kv", v, []) and other.markers == []
    [m] = kv.markers
    assert (m.table, m.version, m.txn, m.state) == ("kv", v, txn.id, "live") and m.expires_in(0) > 0
    assert [tm.table for tm in lh.scan_markers("kv")] == ["kv"]
    with pytest.raises(TableNotFound):
        lh.scan_markers(["nope"])
    entries = lh.log("kv")
    assert [e.version for e in entries] == list(range(v + 1)) and entries[-1].kind == "marker"
    assert entries[-1].txn == txn.id and [e.version for e in lh.log("kv", limit=1)] == [v]
    keeper().pause(txn.id)  # the client hangs: its lease runs out
    time.sleep(0.5)
    [m] = lh.scan_markers("kv")[0].markers
    assert m.state == "expired"
    rep = lh.recover(lease_grace_s=0)
    assert rep.freed == [("kv", v, txn.id)] and list(lh.store.list(layout.txn_prefix(txn.id))) == []
    assert lh.scan_markers("kv")[0].markers == [] and lh.log("kv")[-1].kind == "freed"


def test_a_commit_caches_its_snapshot_and_replays_it_when_first_read(tmp_path):
    """after_commit notes the snapshot a commit makes without replaying it (the commit does not copy the
    table's file list); the first read replays it, from the cache (no request); one that cannot be
    replayed is dropped and the next read goes to the log."""
    from lv_core.delta.actions import AddFile
    from lv_core.engine import arrow_ops as aops
    from lv_core.protocol.tablelog import LaterSnapshot
    from lv_core.storage.instrumented import InstrumentedStore

    store = InstrumentedStore(LocalStore(str(tmp_path)))
    lh = lv_core.Lakehouse(store)
    lh.create_table("t", "id BIGINT")
    with lh.transaction("repeatable_read") as txn:
        txn.execute(aops.append("t", pa.table({"id": pa.array([1], pa.int64())})))
    base = lh.logs.latest_snapshot("t")
    lh.logs.note_committed("t", LaterSnapshot(base, base.version + 1, [AddFile("x.parquet", {}, 1, 0)]))
    store.reset()
    snap, pending = lh.logs.resolved_view("t", base.version + 1)  # version base + 1 is not in the log
    assert (snap.version, pending, sum(store.counts().values())) == (base.version + 1, {}, 0)
    assert set(snap.files) == set(base.files) | {"x.parquet"}
    lh.logs.note_committed("t", LaterSnapshot(base, base.version + 5, []))  # not contiguous: replay fails
    assert "t" not in lh.logs.resolved_tables()
    again, _ = lh.logs.resolved_view("t", base.version)
    assert (again.version, set(again.files)) == (base.version, set(base.files))
    lh.close()
