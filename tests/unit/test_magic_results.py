"""Results as analysts use them, without Spark: nullable pandas frames from Arrow, NULL shown as NULL
and integers as integers, the --out/--spark/--chart options checked before anything runs, charts as
SVG, and did-you-mean for %lv commands."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from lv_core.engine.sql_parse import parse_script
from lv_magic.args import ArgError, parse_lvsql, parse_lvtxn, split_line
from lv_magic.chart import ChartSpec, chart_item, render_svg
from lv_magic.context import MagicContext
from lv_magic.results import Keep, ResultTable, frame_of, keep_for, store
from lv_magic.state import KernelState


def sums() -> pd.DataFrame:
    """What ``SELECT sum(n), sum(n) FILTER (WHERE false), max(s), avg(v)`` returns, as Arrow."""
    return frame_of(pa.table({"total": pa.array([6], pa.int64()), "none": pa.array([None], pa.int64()),
                              "s": pa.array([None], pa.string()), "v": pa.array([2.5])}))


def test_arrow_frames_keep_integers_and_nulls() -> None:
    df = sums()
    assert str(df.total.dtype) == "Int64" and df.total[0] == 6
    assert df.none.isna()[0] and df["none"].dtype == "Int64"  # not float64 NaN
    assert df.s.isna()[0] and str(df.v.dtype) == "Float64"


def test_result_table_shows_null_and_integers() -> None:
    one = ResultTable("SELECT (t)", sums(), 1)
    assert repr(one) == "SELECT (t): 1 row: total = 6, none = NULL, s = NULL, v = 2.5"
    assert "total = 6," in one._repr_html_() and "NaN" not in one._repr_html_() and "6.0" not in repr(one)
    many = frame_of(pa.table({"id": pa.array([1, 2], pa.int64()), "n": pa.array([None, 3], pa.int32()),
                              "f": pa.array([float("nan"), None])}))
    table = ResultTable("SELECT (t)", many, 30)
    text = repr(table).splitlines()
    assert text[0].startswith("SELECT (t): 30 rows (showing the first 2;")
    assert text[1].split() == ["id", "n", "f"] and text[2].split() == ["1", "NULL", "NaN"]
    assert text[3].split() == ["2", "3", "NULL"]
    page = table._repr_html_()
    assert "<td>NULL</td>" in page and "<td>3</td>" in page and "3.0" not in page and "<NA>" not in page


def test_chart_and_out_options_parse() -> None:
    a = parse_lvsql("--out df --spark --chart Bar --x day --y a,b")
    assert (a.out, a.spark, a.chart, a.x, a.y) == ("df", True, "bar", "day", "a,b")
    assert parse_lvtxn("--chart line").chart == "line"
    with pytest.raises(ArgError, match="unknown chart 'pie'; choose one of: bar, line, scatter"):
        parse_lvsql("--chart pie")


class _Lh:
    def snapshot(self, table: str) -> Any:
        return SimpleNamespace(schema=[SimpleNamespace(name="day", type="date"),
                                       SimpleNamespace(name="amount", type="long"),
                                       SimpleNamespace(name="who", type="string")])


CTX = MagicContext(KernelState(), {})


@pytest.mark.parametrize("line, cell, message", [
    ("--spark", "SELECT * FROM t", "--spark says how --out stores the result; add --out NAME"),
    ("--y amount", "SELECT * FROM t", "--x and --y choose the chart's columns; add --chart"),
    ("--chart bar", "UPDATE t SET amount = 1", "--chart draws the cell's last SELECT, and the cell has none"),
    ("--chart bar --y amout", "SELECT * FROM t", "column 'amout' is not in the last SELECT's result; did you mean "
                                                 "'amount'?"),
    ("--chart bar --x zz", "SELECT day AS d2, amount FROM t", "column .zz. is not in .*its columns: d2, amount"),
    ("--chart line --y who", "SELECT * FROM t", "y column 'who' is string, not a number"),
])
def test_bad_result_options_are_refused_before_running(line: str, cell: str, message: str) -> None:
    with pytest.raises(ArgError, match=message):
        keep_for(CTX, _Lh(), parse_lvsql(line), parse_script(cell))


def test_keep_takes_the_last_select_and_allows_what_only_spark_knows() -> None:
    statements = parse_script("SELECT 1 AS a FROM t; UPDATE t SET amount = 2; "
                              "SELECT day, sum(amount) FROM t GROUP BY day")
    keep = keep_for(CTX, _Lh(), parse_lvsql("--chart bar --y total --out df"), statements)
    assert keep is not None and keep.statement is statements[-1] and keep.chart == ChartSpec("bar", None, ["total"])
    assert keep_for(CTX, _Lh(), parse_lvsql("--out df"), parse_script("UPDATE t SET amount = 2")) is None
    with pytest.raises(ArgError, match="--python cell"):
        keep_for(CTX, _Lh(), parse_lvtxn("--chart bar --python"), None)


def test_out_stores_pandas_or_spark_and_says_when_it_cut() -> None:
    ns: dict[str, Any] = {}
    ctx = MagicContext(KernelState(), ns)
    st = parse_script("SELECT * FROM t")[0]
    keep = Keep(st, out="df", frame=sums(), total=1)
    items: list[Any] = []
    store(ctx, keep, "the spark frame", items)
    assert ns["df"] is keep.frame and items == []
    store(ctx, Keep(st, out="lazy", spark=True), "the spark frame", items)
    assert ns["lazy"] == "the spark frame"
    store(ctx, Keep(st, out="cut", frame=sums(), total=5), None, items)
    assert len(ns["cut"]) == 1 and "the first 1 of 5 rows in pandas (LvMagics.out_limit)" in items[0]
    assert "--spark keeps the whole result" in items[0]


def test_charts_are_svg_with_defaults_and_notes() -> None:
    frame = frame_of(pa.table({"region": ["eu", "us", None], "total": pa.array([3, None, 5], pa.int64()),
                               "avg": [1.5, 2.0, 2.5], "who": ["a", "b", "c"]}))
    for kind in ("bar", "line", "scatter"):
        svg = render_svg(frame, ChartSpec(kind))
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    item = chart_item(frame, ChartSpec("bar"), 3)
    assert repr(item) == "bar chart of total, avg by region (3 rows)" and "class='lv-chart'" in item._repr_html_()
    assert repr(chart_item(frame.head(2), ChartSpec("line", "region", ["avg"]), 100)) == \
        "line chart of avg by region (the first 2 of 100 rows)"
    assert repr(chart_item(frame, ChartSpec("bar", y=["who"]), 3)) == \
        "no bar chart: column 'who' is not numeric (string)"
    assert "no numeric column besides 'who'" in repr(chart_item(frame[["who"]], ChartSpec("bar"), 3))


@pytest.mark.parametrize("typo, command", [("conect", "connect"), ("comit", "commit"), ("Tabels", "tables"),
                                           ("rolback", "rollback")])
def test_unknown_command_says_did_you_mean(typo: str, command: str) -> None:
    with pytest.raises(ArgError, match=f"unknown command '{typo}'; did you mean `%lv {command}`\\?"):
        split_line(f"{typo} x")
    with pytest.raises(ArgError) as e:
        split_line("zzzz")
    assert "did you mean" not in str(e.value) and "commands: connect, tables" in str(e.value)
