"""Configure and inspect the Spark data plane of a lakehouse::

    lh = lv_core.connect("s3://bucket/wh", spark="sc://cluster:15002")
    api.configure(lh, data_path="direct", s3_scheme="s3a")   # the cluster reaches the bucket itself
    api.engine(lh).data_path, api.engine(lh).data_path_reason
"""

from __future__ import annotations

from typing import Any, Optional

from lv_core.engine.plane import SparkDataPlane
from lv_core.engine.spark_io import SparkEngine
from lv_core.errors import ConfigError
from lv_core.txn.ports import LakehousePort

__all__ = ["configure", "engine", "plane"]


def plane(lh: LakehousePort) -> SparkDataPlane:
    """The lakehouse's Spark data plane.

    Raises:
        ConfigError: the lakehouse runs another data plane.
    """
    p: Any = lh.data_plane
    if not isinstance(p, SparkDataPlane):
        raise ConfigError(f"this lakehouse's data plane is {type(p).__name__}, not Spark")
    return p


def configure(lh: LakehousePort, *, data_path: Optional[str] = None, s3_scheme: Optional[str] = None) -> None:
    """Choose how data moves for ``lh`` (see :meth:`SparkDataPlane.configure`)."""
    plane(lh).configure(data_path=data_path, s3_scheme=s3_scheme)


def engine(lh: LakehousePort) -> SparkEngine:
    """The lakehouse's data engine (starting or connecting Spark on first use)."""
    return plane(lh).engine()
