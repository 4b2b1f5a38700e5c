"""The ``stream`` data path, client side: table data moves between the object store and the Spark
server's Python workers (the ``lv_files`` data source, :mod:`lv_core.engine.pyds`), never through
this process. Only file lists, options and the write manifest (names, partition values, sizes,
stats) pass through here.

Chosen by ``auto`` when the Spark server cannot reach the store but can run Python data sources
(Spark 4); credentials travel as data source options (``access.key``, ``secret.key``,
``session.token``: names Spark's redaction hides in plans and logs).
"""

from __future__ import annotations

import json
import re
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pyarrow as pa

from lv_core.errors import EngineError, NotFound
from lv_core.storage.base import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["StreamFiles", "default_parallelism", "supported"]

_registered: "weakref.WeakSet[Any]" = weakref.WeakSet()
_parallelism: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def supported(spark: Any) -> bool:
    """Whether ``spark`` can run Python data sources (Spark 4 sessions have ``dataSource``)."""
    return hasattr(spark, "dataSource")


_SPLITS = re.compile(r"\bRange \(0, 65536, step=1, splits=(\d+)\)")
#: A probe that Spark 4 accepts (a non-deterministic expression may not be an aggregate's argument,
#: so ``count(DISTINCT spark_partition_id())`` is refused; through a subquery it is a column).
_PROBE = "SELECT count(DISTINCT p) FROM (SELECT spark_partition_id() AS p FROM range(0, 65536))"


def default_parallelism(spark: Any) -> int:
    """The Spark server's default parallelism (what Spark divides a file scan's bytes by), asked once per
    session: ``spark.default.parallelism`` when set, else the splits of a ``range`` scan as its physical
    plan shows them (an explain, no Spark job), else the partitions such a scan really has (one small
    job); 8 when nothing answers. Never raises and logs nothing: the answer only sizes read partitions."""
    got = _parallelism.get(spark)
    if got is not None:
        return got
    got = 8
    try:
        conf = spark.conf.get("spark.default.parallelism", None)
        if conf:
            got = int(conf)
        else:
            explain = getattr(spark.range(0, 65536), "_explain_string", None)  # pyspark's own, not public
            m = _SPLITS.search(explain(mode="simple")) if explain is not None else None
            got = int(m.group(1)) if m else int(spark.sql(_PROBE).collect()[0][0])
    except Exception:  # an answer only sizes read partitions: the default is safe
        pass
    got = _parallelism[spark] = max(1, got)
    return got


class StreamFiles:
    """Reads and writes of one store's data files through the ``lv_files`` data source."""

    def __init__(self, spark: Any, store: ObjectStore) -> None:
        if store.scheme != "s3":
            raise EngineError(f"the stream data path serves S3 stores, not {store.url()}")
        from lv_core.engine.pyds import LvFiles  # pyspark.sql.datasource: loaded when first used

        self.spark = spark
        self.store = store
        if spark not in _registered:
            spark.dataSource.register(LvFiles)
            _registered.add(spark)
        opts = store.storage_options_for_deltalake()
        bucket_and_root = store.url().split("://", 1)[1].rstrip("/")
        self.bucket, _, root = bucket_and_root.partition("/")
        self.root = f"{root}/" if root else ""
        self._options = {"bucket": self.bucket, "region": opts.get("AWS_REGION", ""),
                         "endpoint": opts.get("AWS_ENDPOINT_URL", "")}
        if opts.get("AWS_ACCESS_KEY_ID"):
            self._options.update({"access.key": opts["AWS_ACCESS_KEY_ID"],
                                  "secret.key": opts.get("AWS_SECRET_ACCESS_KEY", ""),
                                  "session.token": opts.get("AWS_SESSION_TOKEN", "")})

    def __repr__(self) -> str:  # never the options: they hold credentials
        return f"StreamFiles(s3://{self.bucket}/{self.root})"

    def probe(self) -> None:
        """Run the data source once on the server (no file): its Python workers must import ``lv_core``.

        Raises:
            Exception: whatever Spark raises when they cannot.
        """
        from lv_core.engine.pyds import NAME

        self.spark.read.format(NAME).schema("x INT").option("files", "[]").options(**self._options).load().collect()

    def parallelism(self) -> int:
        """The Spark server's default parallelism (see :func:`default_parallelism`)."""
        return default_parallelism(self.spark)

    def scan(self, keys: Sequence[str], raws: Sequence[str], values: Sequence[Mapping[str, Optional[str]]],
             sizes: Sequence[int], schema: Any, parts: Sequence[str], key_column: Optional[str] = None,
             row_column: Optional[str] = None) -> "DataFrame":
        """One read of the files ``keys`` (store keys) with Spark schema ``schema``: data columns by name,
        ``parts`` (string columns in ``schema``) from ``values``, ``key_column`` holding each file's
        entry of ``raws`` and ``row_column`` each row's index in its file (when named)."""
        from lv_core.engine.pyds import NAME

        files = [[self.root + k, r, dict(v), int(n)] for k, r, v, n in zip(keys, raws, values, sizes, strict=True)]
        reader = (self.spark.read.format(NAME).schema(schema).options(**self._options)
                  .option("files", json.dumps(files)).option("partition_columns", json.dumps(list(parts)))
                  .option("parallelism", str(self.parallelism())))
        if key_column:
            reader = reader.option("key_column", key_column)
        if row_column:
            reader = reader.option("row_column", row_column)
        return reader.load()

    def write(self, df: "DataFrame", stage_key: str, schema: pa.Schema, parts: Sequence[str],
              max_rows: Optional[int] = None) -> list[dict[str, Any]]:
        """Write ``df`` (columns of ``schema``, the physical Arrow schema) as Parquet files under
        ``stage_key``, one per partition value per task (tasks write in parallel; a new file after
        ``max_rows`` rows); return the manifest entries: ``file`` (relative to ``stage_key``), ``values``
        (partition values), ``size``, ``stats`` (JSON)."""
        from pyspark.sql import functions as F

        from lv_core.engine.pyds import NAME, schema_option

        manifest = f"{stage_key}/_lv_manifest-{uuid.uuid4().hex}.json"
        w = df.sortWithinPartitions(*[F.col(p) for p in parts]) if parts else df  # every task writes
        (w.write.format(NAME).mode("append").options(**self._options)
         .option("stage", self.root + stage_key).option("manifest", self.root + manifest)
         .option("arrow_schema", schema_option(schema)).option("partition_columns", json.dumps(list(parts)))
         .option("max_rows", str(max_rows or 0)).save())
        try:
            data = self.store.get(manifest).data
        except NotFound:
            raise EngineError(f"the Spark write to {stage_key} finished without its manifest") from None
        self.store.delete(manifest)
        return list(json.loads(data)["files"])
