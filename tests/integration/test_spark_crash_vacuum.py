"""Spark tier, issue 20 item 3: a kernel SIGKILLed in the middle of a Spark INSERT leaves staged files
that ``lv recover`` removes once its lease ran out; VACUUM after Spark UPDATE/DELETE/OPTIMIZE on a
partitioned table keeps every file a reader at a retained version needs (read back with delta-rs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import deltalake
import pytest

import lv_core
from lv_core.engine.session import local_server
from lv_core.protocol.lease import read_lease
from lv_core.txn.cleaner import drain

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

# A second client of the test's Spark server: begins an INSERT ... SELECT writing 8 partitions and
# SIGKILLs itself after Spark wrote the files where they stay, before its marker claims the table (a
# first write under LV[I] claims it after staging; no sublog entry names the files).
_KILLED = textwrap.dedent("""
    import os, signal, sys
    import lv_core
    from lv_core.storage.local import LocalStore

    class KillOnClaim(LocalStore):
        def put(self, key, data, **kw):
            if "/sublog/" in key or "_lakevilla/markers/" in key:
                os.kill(os.getpid(), signal.SIGKILL)
            return super().put(key, data, **kw)

    lh = lv_core.Lakehouse(KillOnClaim(sys.argv[1]), spark=sys.argv[2], lease_s=1.0)
    txn = lh.begin("serializable")
    print(txn.id, flush=True)
    txn.sql("INSERT INTO t SELECT id + 100, CAST(id % 8 AS INT) FROM range(80)")
""")


def _files(root: Path) -> set[str]:
    drain(60.0)  # staged files of finished transactions are deleted in the background
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _rows(url: str, version: int | None = None) -> list[tuple]:
    t = deltalake.DeltaTable(url, version=version).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["p"].to_pylist(), strict=True))


def test_recover_removes_what_a_sigkilled_spark_insert_staged(spark: Any, tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    lh = lv_core.connect(str(wh), lease_s=1.0)
    lh.sql("CREATE TABLE t (id BIGINT, p INT) PARTITIONED BY (p)")
    lh.sql("INSERT INTO t SELECT id, CAST(id % 8 AS INT) FROM range(16)")
    root = wh / "t"
    committed, rows = _files(root), _rows(lh.store.url("t"))
    server = local_server()
    assert server is not None
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(wh), server.url], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    killed_at = time.time()
    assert proc.returncode == -9, proc.stderr[-3000:]
    dead = proc.stdout.strip()
    staged = _files(root) - committed
    assert sum(f.endswith(".parquet") for f in staged) >= 8  # one file per partition value at least
    assert all(f.startswith(f"part-{dead}-") for f in staged)  # in the write's folder, named after it

    # Wall-clock time must pass: the lease (1 s, if one was written) and the grace (1 s); without a
    # lease, the transaction id (whole seconds) must be older than the lease period plus the grace.
    lease = read_lease(lh.store, dead)
    deadline = max(killed_at + 1.0, lease["expires"] if lease else 0.0) + 1.0
    while time.time() <= deadline:
        time.sleep(0.1)
    rep = lh.recover(lease_grace_s=1.0)
    assert {k[len("t/"):] for k in rep.deleted_files} == staged
    assert _files(root) == committed
    assert _rows(lh.store.url("t")) == rows
    lh.sql("INSERT INTO t VALUES (999, 1)")  # the table works on: the dead transaction's marker is freed
    assert _rows(lh.store.url("t")) == sorted([*rows, (999, 1)])
    lh.close()


def test_vacuum_keeps_every_file_a_retained_version_needs(spark: Any, tmp_path: Path) -> None:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.sql("CREATE TABLE t (id BIGINT, p INT) PARTITIONED BY (p)")
    for i in range(4):
        lh.sql(f"INSERT INTO t SELECT id + {100 * i}, CAST(id % 4 AS INT) FROM range(8)")
    lh.sql("UPDATE t SET id = id + 1000 WHERE p = 1")
    lh.sql("DELETE FROM t WHERE p = 2 AND id < 100")
    lh.sql("OPTIMIZE t")
    lh.sql("DELETE FROM t WHERE id = 3")
    url = lh.store.url("t")
    latest = lh.version("t")
    rows = {v: _rows(url, v) for v in range(latest + 1)}
    files = {v: {u.removeprefix("file://") for u in deltalake.DeltaTable(url, version=v).file_uris()}
             for v in range(latest + 1)}
    root = tmp_path / "wh" / "t"
    # Versions 0..6 (after the UPDATE and the first DELETE) are "old": their commit files and the data
    # files only they reference age by a day; version 6 is what a reader saw at the retention cutoff.
    cutoff = time.time() - 86400.0
    for v in range(7):
        os.utime(root / "_delta_log" / f"{v:020d}.json", (cutoff, cutoff))
    for p in root.rglob("*.parquet"):
        if "_delta_log" not in p.parts and str(p) not in set().union(*(files[v] for v in range(7, latest + 1))):
            os.utime(p, (cutoff, cutoff))
    rep = lh.vacuum("t", 1, enforce_retention=False)
    assert rep.deleted, "something old must go"
    kept_from = rep.oldest_retained_version
    assert kept_from == 6
    for v in range(kept_from, latest + 1):  # every retained version reads in full, with the same rows
        assert _rows(url, v) == rows[v], v
        assert all(Path(f).exists() for f in files[v])
    deleted = {str(root / k) for k in rep.deleted}
    assert not deleted & set().union(*(files[v] for v in range(kept_from, latest + 1)))
    assert deleted == set().union(*files.values()) - set().union(*(files[v] for v in range(kept_from, latest + 1)))
    lh.close()
