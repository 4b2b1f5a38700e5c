"""Slow tier, issue 20 item 5: a real multi-process engine. A Spark standalone master with two workers
on loopback and a Spark Connect server started on it by hand (``spark-class`` with the master and
worker classes, ``spark-submit --class ...SparkConnectServer``: the ``sbin/start-*.sh`` scripts are not
in the pyspark wheel, they run the same classes); two client processes attach with ``sc://`` and run
concurrent bank transfers on one warehouse (a local folder the executors reach directly). Spark's
status API (the application UI's REST endpoint) shows that executors on the workers ran the tasks;
the total balance is conserved (read back with delta-rs)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import pytest

import lv_core
from lv_core.engine.session import find_java

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
N_ACCOUNTS, START, TRANSFERS = 4, 100.0, 4

_CLIENT = textwrap.dedent("""
    import random, sys
    import lv_core
    from lv_core.errors import TransactionAborted
    wh, url, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lh = lv_core.connect(wh, spark=url, lease_s=20.0)
    rng = random.Random(seed)
    done = aborts = 0
    while done < n:
        src, dst, amount = rng.randrange(4), rng.randrange(4), rng.choice([1, 5, 10])
        try:
            with lh.transaction("serializable", timeout_s=120) as txn:
                txn.sql(f"UPDATE bank_x SET balance = balance - {amount} WHERE id = {src}")
                txn.sql(f"UPDATE bank_y SET balance = balance + {amount} WHERE id = {dst}")
            done += 1
        except TransactionAborted:
            aborts += 1
    print(done, aborts, flush=True)
    lh.close()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _wait(what: str, check: Any, timeout_s: float, procs: list[subprocess.Popen[bytes]]) -> Any:
    """Poll ``check`` (an external process's state) until it returns a truthy value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a Spark process exited with {p.returncode}")
        try:
            got = check()
            if got:
                return got
        except (OSError, ValueError):  # not listening yet, or answering with a page still starting
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    find_java()  # a clear error without Java 17
    home = _spark_home()
    work = tmp_path_factory.mktemp("cluster")
    host = "127.0.0.1"
    mport, mui, cport, aui = _free_port(), _free_port(), _free_port(), _free_port()
    token = uuid.uuid4().hex
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": host, "SPARK_LOG_DIR": str(work),
           "SPARK_WORKER_DIR": str(work / "workers"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_CONNECT_AUTHENTICATE_TOKEN": token, "PYTHONPATH": str(ROOT)}
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE"):
        env.pop(k, None)
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, cmd: list[str]) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))

    spark_class = os.path.join(home, "bin", "spark-class")
    master = f"spark://{host}:{mport}"
    try:
        launch("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", host, "--port", str(mport),
                          "--webui-port", str(mui)])
        _wait("the master", lambda: _get_json(f"http://{host}:{mui}/json/"), 90, procs)
        for i in range(2):
            launch(f"worker{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", host,
                                  "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port())])
        _wait("two alive workers", lambda: len([w for w in _get_json(f"http://{host}:{mui}/json/")["workers"]
                                                if w["state"] == "ALIVE"]) == 2, 90, procs)
        launch("connect", [os.path.join(home, "bin", "spark-submit"), "--class",
                           "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", master,
                           "--conf", f"spark.connect.grpc.binding.port={cport}",
                           "--conf", f"spark.connect.grpc.binding.address={host}",
                           "--conf", f"spark.ui.port={aui}", "--conf", "spark.executor.cores=1",
                           "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
                           "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.driver.memory=768m",
                           "--conf", f"spark.driver.host={host}", "--conf", f"spark.driver.bindAddress={host}",
                           "--conf", "spark.sql.session.timeZone=UTC",
                           "spark-internal"])
        apps = _wait("the Connect server's application", lambda: _get_json(
            f"http://{host}:{aui}/api/v1/applications"), 120, procs)
        _wait("the Connect server's port", lambda: socket.create_connection((host, cport), timeout=2).close() or True,
              60, procs)
        yield {"url": f"sc://localhost:{cport}/;token={token}"  # a token without TLS: localhost only
               , "app_api": f"http://{host}:{aui}/api/v1/applications/"
               f"{apps[0]['id']}", "master_api": f"http://{host}:{mui}/json/", "work": work}
    finally:
        for p in reversed(procs):
            with_group = p.pid
            try:
                os.killpg(with_group, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_two_clients_transfer_on_a_standalone_cluster(cluster: dict[str, Any], tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    lh = lv_core.connect(wh, spark=cluster["url"])
    for t in ("bank_x", "bank_y"):
        lh.sql(f"CREATE TABLE {t} (id BIGINT, balance DOUBLE)")
        lh.sql(f"INSERT INTO {t} SELECT id, {START} FROM range({N_ACCOUNTS})")
    from lv_core.engine import api

    assert api.engine(lh).data_path == "direct"  # the executors read and write the folder themselves
    clients = [subprocess.Popen([sys.executable, "-c", _CLIENT, wh, cluster["url"], str(seed), str(TRANSFERS)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}) for seed in (1, 2)]
    outs = [c.communicate(timeout=900) for c in clients]
    for c, (out, err) in zip(clients, outs, strict=True):
        assert c.returncode == 0, err[-3000:]
        assert int(out.split()[0]) == TRANSFERS
    total = 0.0
    for t in ("bank_x", "bank_y"):
        rows = deltalake.DeltaTable(os.path.join(wh, t)).to_pyarrow_table().to_pylist()
        assert sorted(r["id"] for r in rows) == list(range(N_ACCOUNTS))
        total += sum(r["balance"] for r in rows)
    assert total == 2 * N_ACCOUNTS * START  # every transfer moved money from bank_x to bank_y or not at all
    assert lh.sql("SELECT sum(balance) FROM bank_x").collect()[0][0] < N_ACCOUNTS * START

    # Spark's status API: two executors, on the two workers, ran the tasks (the driver runs none).
    executors = _get_json(cluster["app_api"] + "/allexecutors")
    workers = [e for e in executors if e["id"] != "driver"]
    assert len({e["hostPort"] for e in workers}) == 2
    assert all(e["totalTasks"] > 0 for e in workers), [(e["id"], e["totalTasks"]) for e in workers]
    assert sum(e["totalTasks"] for e in executors if e["id"] == "driver") == 0
    app = _get_json(cluster["master_api"])["activeapps"][0]
    assert app["cores"] == 2
    lh.close()
