"""Fixtures of the integration tiers: one embedded Spark Connect server for the whole test run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import fresh_bucket, s3_endpoint, s3_options_for, s3_variants

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A Spark Connect session on this process's embedded server, shared by all spark-tier tests.

    Started on first use (about 6 s here), stopped at the end of the run. Without Java 17 it
    errors with the EngineError that says what to install.
    """
    from lv_core.engine.session import get_spark, stop_spark, warm_up

    session = get_spark()
    warm_up()  # as the product warms a fresh server (the kernels of spark_remote reach it too)
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def spark_remote(spark: SparkSession) -> dict[str, str]:
    """``SPARK_REMOTE`` naming the server of the ``spark`` fixture, for a kernel's environment.

    A kernel started with it connects to that warm server instead of starting its own JVM: on this
    2-core machine a kernel's own server costs about 15 s more to its first answer and 25 s of CPU.
    The tests of the first start (the quickstart tutorial, the quiet-engine tests, the Spark session
    tests) keep starting their own.
    """
    from lv_core.engine.session import local_server

    server = local_server()
    assert server is not None, "the spark fixture's embedded server is not running"
    return {"SPARK_REMOTE": server.url}


@pytest.fixture(params=["direct", "arrow"])
def data_path(request: pytest.FixtureRequest) -> str:
    """Both data paths: Spark reads and writes the files itself, or the data moves through the client."""
    return str(request.param)


# -- the engine tests: one lakehouse per test, on a local folder or on the moto S3 server -----------


@pytest.fixture(params=s3_variants("local"))
def engine_lh(request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Any) -> Iterator[Any]:
    """A Lakehouse on an instrumented store (``lh.store``; GET keys in ``lh.store.gets``), on the
    embedded Spark server; parametrised over a local folder and the S3 test servers (``lh.kind``:
    "local" or "s3")."""
    import lv_core
    from lv_core.storage.base import GetResult
    from lv_core.storage.instrumented import InstrumentedStore

    class Recording(InstrumentedStore):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.gets: list[str] = []

        def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
            self.gets.append(key)
            return super().get(key, byte_range=byte_range)

    with contextlib.ExitStack() as stack:
        if request.param == "local":
            from lv_core.storage.local import LocalStore

            inner: Any = LocalStore(tmp_path / "warehouse")
        else:
            from lv_core.storage.s3 import S3Store

            endpoint = s3_endpoint(request, request.param[3:])
            bucket = stack.enter_context(fresh_bucket(endpoint))
            inner = S3Store(bucket, "wh", s3_options_for(endpoint))
        lh = lv_core.Lakehouse(Recording(inner))
        lh.kind = "local" if request.param == "local" else "s3"  # type: ignore[attr-defined]
        yield lh
        lh.close()


# -- the browser tier: one JupyterLab server and one browser for the whole run -----------------------


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    """One JupyterLab server for every browser test, serving copies of tests/integration/notebooks; its
    kernels share the ``spark`` fixture's server (``spark_remote``)."""
    from tests.integration.browser_utils import ARTIFACTS, copy_notebooks, lab_server, missing_requirements

    why = missing_requirements()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("lab-root")
    copy_notebooks(Path(__file__).parent / "notebooks", root)
    with lab_server(root, tmp_path_factory.mktemp("lab-home"), log_path=ARTIFACTS / "jupyter-lab.log",
                    env=request.getfixturevalue("spark_remote")) as server:
        yield server


@pytest.fixture(scope="session")
def browser(lab: Any) -> Iterator[Any]:
    """One headless Chromium context for every browser test."""
    from tests.integration.browser_utils import launch_chromium

    with launch_chromium() as context:
        yield context


@pytest.fixture
def notebook(lab: Any, browser: Any) -> Iterator[Any]:
    """Opens a notebook page; afterwards keeps its final screenshot and browser console log."""
    from tests.integration.browser_utils import ARTIFACTS, NotebookPage

    pages: list[NotebookPage] = []

    def open_notebook(name: str) -> NotebookPage:
        nb = NotebookPage(browser, lab, name, ARTIFACTS)
        pages.append(nb)
        return nb.open()

    yield open_notebook
    for nb in pages:
        nb.screenshot(f"{Path(nb.notebook).stem}-final")
        nb.save_console()
        nb.close()
    (ARTIFACTS / "blocked-requests.txt").write_text("\n".join(getattr(browser, "blocked", [])))
