"""Spark tier: the embedded Spark Connect server and sessions (lv_core.engine.session)."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lv_core.engine.session import _Server, find_java, get_spark, local_server
from lv_core.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _java_children(pid: int) -> list[int]:
    """Live java processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if comm == "java" and int(ppid) == pid and state != "Z":
            found.append(int(entry))
    return found


def _jvm_running(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) java process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
    return comm == "java" and state != "Z"


_HELPERS = "\n".join(textwrap.dedent(inspect.getsource(f)) for f in (_java_children, _jvm_running))

# A stand-in for a Jupyter kernel: start the embedded engine, run a query, report as JSON.
_KERNEL = f"""
import json, os, shutil, signal, sys, time, warnings
from lv_core.engine.session import get_spark, local_server, stop_spark
{_HELPERS}
spark = get_spark()
info = local_server()
out = {{"pid": info.pid, "port": info.port, "startup_s": info.startup_seconds,
        "work_dir": info.work_dir, "children": _java_children(os.getpid()),
        "sum": spark.range(100).selectExpr("sum(id) AS s").first()["s"]}}
if sys.argv[1] == "stop":
    stop_spark()
    out["after_stop"] = {{"children": _java_children(os.getpid()),
                          "jvm_running": _jvm_running(info.pid),
                          "work_dir_exists": os.path.exists(info.work_dir),
                          "local_server": local_server()}}
if sys.argv[1] == "die":  # the server dies: the next get_spark() warns and starts a new one
    os.kill(info.pid, signal.SIGKILL)
    while local_server() is not None:
        time.sleep(0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = get_spark()
    new = local_server()
    out["restart"] = {{"warned": any("server died" in str(w.message) for w in caught),
                       "new_session": again is not spark, "count": again.range(5).count(),
                       "pid": new.pid, "work_dir": new.work_dir}}
    shutil.rmtree(info.work_dir)  # kept for its log, as the server died
print(json.dumps(out), flush=True)
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _report(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while _jvm_running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# -- one process ----------------------------------------------------------------------------------


def test_starts_once_and_is_reused(spark: SparkSession) -> None:
    info = local_server()
    assert info is not None and info.url.startswith(f"sc://localhost:{info.port}/;token=")
    assert get_spark() is spark
    assert get_spark(spark) is spark
    assert local_server() == info
    assert _java_children(os.getpid()) == [info.pid]
    assert 0 < info.startup_seconds < 120
    print(f"embedded Spark Connect server up in {info.startup_seconds:.1f} s")


def test_a_query_works_with_the_small_defaults(spark: SparkSession) -> None:
    assert spark.range(10).selectExpr("sum(id) AS s").first()["s"] == 45
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"


def test_data_plane_operations_through_connect(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "balance": [10.0, 20.0, 30.0]})
    assert spark.createDataFrame(table).count() == 3
    assert spark.createDataFrame(table.to_pandas()).schema.simpleString() == (
        "struct<id:bigint,balance:double>"
    )
    (tmp_path / "in").mkdir()
    pq.write_table(table.slice(0, 2), tmp_path / "in" / "a.parquet")
    pq.write_table(table.slice(2), tmp_path / "in" / "b.parquet")
    paths = [str(tmp_path / "in" / n) for n in ("a.parquet", "b.parquet")]

    assert spark.read.parquet(*paths).count() == 3
    typed = spark.read.schema("id BIGINT, balance DOUBLE, note STRING").parquet(*paths)
    assert sorted(r["id"] for r in typed.where("note IS NULL").collect()) == [1, 2, 3]

    # Which file holds the matching rows (paths come back URL-encoded, scheme file: or file://).
    hit = typed.where("id = 3").select(F.input_file_name().alias("f"), "_metadata.file_path")
    row = hit.first()
    assert row["f"].endswith("/in/b.parquet") and row["file_path"].endswith("/in/b.parquet")

    out = tmp_path / "out"
    spark.createDataFrame(table).coalesce(1).write.parquet(str(out))
    written = [p for p in os.listdir(out) if p.endswith(".parquet")]
    assert len(written) == 1
    arrow = spark.read.parquet(str(out)).orderBy("id").toArrow()
    assert arrow.equals(table) or arrow.to_pandas().equals(table.to_pandas())
    pd.testing.assert_frame_equal(pq.read_table(out / written[0]).to_pandas(), table.to_pandas())


def test_sc_url_reuses_one_client_per_url(spark: SparkSession) -> None:
    info = local_server()
    assert info is not None
    other = get_spark(info.url)
    assert other is not spark and get_spark(info.url) is other
    assert other.range(3).count() == 3
    assert _java_children(os.getpid()) == [info.pid]


def test_bad_spark_arguments() -> None:
    with pytest.raises(ConfigError):
        get_spark(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        get_spark("localhost:15002")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(EngineError, match="No Spark Connect server answers"):
        get_spark(f"sc://127.0.0.1:{free}")


# -- startup failures ------------------------------------------------------------------------------


def test_missing_java_is_a_clear_engine_error() -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's bin/: python, no java
    assert shutil.which("java", path=env["PATH"]) is None
    code = (
        "from lv_core.engine.session import get_spark, local_server\n"
        "from lv_core.errors import EngineError\n"
        "try:\n    get_spark()\nexcept EngineError as e:\n"
        "    print('EngineError:', e, local_server())\n"
    )
    proc = _python(code, env=env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "EngineError: No java found on PATH and JAVA_HOME is not set" in out
    assert "Java 17 or newer is needed" in out
    assert "apt-get install openjdk-17-jre-headless" in out
    assert out.rstrip().endswith("None")  # no server


@pytest.mark.parametrize(
    ("banner", "major"), [('openjdk version "11.0.22"', 11), ('java version "1.8.0_392"', 8)]
)
def test_old_java_is_rejected(tmp_path: Path, banner: str, major: int) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!/bin/sh\necho '{banner} 2024-01-16' >&2\n")
    java.chmod(0o755)
    with pytest.raises(EngineError, match=f"is Java {major}\\. Java 17 or newer is needed"):
        find_java({"JAVA_HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    assert find_java()[1] >= 17


def _work_dir_of(message: str) -> Path:
    m = re.search(r"[Ss]erver log: (\S+)", message)
    assert m, message
    return Path(m.group(1)).parent


def test_server_dying_at_startup_names_its_log() -> None:
    with pytest.raises(EngineError) as caught:
        _Server.start({"spark.driver.memory": "1x"}, timeout_s=60)
    message = str(caught.value)
    work_dir = _work_dir_of(message)
    try:
        assert "exited during startup" in message and "Invalid maximum heap size" in message
        assert (work_dir / "server.log").exists()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def test_port_in_use_is_a_clear_engine_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EngineError, match=f"could not bind port {port}: it is in use"):
            _Server.start({"spark.connect.grpc.binding.port": str(port)}, timeout_s=90)


# -- several processes -----------------------------------------------------------------------------


def test_sc_url_from_a_second_process(spark: SparkSession) -> None:
    info = local_server()
    assert info is not None
    code = (
        "import json, sys\nfrom lv_core.engine.session import get_spark, local_server\n"
        "s = get_spark(sys.argv[1])\n"
        "print(json.dumps({'n': s.range(7).count(), 'server': local_server()}))\n"
    )
    report = _report(_python(code, info.url), timeout=60)
    assert report == {"n": 7, "server": None}  # used ours, started none


def test_spark_remote_in_the_environment_is_the_engine_of_connect(spark: SparkSession, tmp_path: Path) -> None:
    """``SPARK_REMOTE=sc://...`` (pyspark's own setting, e.g. of a JupyterHub image) makes ``connect()``
    without ``spark=`` use that server: the process starts no JVM of its own."""
    info = local_server()
    assert info is not None
    code = (
        "import json, sys, lv_core\nfrom lv_core.engine.session import local_server\n"
        "lh = lv_core.connect(sys.argv[1])\n"
        "lh.sql('CREATE TABLE t (id BIGINT)'); lh.sql('INSERT INTO t VALUES (1), (2)')\n"
        "n = lh.sql('SELECT count(*) AS n FROM t').collect()[0]['n']\n"
        "print(json.dumps({'n': n, 'server': local_server()}))\n"
    )
    report = _report(_python(code, str(tmp_path / "wh"), env={**os.environ, "SPARK_REMOTE": info.url}), timeout=120)
    assert report == {"n": 2, "server": None}
    assert _java_children(os.getpid()) == [info.pid]  # still only ours


# A kernel that dies hard while its server JVM is starting up: the JVM must follow it.
_DOOMED = """
import json, time
from lv_core.engine import session

def announce(self, *args):
    print(json.dumps({"pid": self.proc.pid, "work_dir": self.info.work_dir}), flush=True)
    time.sleep(600)

session._Server._wait_for_port = announce
session._Server.start()
"""


@pytest.fixture(scope="module")
def kernels() -> dict[str, Any]:
    """Two processes start their own embedded servers at the same time: one stops it with
    stop_spark(); in the other it dies, is replaced, and the process exits (atexit stops it).
    A third process is SIGKILLed while its JVM starts."""
    t0 = time.monotonic()
    procs = {mode: _python(_KERNEL, mode) for mode in ("stop", "die")}
    doomed = _python(_DOOMED)
    assert doomed.stdout is not None
    line = doomed.stdout.readline()
    assert line, doomed.communicate(timeout=30)[1][-3000:]
    reports: dict[str, Any] = {"doomed": json.loads(line)}
    pid = reports["doomed"]["pid"]
    deadline = time.monotonic() + 30
    while not _jvm_running(pid) and time.monotonic() < deadline:  # spark-submit execs java
        time.sleep(0.05)
    reports["doomed"]["was_java"] = _jvm_running(pid)
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=30)
    reports["doomed"]["gone_after_sigkill"] = _wait_gone(pid)
    for mode in ("stop", "die"):
        reports[mode] = _report(procs[mode])
    reports["die"]["restart"]["gone_after_exit"] = _wait_gone(reports["die"]["restart"]["pid"], 5)
    reports["wall_s"] = time.monotonic() - t0
    return reports


def test_processes_start_their_own_servers_concurrently(kernels: dict[str, Any]) -> None:
    runs = [kernels[m] for m in ("stop", "die")]
    assert all(r["sum"] == 4950 for r in runs)
    assert runs[0]["pid"] != runs[1]["pid"] and runs[0]["port"] != runs[1]["port"]
    assert all(r["children"] == [r["pid"]] for r in runs)
    print("startup of two at once:", [round(r["startup_s"], 1) for r in runs], "s")


def test_stop_spark_leaves_no_jvm(kernels: dict[str, Any]) -> None:
    after = kernels["stop"]["after_stop"]
    assert after == {
        "children": [], "jvm_running": False, "work_dir_exists": False, "local_server": None
    }


def test_a_dead_server_is_replaced_with_a_warning(kernels: dict[str, Any]) -> None:
    restart = kernels["die"]["restart"]
    assert restart["warned"] and restart["new_session"] and restart["count"] == 5
    assert restart["pid"] != kernels["die"]["pid"]


def test_exit_and_sigkill_leave_no_jvm(kernels: dict[str, Any]) -> None:
    restart = kernels["die"]["restart"]
    assert restart["gone_after_exit"] and not os.path.exists(restart["work_dir"])
    assert kernels["doomed"]["was_java"] and kernels["doomed"]["gone_after_sigkill"]
    shutil.rmtree(kernels["doomed"]["work_dir"], ignore_errors=True)  # killed: could not tidy up
