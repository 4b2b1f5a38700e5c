"""``--chart bar|line|scatter``: a chart of a SELECT result under its table, as inline SVG.

The x column defaults to the result's first column, the y columns to its numeric columns after x.
Drawn with matplotlib's object API (a ``Figure``, no pyplot: no global figure state, no GUI backend
in the kernel); the SVG goes into the cell's output, so a saved notebook keeps the chart.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

__all__ = ["Chart", "ChartSpec", "chart_item", "render_svg"]


@dataclass
class ChartSpec:
    """``--chart KIND [--x COL] [--y COL,...]``: None picks the default columns."""

    kind: str  # bar, line or scatter (lv_magic.args.CHART_KINDS)
    x: Optional[str] = None
    y: Optional[list[str]] = None


class Chart:
    """A rendered chart: SVG in notebooks (class ``lv-chart``), one line of text elsewhere."""

    def __init__(self, svg: str, summary: str) -> None:
        self.svg, self.summary = svg, summary

    def _repr_html_(self) -> str:
        return f"<div class='lv-chart' title='{html.escape(self.summary, quote=True)}'>{self.svg}</div>"

    def __repr__(self) -> str:
        return self.summary


class NoChart:
    """Why a result could not be charted (a note, not an error: the statement's work stands)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def _repr_html_(self) -> str:
        return f"<div class='lv-note lv-no-chart'>{html.escape(self.reason)}</div>"

    def __repr__(self) -> str:
        return self.reason


def _column(frame: pd.DataFrame, name: str) -> Optional[str]:
    by_lower = {str(c).lower(): str(c) for c in frame.columns}
    return by_lower.get(name.lower())


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def columns_for(frame: pd.DataFrame, spec: ChartSpec) -> tuple[str, list[str]]:
    """(x, [y, ...]) of the chart; raises ValueError saying why the result cannot be charted."""
    if not len(frame.columns):
        raise ValueError("the result has no columns")
    x = _column(frame, spec.x) if spec.x else str(frame.columns[0])
    if x is None:
        raise ValueError(f"the result has no column {spec.x!r} (its columns: {', '.join(map(str, frame.columns))})")
    if spec.y:
        ys = []
        for name in spec.y:
            col = _column(frame, name)
            if col is None:
                have = ", ".join(map(str, frame.columns))
                raise ValueError(f"the result has no column {name!r} (its columns: {have})")
            if not _numeric(frame[col]):
                raise ValueError(f"column {col!r} is not numeric ({frame[col].dtype})")
            ys.append(col)
    else:
        ys = [str(c) for c in frame.columns if str(c) != x and _numeric(frame[c])]
        if not ys:
            raise ValueError(f"the result has no numeric column besides {x!r} to draw (choose one with --y)")
    return x, ys


def _values(s: pd.Series) -> Any:
    """A column as matplotlib takes it: numbers as floats with NaN for NULL, anything else as text."""
    if _numeric(s):
        return s.astype("Float64").to_numpy(dtype=float, na_value=float("nan"))
    if pd.api.types.is_datetime64_any_dtype(s):
        return s.to_numpy()
    return [("NULL" if v is None or v is pd.NA or v is pd.NaT else str(v)) for v in s]


def render_svg(frame: pd.DataFrame, spec: ChartSpec) -> str:
    """The chart of ``frame`` as an SVG element (no XML prologue: it goes inline into HTML)."""
    from matplotlib.figure import Figure

    x, ys = columns_for(frame, spec)
    fig = Figure(figsize=(6.4, 3.4), dpi=100)
    ax = fig.subplots()
    xs = _values(frame[x])
    if spec.kind == "bar":
        labels = [str(v) for v in xs] if _numeric(frame[x]) else xs
        width = 0.8 / len(ys)
        for i, y in enumerate(ys):
            ax.bar([p + (i - (len(ys) - 1) / 2) * width for p in range(len(frame))], _values(frame[y]),
                   width=width, label=y)
        ax.set_xticks(range(len(frame)), labels, rotation=45 if len(frame) > 8 else 0,
                      ha="right" if len(frame) > 8 else "center")
    else:
        for y in ys:
            if spec.kind == "line":
                ax.plot(xs, _values(frame[y]), marker="o" if len(frame) <= 50 else None, label=y)
            else:
                ax.scatter(xs, _values(frame[y]), s=16, label=y)
    ax.set_xlabel(x)
    if len(ys) == 1:
        ax.set_ylabel(ys[0])
    else:
        ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def chart_item(frame: pd.DataFrame, spec: ChartSpec, total: int) -> Any:
    """The chart of a kept SELECT's rows, or a one-line note saying why there is none."""
    try:
        svg = render_svg(frame, spec)
        x, ys = columns_for(frame, spec)
    except ValueError as e:
        return NoChart(f"no {spec.kind} chart: {e}")
    drawn = f"{len(frame)} row{'s' if len(frame) != 1 else ''}"
    if len(frame) < total:
        drawn = f"the first {len(frame):,} of {total:,} rows"
    return Chart(svg, f"{spec.kind} chart of {', '.join(ys)} by {x} ({drawn})")
