"""Shared pieces of the benchmarks: stores (local folder with injected latency, the moto S3 test
server with server-side request counting), statistics, and result files.

Stores are described by a :class:`StoreSpec`, which is plain data so that client processes can open
the same warehouse. Request counts come from :class:`lv_core.storage.instrumented.InstrumentedStore`
on the client side (LakeVilla and the ``delta`` baseline); on the S3 test server they are also
counted by the server itself, which is the only way to count delta-rs (its object store is Rust).
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

# Not resolved: in a before/after child (tree_process) ``benchmarks`` is a link inside a folder whose
# ``lv_core`` is the tree under test; resolving the link would put this checkout's lv_core first.
ROOT = Path(__file__).absolute().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
S3_REGION = "us-east-1"
S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

# Keep every botocore request of a benchmark away from real AWS: explicit loopback endpoints and
# dummy keys only, no instance metadata look-ups.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


# ------------------------------------------------------------------------------------------ stores
@dataclass(frozen=True)
class StoreSpec:
    """Where a benchmark runs: ``kind`` "local" (a folder) or "s3" (the moto test server).

    ``latency_s`` is injected per request on the client side (InstrumentedStore) for LakeVilla and
    the ``delta`` baseline; ``server_delay_s`` is added by the S3 test server to every request
    (it then also applies to delta-rs).
    """

    name: str
    kind: str = "local"
    latency_s: float = 0.0
    endpoint: str | None = None
    bucket: str | None = None
    server_delay_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def store_spec(name: str, s3: "S3Server | None" = None) -> StoreSpec:
    """``local-0ms``, ``local-20ms`` (any ``local-<N>ms``), ``s3`` (needs the running server)."""
    if name.startswith("local-") and name.endswith("ms"):
        return StoreSpec(name, "local", float(name[6:-2]) / 1000.0)
    if name == "s3":
        if s3 is None:
            raise ValueError("the s3 store needs the S3 test server")
        return StoreSpec(name, "s3", 0.0, s3.endpoint, s3.bucket, s3.delay_s)
    raise ValueError(f"unknown store {name!r}: use local-0ms, local-20ms or s3")


def s3_options(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "region": S3_REGION, **S3_CREDENTIALS}


def raw_store(spec: StoreSpec, location: str):
    """The uninstrumented store of a warehouse ``location`` (a folder, or a prefix in the bucket)."""
    if spec.kind == "local":
        from lv_core.storage.local import LocalStore

        return LocalStore(location)
    from lv_core.storage.s3 import S3Store

    assert spec.endpoint and spec.bucket
    return S3Store(spec.bucket, location, s3_options(spec.endpoint))


def open_lakehouse(spec: StoreSpec, location: str, *, latency: bool = True, **lh_options: Any):
    """A Lakehouse on an InstrumentedStore (counting; latency injected when ``latency``)."""
    from lv_core import Lakehouse
    from lv_core.storage.instrumented import InstrumentedStore

    store = InstrumentedStore(raw_store(spec, location), latency=spec.latency_s if latency and spec.latency_s else None)
    return Lakehouse(store, **lh_options), store


def delta_rs_uri(spec: StoreSpec, location: str, table: str) -> tuple[str, dict[str, str] | None]:
    """URI and storage options delta-rs needs for ``table`` of a warehouse."""
    if spec.kind == "local":
        return str(Path(location) / table), None
    st = raw_store(spec, location)
    try:
        return st.url(table), st.storage_options_for_deltalake()
    finally:
        st.close()


def clone_warehouse(spec: StoreSpec, src: str, dst: str) -> None:
    """Copy a prepared warehouse (a loaded table) so each run starts from the same state."""
    if spec.kind == "local":
        shutil.copytree(src, dst)
        return
    import boto3

    assert spec.endpoint and spec.bucket
    client = boto3.client("s3", endpoint_url=spec.endpoint, region_name=S3_REGION, **S3_CREDENTIALS)
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=spec.bucket, Prefix=src.rstrip("/") + "/"):
            for obj in page.get("Contents", ()):
                key = obj["Key"]
                client.copy_object(Bucket=spec.bucket, Key=dst.rstrip("/") + "/" + key[len(src.rstrip("/")) + 1:],
                                   CopySource={"Bucket": spec.bucket, "Key": key})
    finally:
        client.close()


def remove_warehouse(spec: StoreSpec, location: str) -> None:
    if spec.kind == "local":
        shutil.rmtree(location, ignore_errors=True)
        return
    import boto3

    client = boto3.client("s3", endpoint_url=spec.endpoint, region_name=S3_REGION, **S3_CREDENTIALS)
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=spec.bucket, Prefix=location.rstrip("/") + "/")
        for page in pages:
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                client.delete_objects(Bucket=spec.bucket, Delete={"Objects": keys})
    finally:
        client.close()


# --------------------------------------------------------------------------------- S3 test server
def _classify(environ: dict[str, Any]) -> str:
    """The request kind as S3 bills it (the same names as InstrumentedStore)."""
    method = environ["REQUEST_METHOD"]
    path = environ.get("PATH_INFO", "")
    has_key = len([p for p in path.split("/") if p]) >= 2
    if method == "PUT":
        if environ.get("HTTP_X_AMZ_COPY_SOURCE"):
            return "COPY"
        if environ.get("HTTP_IF_NONE_MATCH"):
            return "PUT-create"
        if environ.get("HTTP_IF_MATCH"):
            return "PUT-if-match"
        return "PUT"
    if method == "GET":
        return "GET" if has_key else "LIST"
    if method in ("HEAD", "DELETE"):
        return method
    if method == "POST" and "delete" in environ.get("QUERY_STRING", ""):
        return "DELETE"
    return method


def _exit_with_parent() -> None:
    """A watchdog thread: end this child process when its parent is gone (killed benchmark run)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(2)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="bench-watchdog", daemon=True).start()


def _serve_moto(port_q: Any, delay_s: float) -> None:
    """Child process: moto's S3 behind a lock (atomic conditional puts), counting requests.

    moto 5.2.5 evaluates If-None-Match/If-Match as check-then-write without a lock (see
    tests/conftest.py); serialising request handling makes it behave like S3/MinIO. The injected
    delay is slept outside the lock, so it models network latency without serialising it.
    """
    import logging
    from collections import Counter

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _exit_with_parent()
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()
    counts: Counter[str] = Counter()
    count_lock = threading.Lock()

    def wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith("/__bench__/"):
            with count_lock:
                body = json.dumps(dict(counts)).encode()
                if path.endswith("/reset"):
                    counts.clear()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        with count_lock:
            counts[_classify(environ)] += 1
        if delay_s:
            time.sleep(delay_s)
        with lock:
            result = app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    server = make_server("127.0.0.1", 0, wsgi, threaded=True, request_handler=MotoRequestHandler)
    port_q.put(server.server_port)
    server.serve_forever()


class S3Server:
    """The moto S3 test server in its own process, with one bucket for the benchmark run."""

    def __init__(self, delay_s: float = 0.0) -> None:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        self.delay_s = delay_s
        self.proc = ctx.Process(target=_serve_moto, args=(q, delay_s), name="bench-moto", daemon=True)
        self.proc.start()
        port = q.get(timeout=60)
        self.endpoint = f"http://127.0.0.1:{port}"
        self.bucket = f"lv-bench-{uuid.uuid4().hex[:10]}"
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=S3_REGION, **S3_CREDENTIALS)
        client.create_bucket(Bucket=self.bucket)
        client.close()

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(self.endpoint + "/__bench__/counts", timeout=10) as r:
            return json.loads(r.read())

    def reset(self) -> dict[str, int]:
        with urllib.request.urlopen(self.endpoint + "/__bench__/reset", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)


# ------------------------------------------------------------------------------------- statistics
@contextlib.contextmanager
def tree_process(tree: str | Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Working folder and environment of a child process that must import ``lv_core`` from the source
    tree ``tree`` and ``benchmarks`` from this checkout (a before/after run). Python puts the working
    folder first on ``sys.path`` (``-c``, ``-m``, and spawned multiprocessing children inherit it),
    ahead of ``PYTHONPATH``: the child runs in a folder holding only those two links, or it would
    import this checkout's ``lv_core`` whatever ``PYTHONPATH`` says. The folder goes on exit."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lv-tree-") as shim:
        os.symlink(Path(tree).resolve() / "lv_core", Path(shim) / "lv_core")
        os.symlink(Path(__file__).resolve().parent, Path(shim) / "benchmarks")
        yield shim, {**os.environ, "PYTHONPATH": shim}


def percentile(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, math.ceil(p / 100.0 * len(xs)) - 1))
    return xs[k]


def mean(values: Iterable[float]) -> float | None:
    xs = list(values)
    return sum(xs) / len(xs) if xs else None


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 2)


def add_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


WRITE_KINDS = ("PUT", "PUT-create", "PUT-if-match", "DELETE", "COPY")
READ_KINDS = ("GET", "HEAD", "LIST")


def reads_writes(counts: dict[str, int]) -> tuple[int, int]:
    return sum(counts.get(k, 0) for k in READ_KINDS), sum(counts.get(k, 0) for k in WRITE_KINDS)


# ----------------------------------------------------------------------------------------- output
def environment() -> dict[str, Any]:
    import deltalake
    import pyarrow

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "pyarrow": pyarrow.__version__,
        "deltalake": deltalake.__version__,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


@dataclass
class Timer:
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------ client processes
def _pool_worker(idx: int, task_q: Any, result_q: Any) -> None:
    """A client process: runs ``module:function(args, ready)`` tasks until it gets None.

    The function sets itself up, calls ``ready()`` (which blocks until every client of the run is
    ready: a common start), runs, and returns a JSON-able result.
    """
    import importlib
    import queue as _queue
    import traceback

    root = str(ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
    _exit_with_parent()
    while True:
        try:
            task = task_q.get(timeout=5)
        except _queue.Empty:
            continue
        if task is None:
            return
        name, args = task
        mod, fn = name.split(":")

        def ready() -> float:
            result_q.put(("ready", idx, None))
            return task_q.get()  # the common start time (time.time())

        try:
            out = getattr(importlib.import_module(mod), fn)(args, ready)
            result_q.put(("done", idx, out))
        except BaseException:  # reported to the parent
            result_q.put(("error", idx, traceback.format_exc()))


class ClientPool:
    """Long-lived client processes (spawned once; interpreter start-up is not measured)."""

    def __init__(self, n: int) -> None:
        self.ctx = mp.get_context("spawn")
        self.n = 0
        self.result_q = self.ctx.Queue()
        self.task_qs: list[Any] = []
        self.procs: list[Any] = []
        self.grow(n)

    def grow(self, n: int) -> None:
        while self.n < n:
            q = self.ctx.Queue()
            p = self.ctx.Process(target=_pool_worker, args=(self.n, q, self.result_q), daemon=True,
                                 name=f"bench-client-{self.n}")
            p.start()
            self.task_qs.append(q)
            self.procs.append(p)
            self.n += 1

    def run(self, fn: str, args_list: list[dict[str, Any]], timeout_s: float,
            on_ready: Any = None) -> list[Any]:
        """Run ``fn`` in ``len(args_list)`` clients with a common start; results in client order.

        ``on_ready()`` is called once every client is set up, just before the start (e.g. to reset
        the S3 server's request counts so that set-up and warm-up are not counted)."""
        import queue as _queue

        n = len(args_list)
        self.grow(n)
        for i, args in enumerate(args_list):
            self.task_qs[i].put((fn, args))
        deadline = time.monotonic() + timeout_s
        results: dict[int, Any] = {}
        errors: list[str] = []
        ready = 0
        while ready + len(errors) < n:
            kind, idx, payload = self.result_q.get(timeout=max(1.0, deadline - time.monotonic()))
            if kind == "ready":
                ready += 1
            elif kind == "error":
                errors.append(f"client {idx}:\n{payload}")
        if not errors:
            if on_ready is not None:
                on_ready()
            start = time.time() + 0.05
            for i in range(n):
                self.task_qs[i].put(start)
        while len(results) + len(errors) < n:
            try:
                kind, idx, payload = self.result_q.get(timeout=max(1.0, deadline - time.monotonic()))
            except _queue.Empty:
                raise TimeoutError(f"{fn}: clients did not finish within {timeout_s:.0f}s") from None
            if kind == "done":
                results[idx] = payload
            elif kind == "error":
                errors.append(f"client {idx}:\n{payload}")
                if ready == n:  # a client failed after the start: the others still finish
                    continue
        if errors:
            if ready < n:  # the clients that did get ready wait for a start that never comes
                self.close()
                self.__init__(n)  # type: ignore[misc]
            raise RuntimeError("\n".join(errors))
        return [results[i] for i in range(n)]

    def close(self) -> None:
        for q in self.task_qs:
            try:
                q.put(None)
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        self.task_qs, self.procs, self.n = [], [], 0
