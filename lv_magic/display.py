"""Output helpers shared by the commands: HTML tables and the live transaction widget."""

from __future__ import annotations

import html
from typing import Any

from IPython.display import display

from lv_magic.context import MagicContext


class Table:
    """Rows with a header: an HTML table in notebooks, aligned text in a terminal."""

    def __init__(self, rows: list[list[Any]], header: list[str], cls: str) -> None:
        self.rows, self.header, self.cls = rows, header, cls

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in self.rows)
        return f"<table class='{self.cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = [self.header] + [[str(c) for c in r] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.header))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def html_table(rows: list[list[Any]], header: list[str], cls: str) -> Table:
    return Table(rows, header, cls)


def txn_widget(ctx: MagicContext, txn: Any, quiet: bool) -> Any:
    """Show the live widget of ``txn`` under the cell (unless quiet or disabled); returns it or None.

    When the transaction ends, the widget replaces its saved fallbacks by the final state (display id).
    """
    try:
        from widgets import TransactionWidget
        from widgets.txn_widget import remember
    except ImportError:
        return None
    remember(txn)  # other widgets show its name instead of its id
    if quiet or not ctx.widgets:
        return None
    # The lakehouse lets the widget show the other live transactions in its DAG and gives its Cancel
    # button a default (interrupt the Spark session's running statements).
    w = TransactionWidget(txn, lakehouse=ctx.require())
    display(w)
    return w
