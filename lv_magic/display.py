"""Output helpers shared by the commands: HTML tables and the live transaction widget."""

from __future__ import annotations

import html
from typing import Any

from IPython.display import HTML, display

from lv_magic.context import MagicContext


def html_table(rows: list[list[Any]], header: list[str], cls: str) -> HTML:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return HTML(f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


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
