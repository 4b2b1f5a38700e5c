"""Spark tier: ``connect(spark_conf=...)`` against real Spark Connect servers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import lv_core
from lv_core.engine.session import local_server
from lv_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_remote_session_gets_runtime_settings_and_refuses_static_ones(spark: SparkSession, tmp_path: Path) -> None:
    info = local_server()
    assert info is not None
    url = info.url  # an sc:// client of its own (its own server-side session)
    lh = lv_core.connect(str(tmp_path / "a"), spark=url,
                         spark_conf={"spark.sql.shuffle.partitions": 7, "spark.lakevilla.test.note": "hi"})
    lh.create_table("t", "id BIGINT")
    assert lh.read("t").count() == 0  # first data access applies the settings
    assert lh.spark.conf.get("spark.sql.shuffle.partitions") == "7"
    assert lh.spark.conf.get("spark.lakevilla.test.note") == "hi"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"  # the embedded session is another one

    bad = lv_core.connect(str(tmp_path / "b"), spark=url,
                          spark_conf={"spark.sql.shuffle.partitions": 9, "spark.driver.memory": "9g"})
    bad.create_table("t", "id BIGINT")
    with pytest.raises(ConfigError, match="spark.driver.memory is a static Spark setting") as e:
        bad.read("t")
    assert "No setting was changed" in str(e.value)
    assert lh.spark.conf.get("spark.sql.shuffle.partitions") == "7"  # not 9: all or nothing

    typo = lv_core.connect(str(tmp_path / "c"), spark=url, spark_conf={"spark.sql.shuffle.partitions": "many"})
    typo.create_table("t", "id BIGINT")
    with pytest.raises(ConfigError, match="Spark refused spark.sql.shuffle.partitions=many"):
        typo.read("t")


_EMBEDDED = """
import json, sys
import lv_core
from lv_core.engine.session import local_server, stop_spark
from lv_core.errors import ConfigError
lh = lv_core.connect(sys.argv[1], spark_conf={"spark.driver.memory": "1200m", "spark.sql.shuffle.partitions": "3",
                                            "spark.driver.extraJavaOptions": "-Dlakevilla.test=1"})
lh.create_table("t", "id BIGINT")
n = lh.read("t").count()
conf = lh.spark.conf
out = {"n": n, "memory": conf.get("spark.driver.memory"), "partitions": conf.get("spark.sql.shuffle.partitions"),
       "java_opts": conf.get("spark.driver.extraJavaOptions"), "server_conf": dict(local_server().conf)}
other = lv_core.connect(sys.argv[1], spark_conf={"spark.driver.memory": "2g"})
try:
    other.read("t")
    out["static"] = "accepted"
except ConfigError as e:
    out["static"] = str(e)
stop_spark()
print(json.dumps(out))
"""


def test_embedded_server_starts_with_the_settings(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_EMBEDDED), str(tmp_path / "wh")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["n"], out["memory"], out["partitions"]) == (0, "1200m", "3")
    assert "-Dlakevilla.test=1" in out["java_opts"] and "log4j2" in out["java_opts"]  # appended to ours
    assert out["server_conf"]["spark.driver.memory"] == "1200m"
    assert "spark.driver.memory is a static Spark setting" in out["static"] and "runs with 1200m" in out["static"]
    assert "stop_spark" in out["static"]
