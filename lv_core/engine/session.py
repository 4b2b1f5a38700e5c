"""Spark Connect sessions for the data plane.

:func:`get_spark` returns a Spark Connect ``SparkSession``:

* ``None``: an embedded Spark Connect server, started on first use as a child JVM of this
  process (``spark-submit --class ...SparkConnectServer`` from the pyspark package) and reused
  afterwards. Every process (every Jupyter kernel) gets its own server on a free loopback port,
  guarded by a random auth token, so kernels never share or kill each other's engine. The server
  is stopped at interpreter exit (``atexit``), and on Linux it also receives SIGTERM if this
  process dies abruptly.
* ``"sc://host:port"``: a client of an existing server (one client per URL, reused). ``None``
  means this too when the environment names a server (``SPARK_REMOTE=sc://...``, pyspark's own
  setting, as a JupyterHub image or a shared machine sets it for every kernel); other values of it
  (``local``, ``local[*]``) ask for a local server, which is the embedded one.
* a ``SparkSession``: returned as is.

Nothing of Spark's own logging reaches stdout/stderr (a notebook cell): the embedded server writes
to ``server.log`` in its work directory (:attr:`LocalServer.log_path`), and pyspark's client loggers
(which print a JSON record with the whole JVM stack trace of every failed query to stderr) write to
:func:`client_log_path` (``client.log`` beside it; for a remote server, a per-process temporary folder).
A fresh embedded server is warmed in the background (:func:`warm_up`, :mod:`lv_core.engine.warmup`).

Why not ``SparkSession.builder.remote("local[*]")``: pyspark then runs the server inside a py4j
JVM on the fixed port 15002 bound to all interfaces, so a second kernel on the same machine fails
to start, and it sets process-wide environment variables.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lv_core.concurrency import Backoff
from lv_core.engine import warmup
from lv_core.engine.client_log import client_log_path, route_client_logs
from lv_core.engine.warmup import Warmup
from lv_core.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

__all__ = ["LocalServer", "client_log_path", "env_remote", "find_java", "get_spark", "local_server", "public_url",
           "stop_spark", "warm_up"]

log = logging.getLogger(__name__)

MIN_JAVA = 17
JAVA_HINT = (
    f"Java {MIN_JAVA} or newer is needed to run the embedded Spark engine: "
    "apt-get install openjdk-17-jre-headless (Debian/Ubuntu), brew install openjdk@17 (macOS), "
    "or conda install -c conda-forge openjdk=17; then put its bin/ on PATH or set JAVA_HOME. "
    "Alternatively connect to a running server with get_spark('sc://host:port')."
)
START_TIMEOUT_S = float(os.environ.get("LV_SPARK_START_TIMEOUT", "180"))
STOP_TIMEOUT_S = 20.0
DEFAULT_PORT = 15002
_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STARTED_RE = re.compile(r"Spark Connect server started at: \[?([^\s\]]+?)\]?:(\d+)\s*$", re.M)
_CLIENT_ENV = ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE")
_JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')

# Log at WARN, but keep the server's one INFO line announcing the port it bound.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
logger.nativeio.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeio.level = error
"""


def default_conf(work_dir: str) -> dict[str, str]:
    """Settings of the embedded server: small, loopback only, UTC; ``work_dir`` holds scratch."""
    return {
        "spark.master": "local[*]",
        "spark.driver.memory": "1g",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        # A read names its files (from the Delta log), which Spark then only stats; above 32 paths (the
        # default) it stats them in a Spark job of its own, seconds on one machine for nothing (SELECT over
        # 400 partition files: 6 s -> 1.5 s). A cluster (sc://) keeps its own setting.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": os.path.join(work_dir, "warehouse"),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",  # the OS picks a free port; read back from the log
        # -XX:TieredStopAtLevel=1: the quick JIT compiler only. A notebook's statements are short and
        # the optimising compiler's threads take the CPU the first queries need (2 cores: the first result
        # after "engine ready" 5-7 s -> 3.6-4.3 s, benchmarks/cold_connect.py); long CPU-bound jobs run
        # slower with it: `--conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4` (appended to these,
        # the last one counts) or a remote server (`sc://`) for those.
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile=file:{os.path.join(work_dir, 'log4j2.properties')} "
            "-Duser.timezone=UTC -XX:TieredStopAtLevel=1"
        ),
    }


@dataclasses.dataclass(frozen=True)
class LocalServer:
    """The embedded Spark Connect server of this process."""

    url: str  #: ``sc://localhost:PORT/;token=...``: give it to get_spark() in another process
    port: int
    pid: int  #: the server JVM
    log_path: str  #: the server's stdout and stderr
    work_dir: str  #: scratch directory (log, local dirs, warehouse); removed at a clean stop
    startup_seconds: float  #: from launch to the first answered request
    conf: Mapping[str, str] = dataclasses.field(default_factory=dict)  #: the settings given at start


def find_java(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Locate java the way ``spark-class`` does (``$JAVA_HOME/bin/java``, else PATH).

    Returns:
        The java executable and its major version.

    Raises:
        EngineError: no java, an unusable one, or one older than Java 17.
    """
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise EngineError(f"JAVA_HOME={home} has no executable bin/java. {JAVA_HINT}")
    else:
        found = shutil.which("java", path=env.get("PATH", os.defpath))
        if found is None:
            raise EngineError(f"No java found on PATH and JAVA_HOME is not set. {JAVA_HINT}")
        java = found
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=dict(env)
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise EngineError(f"Could not run {java} -version ({e}). {JAVA_HINT}") from e
    text = (out.stderr or "") + (out.stdout or "")
    m = _JAVA_VERSION_RE.search(text)
    if out.returncode != 0 or m is None:
        raise EngineError(
            f"{java} -version failed (exit {out.returncode}): {text.strip()[:300]!r}. {JAVA_HINT}"
        )
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_292" is Java 8
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise EngineError(f"{java} is Java {major}. {JAVA_HINT}")
    return java, major


def _spark_home() -> str:
    """The pyspark package directory (it ships bin/spark-submit and the jars), else $SPARK_HOME."""
    import pyspark

    candidates = [os.path.dirname(os.path.abspath(pyspark.__file__))]
    if os.environ.get("SPARK_HOME"):
        candidates.append(os.environ["SPARK_HOME"])
    for home in candidates:
        if os.path.isfile(os.path.join(home, "bin", "spark-submit")) and glob.glob(
            os.path.join(home, "jars", "spark-connect_*.jar")
        ):
            return home
    raise EngineError(
        f"No Spark Connect server jar found in {' or '.join(candidates)}: "
        f"pip install 'pyspark[connect]=={pyspark.__version__}' (the full pyspark package, "
        "not pyspark-client)."
    )


def _tail(path: str, lines: int = 25) -> str:
    try:
        with open(path, errors="replace") as f:
            kept = [ln.rstrip() for ln in f if not ln.startswith(("\tat ", "    at "))]
    except OSError:
        return ""
    return "\n".join(kept[-lines:])


def _port_in_use(port: int, log_path: str | None = None) -> str:
    return (
        f"The Spark Connect server could not bind port {port}: it is in use. Leave "
        "spark.connect.grpc.binding.port unset (a free port is chosen) or pick another one."
        + (f" Server log: {log_path}" if log_path else "")
    )


def _check_port_free(host: str, port: int) -> None:
    """Fail fast (instead of after the JVM's startup) when a requested port is taken."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the gRPC server does
        try:
            probe.bind((host, port))
        except OSError as e:
            raise EngineError(_port_in_use(port) + f" ({e})") from e


def _pdeathsig() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when this thread dies, or None."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None  # the signal follows the creating *thread*; only the main thread lives long
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


#: Client modules a session and the first statements need (seconds to import on a busy machine): loaded
#: while the server JVM boots, not before it is launched or after it answers.
_PRELOAD = ("pyspark.sql.connect.session", "pyspark.sql.connect.functions", "pyspark.sql.types", "pandas",
            "lv_core.engine.sql_run", "lv_core.engine.spark_io")


def _preload() -> None:
    """Import :data:`_PRELOAD` now; one that fails is left for its real import to report."""
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112 - reported where it is really imported
            continue


class _Server:
    """One embedded Spark Connect server process (no global state)."""

    def __init__(self, proc: subprocess.Popen[bytes], info: LocalServer, t0: float) -> None:
        self.proc = proc
        self.info = info
        self.t0 = t0  #: time.monotonic() at launch

    @classmethod
    def start(
        cls, conf: Mapping[str, str] | None = None, *, timeout_s: float = START_TIMEOUT_S
    ) -> _Server:
        """Launch a server and wait (event-driven, with a deadline) until it answers.

        Raises:
            EngineError: Java missing or too old, bad installation, port in use, server died or
                did not come up in time. The message names the server log.
        """
        t0 = time.monotonic()
        find_java()
        home = _spark_home()
        extra = {str(k): str(v) for k, v in (conf or {}).items()}
        requested_port = int(extra.get("spark.connect.grpc.binding.port", "0"))
        if requested_port:
            host = extra.get("spark.connect.grpc.binding.address", "127.0.0.1")
            _check_port_free(host, requested_port)
        work_dir = tempfile.mkdtemp(prefix="lakevilla-spark-")
        log_path = os.path.join(work_dir, "server.log")
        with open(os.path.join(work_dir, "log4j2.properties"), "w") as f:
            f.write(_LOG4J2)
        settings = default_conf(work_dir)
        java_opts = "spark.driver.extraJavaOptions"
        if java_opts in extra:  # appended to ours (they carry the log4j configuration)
            settings[java_opts] += " " + extra.pop(java_opts)
        settings.update(extra)
        token = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k not in _CLIENT_ENV}
        env.update(
            SPARK_HOME=home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=os.path.join(work_dir, "local"),  # env, not conf: no override warning
            SPARK_CONNECT_AUTHENTICATE_TOKEN=token,  # via env, so it never shows in `ps`
        )
        env.setdefault("PYSPARK_PYTHON", sys.executable)  # Python UDF workers use this venv
        cmd = [os.path.join(home, "bin", "spark-submit"), "--class", _SERVER_CLASS]
        cmd += ["--name", f"lakevilla-connect-{os.getpid()}"]
        cmd += ["--master", settings.pop("spark.master")]
        for k, v in settings.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd.append("spark-internal")
        with open(log_path, "wb") as logf:
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # a kernel interrupt (SIGINT to the group) spares it
                    preexec_fn=_pdeathsig(),
                )
            except OSError as e:
                raise EngineError(f"Could not launch {cmd[0]}: {e}. Server log: {log_path}") from e
        given = {str(k): str(v) for k, v in (conf or {}).items()}
        server = cls(proc, LocalServer("", 0, proc.pid, log_path, work_dir, 0.0, given), t0)
        try:
            _preload()  # while the JVM boots
            port = server._wait_for_port(t0 + timeout_s, timeout_s, requested_port)
            url = f"sc://localhost:{port}/;token={token}"
            server.info = dataclasses.replace(
                server.info, url=url, port=port, startup_seconds=time.monotonic() - t0
            )
        except BaseException:
            server.stop(keep_work_dir=True)
            raise
        return server

    def _wait_for_port(self, deadline: float, timeout_s: float, requested_port: int) -> int:
        log_path = self.info.log_path
        seen = ""
        poll = Backoff(0.05, 0.05)  # a poll interval, not a guess at the startup time
        with open(log_path, errors="replace") as f:
            while True:
                seen += f.read()
                m = _STARTED_RE.search(seen)
                if m:
                    return int(m.group(2))
                rc = self.proc.poll()
                if rc is not None:
                    seen += f.read()
                    if "BindException" in seen or "Failed to bind" in seen:
                        raise EngineError(_port_in_use(requested_port, log_path))
                    raise EngineError(
                        f"The Spark Connect server exited during startup (exit code {rc}). "
                        f"Last log lines:\n{_tail(log_path)}\nFull server log: {log_path}"
                    )
                if time.monotonic() > deadline:
                    raise EngineError(
                        f"The Spark Connect server did not start within {timeout_s:.0f} s "
                        f"(set LV_SPARK_START_TIMEOUT to wait longer). Last log lines:\n"
                        f"{_tail(log_path)}\nFull server log: {log_path}"
                    )
                poll.sleep()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, *, keep_work_dir: bool = False) -> None:
        """SIGTERM the JVM (Spark runs its shutdown hooks), SIGKILL after a grace period."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # Anything the JVM left in its own process group (e.g. Python UDF workers).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        clean_exit = self.proc.returncode in (0, 128 + signal.SIGTERM, -signal.SIGTERM)
        if not keep_work_dir and clean_exit:
            shutil.rmtree(self.info.work_dir, ignore_errors=True)


def _connect(url: str, what: str) -> ConnectSession:
    """A new Spark Connect client for ``url``, checked with one cheap request."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # Mark the process as a Spark Connect client, as SparkSession.builder.remote() does; without
    # it pyspark.sql.functions (F.col, F.input_file_name, ...) take the classic py4j path and fail.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        session = ConnectSession.builder.remote(url).create()
        session.version  # noqa: B018 - one round trip: reachable and authenticated
    except Exception as e:  # pyspark raises several types; all mean "no usable session"
        raise EngineError(f"Could not open a Spark Connect session to {what}: {e}") from e
    return session


def _check_reachable(url: str) -> None:
    m = re.match(r"^sc://(\[[^\]]+\]|[^:/;]+)(?::(\d+))?", url)
    if m is None:
        raise ConfigError(f"Not a Spark Connect URL: {url!r} (expected sc://host:port)")
    host = m.group(1).strip("[]")
    port = int(m.group(2) or DEFAULT_PORT)
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError as e:
        raise EngineError(
            f"No Spark Connect server answers at {host}:{port} ({e}). Start one "
            "(sbin/start-connect-server.sh) or use get_spark() for the embedded engine."
        ) from e


_lock = threading.RLock()
_owner_pid = os.getpid()
_server: _Server | None = None
_embedded: ConnectSession | None = None
_remote: dict[str, ConnectSession] = {}
_atexit_registered = False
_warmup: Warmup | None = None
_unwarmed = False  # the embedded server was started and warm_up() has not run for it yet


def _reset_after_fork() -> None:
    """A forked child owns neither the parent's server nor its gRPC clients."""
    global _owner_pid, _server, _embedded, _remote, _warmup, _unwarmed
    if os.getpid() != _owner_pid:
        _owner_pid, _server, _embedded, _remote, _warmup, _unwarmed = os.getpid(), None, None, {}, None, False


def get_spark(
    spark: str | SparkSession | ConnectSession | None = None, *, conf: Mapping[str, str] | None = None
) -> SparkSession | ConnectSession:
    """Return a Spark Connect session.

    Args:
        spark: ``None`` for the server ``SPARK_REMOTE`` names (an ``sc://`` URL in the
            environment), else the embedded server of this process (started on first use, then
            reused), ``"sc://host:port[/;token=...]"`` for an existing server (this client's own
            session gets ``spark.sql.session.timeZone=UTC``), or a ``SparkSession`` (returned
            unchanged).
        conf: extra Spark settings for the embedded server; used only when it is started.

    Raises:
        EngineError: the engine could not be started or reached (the message says what to fix).
        ConfigError: ``spark`` is of an unsupported kind.
    """
    if spark is None:
        spark = env_remote()
    if spark is None:  # first: the server starts while pyspark's client modules load (see _preload)
        with _lock:
            _reset_after_fork()
            return _get_embedded(conf)

    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if isinstance(spark, (ClassicSession, ConnectSession)):
        with _lock:
            route_client_logs()
        return spark
    if not (isinstance(spark, str) and spark.startswith("sc://")):
        raise ConfigError(
            f"spark must be None, an 'sc://host:port' URL or a SparkSession; got {spark!r}"
        )
    with _lock:
        _reset_after_fork()
        route_client_logs()
        cached = _remote.get(spark)
        if cached is not None and not cached.is_stopped:
            return cached
        _check_reachable(spark)
        session = _connect(spark, public_url(spark))
        session.conf.set("spark.sql.session.timeZone", "UTC")  # this session only
        _remote[spark] = session
        return session


def public_url(url: str) -> str:
    """``url`` without its parameters (``/;token=...``: a secret), as it may be shown or logged."""
    return url.split("/;")[0]


def env_remote() -> str | None:
    """The server ``SPARK_REMOTE`` names, when it names one (``sc://``)."""
    remote = os.environ.get("SPARK_REMOTE", "").strip()
    return remote if remote.startswith("sc://") else None


def _get_embedded(conf: Mapping[str, str] | None) -> ConnectSession:
    global _server, _embedded, _atexit_registered, _unwarmed
    if _server is not None and not _server.alive():
        dead = _server
        warnings.warn(
            f"The embedded Spark Connect server died (exit code {dead.proc.returncode}); "
            f"starting a new one. Its log: {dead.info.log_path}",
            RuntimeWarning,
            stacklevel=3,
        )
        _drop_embedded(release=False)
    if _server is not None and _embedded is not None and not _embedded.is_stopped:
        return _embedded
    started = _server is None
    if _server is None:
        if not _atexit_registered:
            atexit.register(stop_spark)  # runs after pyspark's client hooks (atexit is LIFO)
            _atexit_registered = True
        _server = _Server.start(conf)
        route_client_logs(os.path.join(_server.info.work_dir, "client.log"))
    try:
        what = f"the embedded server (log: {_server.info.log_path})"
        _embedded = _connect(_server.info.url, what)
    except EngineError:
        _drop_embedded(release=False, keep_work_dir=True)
        raise
    _short_retries(_embedded)
    if started:
        t = _server.info = dataclasses.replace(
            _server.info, startup_seconds=time.monotonic() - _server.t0  # launch to first answer
        )
        log.info("Spark Connect pid %d, port %d, up in %.1fs", t.pid, t.port, t.startup_seconds)
        _unwarmed = True
    return _embedded


def warm_up() -> None:
    """Warm a freshly started embedded server in the background (:mod:`lv_core.engine.warmup`), once.

    Called by the data plane once its engine is set up (so the warm-up's first queries do not delay
    "engine ready"); does nothing for a server already warmed, without one, or with LV_SPARK_WARMUP=0.
    """
    global _warmup, _unwarmed
    with _lock:
        _reset_after_fork()
        if not _unwarmed or _server is None or _embedded is None or os.environ.get("LV_SPARK_WARMUP", "1") == "0":
            return
        _unwarmed = False
        _warmup = warmup.start(_embedded, _server.info.work_dir)


def _short_retries(session: ConnectSession) -> None:
    """Give up on a dead loopback server within seconds, not pyspark's default 10 minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    with contextlib.suppress(AttributeError):  # private-ish client API; keep the default if gone
        policy = DefaultPolicy(max_retries=6, backoff_multiplier=2.0, max_backoff=2000)
        session.client.set_retry_policies([policy])


def _drop_embedded(*, release: bool, keep_work_dir: bool = False) -> None:
    global _server, _embedded, _warmup, _unwarmed
    session, server, warm = _embedded, _server, _warmup
    _embedded, _server, _warmup, _unwarmed = None, None, None, False
    if warm is not None:
        warm.cancel()
    if session is not None:
        if not release:
            session.release_session_on_close = False  # no RPC to a server that is gone
        with contextlib.suppress(Exception):
            session.stop()
    if server is not None:
        server.stop(keep_work_dir=keep_work_dir)


def local_server() -> LocalServer | None:
    """The embedded server of this process, or None if none is running."""
    with _lock:
        _reset_after_fork()
        return _server.info if _server is not None and _server.alive() else None


def stop_spark() -> None:
    """Close this process's sessions and stop its embedded server (waits for the JVM to exit).

    Safe to call repeatedly; registered with ``atexit``. A later :func:`get_spark` starts anew.
    """
    with _lock:
        if os.getpid() != _owner_pid:  # forked child: the server belongs to the parent
            return
        for session in list(_remote.values()):
            with contextlib.suppress(Exception):
                session.stop()
        _remote.clear()
        _drop_embedded(release=_server is not None and _server.alive())
