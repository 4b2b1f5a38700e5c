"""Warm the first-query path of a freshly started embedded Spark server, in the background.

A new server answers its first queries slowly: the JVM loads and JIT-compiles the analyser, the
optimiser, code generation, the Parquet writer and reader, Arrow conversion (4-7 s on two cores,
most of a first ``INSERT``). :func:`start` runs the same kinds of work on a throw-away folder of the
server's work directory in a daemon thread, right after the server answers, so that the user's first
statement finds them loaded. It prints nothing; a failing step is logged (logger
``lv_core.engine.warmup``, DEBUG) and skipped. Its Spark operations carry the tag :data:`TAG`, so
:meth:`Warmup.cancel` (called when the engine stops: disconnect, kernel exit) interrupts them.
The user's statements run alongside; they never wait for the warm-up, and each of its Spark jobs is a
single task, so it never holds every task slot of a small machine (Spark schedules jobs first come, first
served). ``LV_SPARK_WARMUP=0`` in the environment turns it off.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TAG", "Warmup", "start"]

log = logging.getLogger(__name__)

TAG = "lv-warmup"


class Warmup:
    """One background warm-up of a Spark session (see the module docstring)."""

    def __init__(self, spark: Any, scratch: str) -> None:
        self.spark = spark
        self.scratch = scratch
        self.stopped = threading.Event()
        self.done = threading.Event()
        self.steps: dict[str, float] = {}  #: seconds per finished step (tests and benchmarks read it)
        self.failed: dict[str, str] = {}  #: step -> error type of the steps that failed
        # Its own thread: Spark tags operations per thread, and a pool thread would carry the tag on.
        self.thread = threading.Thread(target=self._run, name="lv-spark-warmup", daemon=True)

    def _run(self) -> None:
        try:
            self.spark.addTag(TAG)  # per thread: only this thread's operations
        except Exception:  # an older client without tags: cancel() then only stops between steps
            log.debug("warm-up: no operation tags", exc_info=True)
        try:
            for name, step in self._steps():
                if self.stopped.is_set():
                    return
                t0 = time.monotonic()
                try:
                    step()
                except Exception as e:  # a warm-up step only saves time later: skip it
                    self.failed[name] = type(e).__name__
                    log.debug("warm-up step %s failed", name, exc_info=True)
                else:
                    self.steps[name] = round(time.monotonic() - t0, 3)
            log.debug("warm-up done: %s", self.steps)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.done.set()

    def _steps(self) -> list[tuple[str, Callable[[], object]]]:
        from pyspark.sql import functions as F

        from lv_core.engine.stream_io import default_parallelism

        spark = self.spark
        url = "file:" + self.scratch

        def read() -> None:  # what a SELECT does (the most common first statement): read, filter, aggregate
            import pyarrow as pa
            import pyarrow.parquet as pq

            os.makedirs(f"{self.scratch}/a", exist_ok=True)
            pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "v": [1.0, 2.0], "s": ["a", "b"]}),
                           f"{self.scratch}/a/part-0.parquet")
            df = spark.read.schema("id BIGINT, v DOUBLE, s STRING").parquet(f"{url}/a")
            df.where(F.col("v") > 0).toArrow()
            df.agg(F.count("*"), F.sum("v")).collect()

        def write() -> None:  # what an INSERT does: analyse, cast, write Parquet files
            df = spark.sql("SELECT * FROM VALUES (1L, 1.0D, 'a'), (2L, 2.0D, 'b') AS w(id, v, s)")
            df.schema  # noqa: B018 - an analyse round trip, as statements do before writing
            (df.select(F.col("id").cast("bigint"), F.col("v").cast("double"), F.col("s")).coalesce(1)
             .write.mode("error").option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
             .parquet(f"{url}/b"))

        def rewrite() -> None:  # what an UPDATE does: read the files with their names, rewrite rows
            df = spark.read.schema("id BIGINT, v DOUBLE, s STRING").parquet(f"{url}/b")
            changed = df.select(F.col("_metadata.file_path").alias("f"), "id",
                                F.when(F.col("id") == 1, F.col("v") + 1).otherwise(F.col("v")).alias("v"), "s")
            changed.where(F.col("id") >= 1).drop("f").coalesce(1).write.mode("error").parquet(f"{url}/c")

        def arrow_in() -> None:  # Arrow data sent to the server (the client-side data path)
            import pyarrow as pa

            spark.createDataFrame(pa.table({"id": [1, 2], "v": [1.0, 2.0]})).collect()

        return [("parallelism", lambda: default_parallelism(spark)), ("read", read), ("write", write),
                ("rewrite", rewrite), ("arrow", arrow_in)]

    def cancel(self, timeout_s: float = 10.0) -> None:
        """Stop the warm-up: no further step; the running Spark operation interrupted. Waits for it."""
        self.stopped.set()
        if self.done.is_set() or not self.thread.is_alive():
            return
        try:
            self.spark.interruptTag(TAG)
        except Exception:  # the session may already be closed: the step then fails and is skipped
            log.debug("warm-up: interrupt failed", exc_info=True)
        self.thread.join(timeout_s)


def start(spark: Any, work_dir: str) -> Warmup:
    """Begin warming ``spark`` (a fresh embedded server whose scratch folder is ``work_dir``)."""
    scratch = os.path.join(work_dir, "warmup")
    w = Warmup(spark, scratch)
    w.thread.start()
    return w
