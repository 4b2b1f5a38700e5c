"""The IPython magics: ``%lv`` (commands) and ``%%lvtxn`` (a cell as one transaction)."""

from __future__ import annotations

import html
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import HTML, display
from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Configurable

from lv_core.errors import LvError, TransactionAborted
from lv_magic import commands
from lv_magic.args import ArgError, parse_lvtxn
from lv_magic.state import STATE, OpenTxn, commit_in_background


def _usage(e: Exception) -> UsageError:
    if isinstance(e, TransactionAborted):
        return UsageError(f"transaction aborted ({e.rule}): {e.reason}")
    return UsageError(str(e))


@magics_class
class LvMagics(Magics, Configurable):
    """LakeVilla for Jupyter magics. Settings: ``%config LvMagics.default_preset = "snapshot"``."""

    default_preset = Unicode("serializable", config=True, help="preset of %%lvtxn without one")
    default_retries = Int(0, config=True, help="how often %%lvtxn re-runs an aborted cell")
    row_limit = Int(20, config=True, help="rows shown of a SELECT result (all rows go to --out)")
    commit_wait_s = Float(0.5, config=True, help="how long a commit blocks before continuing in the background")
    widgets = Bool(True, config=True, help="show the live transaction widget under cells")

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.state = STATE

    # ------------------------------------------------------------------ %lv
    @line_magic
    def lv(self, line: str) -> Any:
        """LakeVilla commands; ``%lv help`` lists them."""
        try:
            return commands.run(self, line)
        except (ArgError, LvError) as e:
            raise _usage(e) from None

    # ------------------------------------------------------------------ %%lvtxn
    @cell_magic
    def lvtxn(self, line: str, cell: str) -> Any:
        """Run the cell as ONE transaction: ``%%lvtxn [PRESET] [--name N] [--open] ...`` (see ``%lv help``)."""
        try:
            args = parse_lvtxn(line)
            lh = self.state.require()
        except (ArgError, LvError) as e:
            raise _usage(e) from None
        retries = args.retries if args.retries is not None else self.default_retries
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._run_cell(lh, args, cell)
            except TransactionAborted as e:
                if attempt > retries:
                    raise _usage(e) from None
                display(HTML(f"<div class='lv-retry'>attempt {attempt} aborted ({html.escape(e.rule)}): "
                             f"{html.escape(e.reason)}; re-running the cell</div>"))
            except LvError as e:
                raise _usage(e) from None

    def _widget(self, txn: Any, quiet: bool) -> Any:
        try:
            from widgets import TransactionWidget
            from widgets.txn_widget import remember
        except ImportError:
            return None
        remember(txn)  # other widgets show its name instead of its id
        if quiet or not self.widgets:
            return None
        w = TransactionWidget(txn)
        display(w)
        return w

    def _run_cell(self, lh: Any, args: Any, cell: str) -> Any:
        continuing = args.name is not None and args.name in self.state.txns and \
            self.state.txns[args.name].txn.state == "active"
        if continuing:
            txn = self.state.get(args.name).txn
        else:
            txn = lh.begin(args.preset or self.default_preset, features=args.features, slack=args.slack,
                           timeout_s=args.timeout or 60.0, name=args.name)
            widget = self._widget(txn, args.quiet)
            if args.open or args.name:
                self.state.add(args.name or txn.id, txn, widget)
        try:
            last = self._body(txn, args, cell)
        except KeyboardInterrupt:
            txn.rollback()
            raise
        except BaseException:
            if not (args.open or continuing):
                txn.rollback()
            raise
        if args.open or continuing:
            return None
        fut, note = commit_in_background(txn, self.commit_wait_s)
        if note is not None:
            name = args.name or txn.id
            self.state.txns[name] = OpenTxn(txn, future=fut)
            display(HTML(f"<div class='lv-waiting'>{html.escape(name)}: {html.escape(note)}; the commit "
                         "continues in the background (see the widget, or %lv status)</div>"))
            return None
        fut.result()  # raises TransactionAborted
        return None if last is None else last

    def _body(self, txn: Any, args: Any, cell: str) -> Any:
        if args.python:
            ns = self.shell.user_ns if self.shell is not None else {}
            ns["txn"] = txn
            exec(compile(cell, "<lvtxn>", "exec"), ns)  # noqa: S102 - the user's own cell
            return None
        from lv_core.engine.sql_parse import parse_script

        # Parse the whole cell first: a syntax error anywhere runs nothing, and its line/column count
        # from the top of the cell. Then run statement by statement, showing each result.
        if not cell.strip():
            raise LvError("the cell has no SQL statement (use --python for Python)")
        statements = parse_script(cell)
        last = None
        for st in statements:
            result = txn.sql(st.text)
            if result is not None:
                last = result
                self._show(result)
        if args.out and last is not None and self.shell is not None:
            self.shell.user_ns[args.out] = last
        return None

    def _show(self, df: Any) -> None:
        limit = self.row_limit
        try:
            pdf = df.limit(limit + 1).toPandas()
        except AttributeError:
            display(df)
            return
        display(pdf.head(limit))
        if len(pdf) > limit:
            display(HTML(f"<div class='lv-note'>showing the first {limit} rows (use --out VAR for all)</div>"))
