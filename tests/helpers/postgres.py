"""Run the Hermitage schedules of tests/reliability/anomalies.py on a real PostgreSQL server.

:func:`cluster` starts a throw-away PostgreSQL cluster (``initdb`` + ``pg_ctl``) in a temporary
folder on a free loopback port (as the ``postgres`` or ``nobody`` user when running as root: the
server refuses root) and stops it afterwards. :func:`run_schedule` runs one schedule there, every
transaction on its own connection at ``ISOLATION LEVEL SERIALIZABLE``, with the same ops translated
to SQL (the single-table form uses table ``t``, the multi-table form ``a``/``b``/``c``).

Steps run in schedule order as in Hermitage: a statement that has not returned after ``block_s``
counts as blocked, the schedule goes on, and the transaction's later steps queue behind it. A
serialization failure (SQLSTATE 40001) or deadlock (40P01) aborts the transaction; its later steps
do not run. The outcome per transaction ("committed", "aborted", "rollback") is what the anomaly
matrix compares LakeVilla's aborts with.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tests.helpers import oracle as O

BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/local/bin", "/usr/bin")


def binaries() -> dict[str, str] | None:
    """Paths of ``initdb``, ``pg_ctl`` and ``postgres`` (version 15), or None when missing."""
    for d in BIN_DIRS:
        paths = {n: os.path.join(d, n) for n in ("initdb", "pg_ctl", "postgres")}
        if all(os.access(p, os.X_OK) for p in paths.values()):
            try:
                out = subprocess.run([paths["postgres"], "--version"], capture_output=True, text=True, timeout=10)
            except OSError:
                continue
            if " 15." in out.stdout:
                return paths
    return None


def unavailable() -> str | None:
    """Why the PostgreSQL tests cannot run here (None: they can)."""
    if binaries() is None:
        return "PostgreSQL 15 server binaries (initdb, pg_ctl, postgres) not found in " + ", ".join(BIN_DIRS)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]', part of the test extras)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    import pwd

    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"]
    raise RuntimeError("running as root and neither user 'postgres' nor 'nobody' exists")


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A fresh PostgreSQL 15 cluster; yields its connection string (stopped and deleted afterwards)."""
    paths = binaries()
    if paths is None:
        raise RuntimeError(unavailable() or "no PostgreSQL")
    pre = _as_user()
    root = tempfile.mkdtemp(prefix="lv-pg-")
    os.chmod(root, 0o777)
    data = os.path.join(root, "data")
    port = _free_port()
    if pre:
        user = pre[2]
        shutil.chown(root, user)
    try:
        subprocess.run([*pre, paths["initdb"], "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True, timeout=120)
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c deadlock_timeout=100ms"
        subprocess.run([*pre, paths["pg_ctl"], "-D", data, "-o", opts, "-l", os.path.join(root, "log"), "-w",
                        "-t", "60", "start"], check=True, capture_output=True, timeout=120)
        try:
            yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        finally:
            subprocess.run([*pre, paths["pg_ctl"], "-D", data, "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------------- SQL


def _where(p: O.Pred | None) -> tuple[str, tuple]:
    assert p is not None
    if p.kind == "all":
        return "true", ()
    if p.kind == "eq":
        return "val = %s", (p.a,)
    if p.kind == "mod":
        return "CAST(val AS INTEGER) %% %s = %s", (int(p.a), int(p.b))
    if p.kind == "id":
        return "id = %s", (int(p.a),)
    raise ValueError(p.kind)


def to_sql(op: O.Op) -> tuple[str, tuple]:
    """The SQL statement (psycopg placeholders) of one schedule operation."""
    k, t = op.kind, op.table
    if k == "read":
        return f"SELECT id, val FROM {t} WHERE id = %s", (op.key,)
    if k == "scan":
        w, a = _where(op.pred)
        return f"SELECT id, val FROM {t} WHERE {w}", a
    if k in ("set", "add"):
        w, a = _where(op.pred)
        return f"UPDATE {t} SET val = {'%s' if k == 'set' else 'val + %s'} WHERE {w}", (op.value, *a)
    if k == "insert":
        return f"INSERT INTO {t} VALUES (%s, %s)", (op.key, op.value)
    if k == "delete":
        w, a = _where(op.pred)
        return f"DELETE FROM {t} WHERE {w}", a
    if k == "copy":
        return f"INSERT INTO {t} SELECT %s, val FROM {op.src} WHERE id = %s", (op.key2, op.key)
    raise ValueError(k)


def _observed(op: O.Op, rows: list[tuple[Any, Any]]) -> Any:
    kv = [(int(i), float(v)) for i, v in rows]
    return O.read_result(kv, op.key) if op.kind == "read" else O.scan_result(kv, O.ALL)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- schedules


@dataclass
class PgTxn:
    """One transaction on its own connection, fed by a queue and run by its own thread."""

    name: str
    conn: Any
    record: O.TxnRecord
    jobs: "queue.Queue[tuple[Any, threading.Event]]"
    thread: threading.Thread | None = None
    started: bool = False
    sqlstate: str | None = None

    def loop(self) -> None:
        while True:
            action, done = self.jobs.get()
            try:
                if action is None:
                    return
                if self.record.outcome == "active":
                    self._run(action)
            finally:
                done.set()

    def _run(self, action: Any) -> None:
        import psycopg

        try:
            if not self.started:
                self.conn.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                self.started = True
            if action == "commit":
                self.conn.execute("COMMIT")
                self.record.outcome = "committed"
            elif action == "abort":
                self.conn.execute("ROLLBACK")
                self.record.outcome = "rollback"
            else:
                for op in action:
                    sql, args = to_sql(op)
                    cur = self.conn.execute(sql, args)
                    self.record.ops.append((op, _observed(op, cur.fetchall()) if op.is_read else None))
        except psycopg.Error as e:
            self.sqlstate = getattr(e, "sqlstate", None)
            self.record.outcome = "aborted" if self.sqlstate in ("40001", "40P01") else "error"
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")


def run_schedule(dsn: str, steps: list[tuple[str, Any]], initial: dict[str, list[tuple[int, float]]], *,
                 block_s: float = 0.4, timeout_s: float = 30.0) -> tuple[list[O.TxnRecord], dict[str, list]]:
    """Run ``steps`` (as built by an anomaly's schedule) on the server at ``dsn``.

    Returns each transaction's record (ops with what it observed, outcome) and the final rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        for t, rows in initial.items():
            admin.execute(f"DROP TABLE IF EXISTS {t}")
            admin.execute(f"CREATE TABLE {t} (id bigint NOT NULL, val float8)")
            for k, v in rows:
                admin.execute(f"INSERT INTO {t} VALUES (%s, %s)", (k, v))
    txns: dict[str, PgTxn] = {}
    pending: list[threading.Event] = []
    try:
        for name, action in steps:
            if name not in txns:
                tx = PgTxn(name, psycopg.connect(dsn, autocommit=True), O.TxnRecord(name), queue.Queue())
                tx.thread = threading.Thread(target=tx.loop, name=f"pg-{name}", daemon=True)
                tx.thread.start()
                txns[name] = tx
            done = threading.Event()
            txns[name].jobs.put((action, done))
            pending.append(done)
            done.wait(block_s)  # not done by then: blocked, the schedule goes on
        deadline = time.monotonic() + timeout_s
        for done in pending:
            if not done.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError("a PostgreSQL transaction did not finish")
        for tx in txns.values():
            if tx.record.outcome == "active":  # the schedule never ended it
                tx.conn.execute("ROLLBACK")
                tx.record.outcome = "rollback"
    finally:
        for tx in txns.values():
            tx.jobs.put((None, threading.Event()))
            if tx.thread is not None:
                tx.thread.join(5)
            tx.conn.close()
    with psycopg.connect(dsn, autocommit=True) as admin:
        final = {t: sorted(O.norm_value((int(i), float(v)))
                           for i, v in admin.execute(f"SELECT id, val FROM {t}").fetchall()) for t in initial}
    return [txns[n].record for n in sorted(txns)], final


__all__ = ["PgTxn", "binaries", "cluster", "run_schedule", "to_sql", "unavailable"]
