"""Fixtures of the integration tiers: one embedded Spark Connect server for the whole test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A Spark Connect session on this process's embedded server, shared by all spark-tier tests.

    Started on first use (about 6 s here), stopped at the end of the run. Without Java 17 it
    errors with the EngineError that says what to install.
    """
    from lv_core.engine.session import get_spark, stop_spark

    session = get_spark()
    yield session
    stop_spark()
