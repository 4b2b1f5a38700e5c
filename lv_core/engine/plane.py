"""The Spark data plane: implements :class:`lv_core.txn.ports.DataPlane` for one lakehouse.

One :class:`~lv_core.engine.spark_io.SparkEngine` per lakehouse (created on first data access): the
Spark session of ``connect(spark=...)`` and the data path, chosen once and logged (logger
``lv_core.engine``). Configure it before the first data access with :meth:`SparkDataPlane.configure`
(or :func:`lv_core.engine.api.configure`), or with the environment: ``LV_DATA_PATH``
(``auto``/``direct``/``arrow``) and ``LV_SPARK_S3_SCHEME`` (``s3a``).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Mapping, Optional

import pyarrow as pa

from lv_core.engine import progress
from lv_core.engine import spark_ops as ops
from lv_core.engine.session import env_remote, get_spark, local_server, public_url, warm_up
from lv_core.engine.spark_conf import apply_runtime, normalize
from lv_core.engine.spark_io import DATA_PATHS, SparkEngine
from lv_core.engine.sql import SqlSession, autocommit_sql, run_bound, txn_sql
from lv_core.engine.sql_ast import BoundStatement
from lv_core.errors import ConfigError, SchemaError
from lv_core.txn.ports import LakehousePort, TransactionPort

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

__all__ = ["SparkDataPlane"]


class SparkDataPlane:
    """Reads, writes and SQL of one lakehouse, computed by Spark (see :mod:`lv_core.engine.spark_io`).

    Args:
        lh: the lakehouse (through the port the data plane may use).
        spark: ``connect(spark=...)``: None (the server ``SPARK_REMOTE`` names, else the embedded local
            server), ``"sc://host:port"`` or a session.
        spark_conf: ``connect(spark_conf=...)``: Spark settings (see :mod:`lv_core.engine.spark_conf`):
            given to the embedded server when it starts, else set on the session at runtime.
    """

    def __init__(self, lh: LakehousePort, spark: Any = None, *, spark_conf: Mapping[str, Any] | None = None) -> None:
        self.lh = lh
        self._spark_arg = spark if spark is not None else env_remote()
        self._spark_conf = normalize(spark_conf)
        self._lock = threading.Lock()
        self._options: dict[str, str] = {}
        self._engine: Optional[SparkEngine] = None
        self._session = SqlSession()  # BEGIN ... COMMIT across lh.sql calls

    def configure(self, *, data_path: Optional[str] = None, s3_scheme: Optional[str] = None) -> None:
        """Choose how data moves: ``data_path`` ``"auto"`` (default), ``"direct"`` (Spark reads and
        writes the files; on S3 the server needs an S3 connector) or ``"arrow"`` (through this client);
        ``s3_scheme``: what ``s3://`` becomes for Spark on the direct path (default ``"s3a"``).
        Takes effect at the next data access."""
        if data_path is not None and data_path not in DATA_PATHS:
            raise ConfigError(f"data_path must be one of {', '.join(DATA_PATHS)}, not {data_path!r}")
        if s3_scheme is not None and not (isinstance(s3_scheme, str) and s3_scheme.isidentifier()):
            raise ConfigError(f"s3_scheme must be a URL scheme such as 's3a' or 's3', not {s3_scheme!r}")
        with self._lock:
            if data_path is not None:
                self._options["data_path"] = data_path
            if s3_scheme is not None:
                self._options["s3_scheme"] = s3_scheme
            self._engine = None

    def engine(self) -> SparkEngine:
        """The data engine (starting or connecting Spark on first use)."""
        spark = get_spark(self._spark_arg, conf=self._spark_conf)
        eng = self._engine
        if eng is not None and eng.spark is spark:
            return eng
        with self._lock:
            eng = self._engine
            if eng is not None and eng.spark is spark:
                return eng
            data_path = self._options.get("data_path") or os.environ.get("LV_DATA_PATH") or "auto"
            s3_scheme = self._options.get("s3_scheme") or os.environ.get("LV_SPARK_S3_SCHEME") or "s3a"
            self._apply_conf(spark)
            eng = SparkEngine(spark, self.lh.store, data_path=data_path, s3_scheme=s3_scheme,
                              embedded=self._spark_arg is None)
            self._engine = eng
        if self._spark_arg is None:
            warm_up()  # a fresh embedded server: warm its first-query path in the background (once)
        return eng

    @property
    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of ``connect(spark_conf=...)`` (checked, as strings)."""
        return dict(self._spark_conf)

    def _apply_conf(self, spark: Any) -> None:
        """Settings the server did not start with are set at runtime (all or nothing, else ConfigError)."""
        conf = dict(self._spark_conf)
        if self._spark_arg is None:
            server = local_server()
            started = server.conf if server is not None else {}
            conf = {k: v for k, v in conf.items() if started.get(k) != v}
            where = "the embedded Spark server of this process"
        else:
            where = f"the Spark session {public_url(str(self._spark_arg))}"
        if conf:
            apply_runtime(spark, conf, where=where)

    # -- DataPlane -----------------------------------------------------------------------------
    @property
    def spark(self) -> "SparkSession | ConnectSession":
        return self.engine().spark

    def read(self, name: str, version: Optional[int] = None) -> "DataFrame":
        """The committed table (latest or at ``version``) as a DataFrame, no transaction."""
        snap = self.lh.snapshot(name, version)
        files = sorted(snap.files.values(), key=lambda f: f.path)
        return self.engine().read(name, snap, files)

    def table(self, txn: TransactionPort, name: str) -> "DataFrame":
        """An exposed read of the transaction's view (see spark_ops.TableRead)."""
        return txn.execute(ops.read(self.engine(), name)).df

    def insert(self, txn: TransactionPort, name: str, data: Any) -> int:
        """A blind append; returns the number of rows."""
        rows = _insertable(data)
        return int(txn.execute(ops.insert(self.engine(), name, rows)))

    def update(self, txn: TransactionPort, name: str, set: Mapping[str, str],  # noqa: A002
               where: Optional[str] = None) -> int:
        """Copy-on-write UPDATE; returns rows updated."""
        if not isinstance(set, Mapping):
            raise ConfigError("set must be a mapping {column: 'SQL expression'}")
        return int(txn.execute(ops.update(self.engine(), name, set, where)))

    def delete(self, txn: TransactionPort, name: str, where: Optional[str] = None) -> int:
        """Copy-on-write DELETE; returns rows deleted."""
        return int(txn.execute(ops.delete(self.engine(), name, where)))

    def sql(self, txn: TransactionPort, statement: str) -> Any:
        return txn_sql(self.lh, self.engine, txn, statement)

    def autocommit_sql(self, statement: str) -> Any:
        return autocommit_sql(self.lh, self.engine, statement, session=self._session)

    def run_bound(self, txn: Optional[TransactionPort], st: BoundStatement, number: int = 1) -> Any:
        """Run a statement parsed and bound before (a notebook cell's), in ``txn`` (see
        :func:`lv_core.engine.sql.run_bound`)."""
        return run_bound(self.lh, self.engine, txn, st, number)

    def interrupt(self, txn: TransactionPort) -> None:
        """Interrupt ``txn``'s running Spark operation (see :mod:`lv_core.engine.progress`)."""
        eng = self._engine
        progress.interrupt(eng.spark if eng is not None else None, txn.id)


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
