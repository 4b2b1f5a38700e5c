"""Entry points of the data plane, called by :class:`~lv_core.Transaction` and :class:`~lv_core.Lakehouse`.

One :class:`~lv_core.engine.spark_io.SparkEngine` per lakehouse (created on first data access): the
Spark session of ``connect(spark=...)`` and the data path, chosen once and logged (logger
``lv_core.engine``). Configure it before the first data access with :func:`configure`, or with the
environment: ``LV_DATA_PATH`` (``auto``/``direct``/``arrow``) and ``LV_SPARK_S3_SCHEME`` (``s3a``)::

    lh = lv_core.connect("s3://bucket/wh", spark="sc://cluster:15002")
    api.configure(lh, data_path="direct", s3_scheme="s3a")   # the cluster reaches the bucket itself
    api.engine(lh).data_path, api.engine(lh).data_path_reason
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Mapping, Optional

import pyarrow as pa

from lv_core.engine import spark_ops as ops
from lv_core.engine.session import get_spark
from lv_core.engine.spark_io import DATA_PATHS, SparkEngine
from lv_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lv_core.lakehouse import Lakehouse
    from lv_core.txn.transaction import Transaction

__all__ = ["configure", "engine", "lakehouse_read", "lakehouse_spark", "txn_delete", "txn_insert",
           "txn_table", "txn_update"]

_lock = threading.Lock()


def configure(lh: "Lakehouse", *, data_path: Optional[str] = None, s3_scheme: Optional[str] = None) -> None:
    """Choose how data moves for ``lh``: ``data_path`` ``"auto"`` (default), ``"direct"`` (Spark reads and
    writes the files; on S3 the server needs an S3 connector) or ``"arrow"`` (through this client);
    ``s3_scheme``: what ``s3://`` becomes for Spark on the direct path (default ``"s3a"``).
    Takes effect at the next data access."""
    if data_path is not None and data_path not in DATA_PATHS:
        raise ConfigError(f"data_path must be one of {', '.join(DATA_PATHS)}, not {data_path!r}")
    if s3_scheme is not None and not (isinstance(s3_scheme, str) and s3_scheme.isidentifier()):
        raise ConfigError(f"s3_scheme must be a URL scheme such as 's3a' or 's3', not {s3_scheme!r}")
    with _lock:
        opts = dict(getattr(lh, "_lv_engine_options", {}))
        if data_path is not None:
            opts["data_path"] = data_path
        if s3_scheme is not None:
            opts["s3_scheme"] = s3_scheme
        lh._lv_engine_options = opts  # type: ignore[attr-defined]
        lh._lv_engine = None  # type: ignore[attr-defined]


def engine(lh: "Lakehouse") -> SparkEngine:
    """The lakehouse's data engine (starting or connecting Spark on first use)."""
    spark = get_spark(lh._spark_arg)
    eng: Optional[SparkEngine] = getattr(lh, "_lv_engine", None)
    if eng is not None and eng.spark is spark:
        return eng
    with _lock:
        eng = getattr(lh, "_lv_engine", None)
        if eng is not None and eng.spark is spark:
            return eng
        opts: Mapping[str, str] = getattr(lh, "_lv_engine_options", {})
        data_path = opts.get("data_path") or os.environ.get("LV_DATA_PATH") or "auto"
        s3_scheme = opts.get("s3_scheme") or os.environ.get("LV_SPARK_S3_SCHEME") or "s3a"
        eng = SparkEngine(spark, lh.store, data_path=data_path, s3_scheme=s3_scheme,
                          embedded=lh._spark_arg is None)
        lh._lv_engine = eng  # type: ignore[attr-defined]
        return eng


def lakehouse_spark(lh: "Lakehouse") -> "SparkSession":
    """``Lakehouse.spark``."""
    return engine(lh).spark


def lakehouse_read(lh: "Lakehouse", name: str, version: Optional[int] = None) -> "DataFrame":
    """``Lakehouse.read``: the committed table (latest or at ``version``) as a DataFrame, no transaction."""
    snap = lh.snapshot(name, version)
    files = sorted(snap.files.values(), key=lambda f: f.path)
    return engine(lh).read(name, snap, files)


def txn_table(txn: "Transaction", name: str) -> "DataFrame":
    """``Transaction.table``: an exposed read of the transaction's view (see spark_ops.TableRead)."""
    return txn.execute(ops.read(engine(txn.lh), name)).df


def _insertable(data: Any) -> ops.Insertable:
    """Spark DataFrames pass through; pandas / Arrow / a list of dicts become Arrow or stay a list."""
    if _is_spark_frame(data):
        return data
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, (list, tuple)):
        return list(data)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            from lv_core.errors import SchemaError

            raise SchemaError(f"cannot convert the pandas DataFrame: {e}") from None
    raise ConfigError(f"cannot insert a {type(data).__name__}: give a Spark DataFrame, a pyarrow.Table, "
                      "a pandas DataFrame or a list of dicts")


def _is_spark_frame(data: Any) -> bool:
    try:
        from pyspark.sql import DataFrame as ClassicFrame
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
    except ImportError:  # pragma: no cover
        return False
    return isinstance(data, (ClassicFrame, ConnectFrame))


def txn_insert(txn: "Transaction", name: str, data: Any) -> int:
    """``Transaction.insert``: a blind append; returns the number of rows."""
    rows = _insertable(data)
    return int(txn.execute(ops.insert(engine(txn.lh), name, rows)))


def txn_update(txn: "Transaction", name: str, set: Mapping[str, str], where: Optional[str] = None) -> int:  # noqa: A002
    """``Transaction.update``: copy-on-write UPDATE; returns rows updated."""
    if not isinstance(set, Mapping):
        raise ConfigError("set must be a mapping {column: 'SQL expression'}")
    return int(txn.execute(ops.update(engine(txn.lh), name, set, where)))


def txn_delete(txn: "Transaction", name: str, where: Optional[str] = None) -> int:
    """``Transaction.delete``: copy-on-write DELETE; returns rows deleted."""
    return int(txn.execute(ops.delete(engine(txn.lh), name, where)))
