"""lv recover removes what dead transactions staged before any sublog entry named it (a kernel killed
mid-INSERT): Spark output under ``_lv_staging/part-<txn>-...`` and ``part-<txn>-...`` data files; never
files of live transactions nor files a version references."""

from __future__ import annotations

import calendar
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa

import lv_core
from lv_core.engine import arrow_ops as ops
from lv_core.protocol.layout import new_txn_id
from lv_core.protocol.lease import read_lease, write_lease
from tests.helpers.bank import committed_kv, make_kv

ROOT = Path(__file__).resolve().parents[2]

# Begins a transaction, writes a data file and Spark-like staging output from inside an operation,
# then SIGKILLs itself before the operation returns (so no sublog entry names the files).
_KILLED = textwrap.dedent("""
    import os, signal, sys
    import lv_core
    from lv_core.txn.ops import Operation, OpResult
    lh = lv_core.connect(sys.argv[1], lease_s=0.5)
    txn = lh.begin("repeatable_read")
    def run(ctx):
        rel = ctx.new_path("kv")
        ctx.store.put(f"kv/{rel}", b"PAR1 half written")
        stage = f"kv/_lv_staging/part-{ctx.txn_id}-{ctx.step:04d}-{ctx.attempt}-s0badf00d"
        ctx.store.put(stage + "/part-00000.snappy.parquet", b"x" * 1000)
        ctx.store.put(stage + "/.part-00000.snappy.parquet.crc", b"c")
        print(txn.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    txn.execute(Operation("insert", ("kv",), run, blind=True))
""")


def _wait_until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _id_time(txn: str) -> float:
    """The begin time a transaction id starts with (second resolution: the end of that second)."""
    return calendar.timegm(time.strptime(txn.split("-", 1)[0], "%Y%m%dT%H%M%S")) + 1.0


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def test_recover_removes_files_staged_by_a_killed_kernel_only(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    lh = lv_core.connect(str(wh), lease_s=0.5)
    make_kv(lh, "kv", {1: 1.0, 2: 2.0})
    root = wh / "kv"
    committed = _files(root)
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(wh)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    dead = proc.stdout.strip()
    staged = _files(root) - committed
    assert len(staged) == 3 and all(dead in f for f in staged)

    # A live transaction's staging output and staged file (its lease is renewed while it runs).
    live = lh.begin("repeatable_read")
    live.execute(ops.append("kv", pa.table({"id": pa.array([7], pa.int64()), "val": pa.array([7.0])})))
    (root / "_lv_staging" / f"part-{live.id}-0009-0-s1").mkdir(parents=True)
    (root / "_lv_staging" / f"part-{live.id}-0009-0-s1" / "part-0.parquet").write_bytes(b"x")
    # A transaction long gone (no lease at all, old id) left a file; one that just began has no lease yet.
    old = "20200101T000000-0123456789abcdef"
    (root / f"part-{old}-0001-0-001.parquet").write_bytes(b"x")
    # A dead transaction whose lease ran out long ago.
    gone = "20240101T000000-fedcba9876543210"
    write_lease(lh.store, gone, -100.0)
    (root / "_lv_staging" / f"part-{gone}-0001-0-s2" / "x").mkdir(parents=True)
    (root / "_lv_staging" / f"part-{gone}-0001-0-s2" / "x" / "p.parquet").write_bytes(b"x")
    # wait (on the stored lease, or, as it died before its first renewal, on the begin time its id holds,
    # not a fixed time) until the killed transaction's lease and the grace ran out
    _wait_until(lambda: max((read_lease(lh.store, dead) or {"expires": 0.0})["expires"], _id_time(dead)) + 0.5
                < time.time())
    fresh = new_txn_id()
    (root / f"part-{fresh}-0001-0-001.parquet").write_bytes(b"x")
    before = _files(root)
    rep = lh.recover(lease_grace_s=0.5)
    deleted = {k[len("kv/"):] for k in rep.deleted_files}
    assert staged <= deleted
    assert f"part-{old}-0001-0-001.parquet" in deleted
    assert f"_lv_staging/part-{gone}-0001-0-s2/x/p.parquet" in deleted
    assert _files(root) == before - deleted
    left = _files(root)
    assert committed <= left  # what versions reference stays
    assert f"part-{fresh}-0001-0-001.parquet" in left  # may be a transaction about to write its lease
    assert f"_lv_staging/part-{live.id}-0009-0-s1/part-0.parquet" in left
    assert sum(live.id in f for f in left) == 2
    live.commit()
    assert committed_kv(lh, "kv") == {1: 1.0, 2: 2.0, 7: 7.0}
    # finished (no lease) and, by the begin time in their ids, older than the grace: the debris goes
    _wait_until(lambda: all(_id_time(x) + 0.5 < time.time() for x in (live.id, fresh)))
    again = lh.recover(lease_grace_s=0.5).deleted_files
    assert set(again) == {f"kv/_lv_staging/part-{live.id}-0009-0-s1/part-0.parquet",
                          f"kv/part-{fresh}-0001-0-001.parquet"}  # now old enough and still without lease
    assert committed_kv(lh, "kv") == {1: 1.0, 2: 2.0, 7: 7.0}
