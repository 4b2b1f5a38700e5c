"""Query results as analysts use them: pandas frames with nullable dtypes (an integer stays an integer,
NULL stays NULL), a result table that shows NULL as ``NULL``, ``--out`` and ``--chart`` of a cell's
last SELECT.

One Arrow fetch per SELECT serves the displayed rows, the ``--out`` frame and the chart: the rows go
through ``DataFrame.toArrow()`` and :func:`frame_of`, never through Spark's ``toPandas`` (which turns
an integer column with a NULL into floats and NULL into ``NaN``). ``--out`` loads at most
``LvMagics.out_limit`` rows into the kernel (default 1,000,000; 0: no limit) and says so when the
result has more; ``--spark`` stores the lazy Spark DataFrame instead (nothing is loaded).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pandas as pd
import pyarrow as pa

from lv_core.engine.sql_ast import Statement
from lv_core.engine.sql_hints import did_you_mean
from lv_magic.args import ArgError
from lv_magic.chart import ChartSpec, chart_item
from lv_magic.context import MagicContext
from lv_magic.display import Table

__all__ = ["CHART_ROWS", "Keep", "ResultTable", "cell_text", "frame_of", "keep_for", "show_query", "store"]

#: The most rows a chart draws (a chart of more points says so under it).
CHART_ROWS = 10_000

# Arrow -> pandas' nullable dtypes (pandas' dtype_backend="numpy_nullable"): NULL is pd.NA in every column.
_NULLABLE: dict[pa.DataType, Any] = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype(),
    pa.float32(): pd.Float32Dtype(), pa.float64(): pd.Float64Dtype(), pa.string(): pd.StringDtype(),
    pa.large_string(): pd.StringDtype(),
}


def frame_of(table: pa.Table) -> pd.DataFrame:
    """``table`` as pandas with nullable dtypes: Int64 stays Int64 with NULLs (pd.NA), not float64/NaN."""
    return table.to_pandas(types_mapper=_NULLABLE.get)


def fetch(result: Any, rows: Optional[int]) -> pd.DataFrame:
    """The first ``rows`` rows (None: all) of a Spark DataFrame, through Arrow."""
    return frame_of((result if rows is None else result.limit(rows)).toArrow())


def cell_text(value: Any) -> str:
    """How a result cell reads: ``NULL`` for SQL NULL (None, pd.NA, NaT), ``NaN`` for a float NaN."""
    if value is None or value is pd.NA or value is pd.NaT:
        return "NULL"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return str(value)


@dataclass
class Keep:
    """What a cell keeps of its last SELECT (``statement``): ``--out`` (a pandas frame of at most
    ``out_limit`` rows, or with ``spark`` the Spark DataFrame) and ``--chart``. Filled in while that
    statement runs: ``frame`` (the rows fetched), ``total`` (its row count when known)."""

    statement: Statement
    out: Optional[str] = None
    spark: bool = False
    chart: Optional[ChartSpec] = None
    out_limit: int = 1_000_000
    frame: Optional[pd.DataFrame] = None
    total: Optional[int] = None

    def rows_wanted(self, shown: int) -> Optional[int]:
        """How many rows to fetch for display and what the cell keeps (None: all)."""
        want = shown
        if self.out and not self.spark:
            if self.out_limit <= 0:
                return None
            want = max(want, self.out_limit)
        if self.chart is not None:
            want = max(want, CHART_ROWS)
        return want


def keep_for(ctx: MagicContext, lh: Any, args: Any, statements: Optional[Sequence[Statement]]) -> Optional[Keep]:
    """The cell's :class:`Keep`, checked before anything runs (None when the cell keeps nothing).

    Raises:
        ArgError: ``--spark``/``--x``/``--y`` without what they refine, ``--chart`` or ``--out`` of a
            Python cell, ``--chart`` of a cell without a SELECT, a chart column the SELECT does not return.
    """
    prog = "%%lvsql" if not hasattr(args, "python") else "%%lvtxn"
    if args.spark and not args.out:
        raise ArgError(f"{prog}: --spark says how --out stores the result; add --out NAME")
    if (args.x or args.y) and not args.chart:
        raise ArgError(f"{prog}: --x and --y choose the chart's columns; add --chart bar|line|scatter")
    if not args.out and not args.chart:
        return None
    what = "--chart" if args.chart else "--out"
    if statements is None:
        raise ArgError(f"{prog}: {what} takes the last SELECT of a SQL cell; in a --python cell assign the "
                       "variable (txn.sql(...).toPandas()) yourself")
    selects = [st for st in statements if st.kind == "select"]
    if not selects:
        if args.chart:
            raise ArgError(f"{prog}: --chart draws the cell's last SELECT, and the cell has none")
        return None  # --out of a cell without a SELECT leaves the variable alone (as before)
    chart = None
    if args.chart:
        chart = ChartSpec(args.chart, args.x, [c.strip() for c in args.y.split(",") if c.strip()] if args.y else None)
        _check_columns(prog, chart, output_columns(selects[-1], lh))
    return Keep(selects[-1], out=args.out, spark=args.spark, chart=chart,
                out_limit=ctx.out_limit)


_NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")


def output_columns(st: Statement, lh: Any) -> Optional[dict[str, Optional[str]]]:
    """{name: Delta type, or None if unknown} of the columns a SELECT returns, when the query alone
    says so (plain columns, aliases, ``*`` of one lakehouse table); None when only Spark knows
    (an expression without an alias, ``*`` of a join)."""
    from sqlglot import exp

    tree = st.tree
    while isinstance(tree, exp.Union):  # the left side names the columns
        tree = tree.left
    if not isinstance(tree, exp.Select):
        return None
    try:  # the check is a courtesy: Spark has the last word
        schema = ({f.name.lower(): (f.name, f.type if isinstance(f.type, str) else "")
                   for f in lh.snapshot(st.sources[0]).schema} if len(st.sources) == 1 else {})
    except Exception:
        schema = {}
    names: dict[str, Optional[str]] = {}
    for e in tree.expressions:
        if isinstance(e, exp.Star):
            if not schema:
                return None
            names.update(dict(schema.values()))
        elif isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
            names[e.name] = schema.get(e.name.lower(), (None, None))[1]
        elif isinstance(e, exp.Alias):
            names[e.alias] = None
        else:
            return None
    return names


def _check_columns(prog: str, chart: ChartSpec, names: Optional[dict[str, Optional[str]]]) -> None:
    if names is None:
        return
    lower = {n.lower(): (n, t) for n, t in names.items()}
    for col in ([chart.x] if chart.x else []) + (chart.y or []):
        if col.lower() not in lower:
            hint = did_you_mean(col, names) or f" (its columns: {', '.join(names)})"
            raise ArgError(f"{prog}: the chart's column {col!r} is not in the last SELECT's result{hint}")
    for col in chart.y or []:
        name, typ = lower[col.lower()]
        if typ is not None and not typ.startswith(_NUMERIC):
            raise ArgError(f"{prog}: the chart's y column {name!r} is {typ or 'nested'}, not a number")


class ResultTable:
    """A statement's result rows: the first ``len(frame)`` rows (NULL as ``NULL``, integers as
    integers, no pandas index) and the total row count."""

    def __init__(self, title: str, frame: pd.DataFrame, total: int, more: str = "--out VAR keeps them all") -> None:
        self.title, self.frame, self.total, self.more = title, frame, total, more

    def _count(self) -> str:
        shown = len(self.frame)
        rows = f"{self.total} row{'s' if self.total != 1 else ''}"
        return f"{self.title}: {rows}" + (f" (showing the first {shown}; {self.more})" if shown < self.total else "")

    def _rows(self) -> list[list[str]]:
        return [[cell_text(v) for v in row] for row in self.frame.itertuples(index=False, name=None)]

    def _one_line(self) -> Optional[str]:
        """A single row of a few columns reads as one line: ``SELECT (x): 1 row: n = 6, s = NULL``."""
        if self.total != 1 or len(self.frame) != 1 or not 0 < len(self.frame.columns) <= 4:
            return None
        values = self._rows()[0]
        return f"{self._count()}: " + ", ".join(f"{c} = {v}" for c, v in zip(self.frame.columns, values, strict=True))

    def _table(self) -> Table:
        return Table(self._rows(), [str(c) for c in self.frame.columns], "lv-rows")

    def _repr_html_(self) -> str:
        one = self._one_line()
        if one is not None:
            return f"<div class='lv-result'>{html.escape(one)}</div>"
        table = self._table()._repr_html_() if len(self.frame.columns) else ""
        return f"<div class='lv-result'><div class='lv-note'>{html.escape(self._count())}</div>{table}</div>"

    def __repr__(self) -> str:
        one = self._one_line()
        if one is not None:
            return one
        body = repr(self._table()) if len(self.frame) and len(self.frame.columns) else ""
        return f"{self._count()}\n{body}".rstrip()


def show_query(ctx: MagicContext, st: Statement, title: str, result: Any, items: list[Any],
               keep: Optional[Keep]) -> None:
    """Fetch a query's rows once (Arrow) and add its result table to ``items`` (and, for the cell's
    kept SELECT, fill ``keep`` and add the chart under the table)."""
    limit = ctx.row_limit
    mine = keep is not None and st is keep.statement
    want = keep.rows_wanted(limit) if mine and keep is not None else limit
    frame = fetch(result, None if want is None else want + 1)
    complete = want is None or len(frame) <= want
    total = len(frame) if complete else int(result.count())
    out_limit = ctx.out_limit
    more = ("--out VAR keeps them all" if out_limit <= 0 or total <= out_limit
            else f"--out VAR keeps the first {out_limit:,}, with --spark all of them")
    items.append(ResultTable(title, frame.head(limit), total, more))
    if not mine or keep is None:
        return
    keep.frame = frame if keep.out_limit <= 0 else frame.head(keep.out_limit)
    keep.total = total
    if keep.chart is not None:
        items.append(chart_item(frame.head(CHART_ROWS), keep.chart, total))


def store(ctx: MagicContext, keep: Optional[Keep], last: Any, items: list[Any]) -> None:
    """Put the kept result in the user's variable (``--out``): the pandas frame, or with ``--spark``
    the Spark DataFrame ``last``; a frame cut at ``out_limit`` rows says so in ``items``."""
    if keep is None or not keep.out or ctx.user_ns is None:
        return
    if keep.spark:
        if last is not None:
            ctx.user_ns[keep.out] = last
        return
    if keep.frame is None:
        return
    ctx.user_ns[keep.out] = keep.frame
    if keep.total is not None and len(keep.frame) < keep.total:
        items.append(f"--out {keep.out}: the first {len(keep.frame):,} of {keep.total:,} rows in pandas "
                     f"(LvMagics.out_limit); --out {keep.out} --spark keeps the whole result as a Spark DataFrame")
