"""Row rules of a table evaluated by Spark on the rows a write adds: CHECK constraints and column
invariants (:func:`lv_core.delta.features.constraints`).

A rule holds for a row only when its SQL expression is true (false or null violate it, as the Delta
spec says). :func:`enforce` adds the test to the plan that writes the rows, so Spark checks each row
as it writes it: the first violation fails the query (nothing is committed, the staged files are
deleted) with a :class:`~lv_core.errors.ConstraintViolation` naming the rule and showing the row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from lv_core.delta.actions import Metadata
from lv_core.delta.features import constraints
from lv_core.engine.spark_schema import CHECK_TAG, col, spark_errors
from lv_core.errors import ConstraintViolation

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

__all__ = ["check_rows", "enforce"]

#: At most this many characters of the violating row are shown.
ROW_TEXT = 400


def _violation(df: DataFrame, rule: str, sql: str, table: str) -> tuple[Column, Column]:
    """(the row violates the rule, the message naming the rule and showing the row)."""
    from pyspark.sql import functions as F

    bad = ~F.coalesce(F.expr(sql).cast("boolean"), F.lit(False))
    row = F.substring(F.to_json(F.struct(*[col(c) for c in df.columns])), 1, ROW_TEXT)
    msg = F.concat(F.lit(f"{CHECK_TAG} {rule} ({sql}) of table {table!r} is violated by the row "), row)
    return bad, msg


def enforce(df: DataFrame, metadata: Metadata | None, table: str) -> DataFrame:
    """``df`` with every rule of the table checked on each row when Spark runs it (same plan)."""
    from pyspark.sql import functions as F

    rules = constraints(metadata)
    if not rules:
        return df
    with spark_errors(f"checking the constraints of {table!r}"):
        for rule, sql in rules:
            bad, msg = _violation(df, rule, sql, table)
            df = df.where(F.when(bad, F.raise_error(msg)).otherwise(F.lit(True)))
    return df


def check_rows(spark: SparkSession | ConnectSession, data: pa.Table, metadata: Metadata | None, table: str) -> None:
    """Check rows held by this client (one Spark query over them) before they are written.

    Raises:
        ConstraintViolation: a row breaks a rule (the first one found is shown).
    """
    rules = constraints(metadata)
    if not rules or data.num_rows == 0:
        return
    with spark_errors(f"checking the constraints of {table!r}"):
        df = spark.createDataFrame(data)
        for rule, sql in rules:
            bad, msg = _violation(df, rule, sql, table)
            hit = df.where(bad).select(msg.alias("m")).limit(1).collect()
            if hit:
                text = str(hit[0]["m"])[len(CHECK_TAG):].strip()
                raise ConstraintViolation(text + "; nothing was written.")
