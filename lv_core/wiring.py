"""The composition root: the one place that wires the Spark data plane into a :class:`Lakehouse`.

Everything below it points one way (``lakehouse`` -> ``txn`` -> ``protocol`` -> ``delta`` ->
``storage``; ``engine`` -> ``txn.ports``/``delta``/``storage``); only this module knows both the
lakehouse and the engine.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping

from lv_core.engine.plane import SparkDataPlane
from lv_core.engine.spark_conf import normalize
from lv_core.lakehouse import Lakehouse
from lv_core.storage.uri import open_store

__all__ = ["Lakehouse", "connect"]

# Lakehouses built without an explicit data plane (``lv_core.Lakehouse(store)``) get Spark's.
Lakehouse.default_data_plane = SparkDataPlane


def connect(warehouse: str | os.PathLike[str] | None = None, *, spark: Any = None,
            storage_options: Mapping[str, Any] | None = None, spark_conf: Mapping[str, Any] | None = None,
            **options: Any) -> Lakehouse:
    """Open a warehouse: a path, ``file:///abs/path`` or ``s3://bucket/prefix`` (None -> $LV_WAREHOUSE or ./lakehouse).

    ``spark``: None (embedded local Spark Connect server, started on first data access), ``"sc://host:port"``,
    or a SparkSession. ``storage_options``: endpoint_url, region, credentials for S3/MinIO.
    ``spark_conf``: Spark settings, e.g. ``{"spark.driver.memory": "4g"}``: the embedded server gets them
    when it starts; a remote session (or one already running) gets those Spark allows at runtime
    (``spark.conf.set``), and a static one raises ConfigError naming it, with nothing changed.

    Raises:
        ConfigError: a malformed ``spark_conf`` key or value (checked here, before anything starts).
    """
    conf = normalize(spark_conf)
    store = open_store(warehouse, storage_options)
    plane = functools.partial(SparkDataPlane, spark_conf=conf) if conf else SparkDataPlane
    return Lakehouse(store, spark=spark, data_plane=plane, **options)
