"""The IPython magics: ``%lv`` (commands), ``%%lvtxn`` (a cell as one transaction) and ``%%lvsql``
(SQL in autocommit, with BEGIN ... COMMIT).

Thin: the settings, a :class:`~lv_magic.context.MagicContext` per call, and user errors turned into
``UsageError`` (one message, no traceback; also for Spark errors that reach this far). The commands
live in :mod:`lv_magic.cmd`, routed by :mod:`lv_magic.router`; the cells in :mod:`lv_magic.cell` and
:mod:`lv_magic.lvsql`.
"""

from __future__ import annotations

from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Configurable

from lv_core.errors import LvError, TransactionAborted
from lv_magic import router
from lv_magic.args import ArgError
from lv_magic.cell import run_lvtxn
from lv_magic.context import MagicContext
from lv_magic.lvsql import run_lvsql
from lv_magic.state import STATE


def _usage(e: Exception) -> UsageError:
    if isinstance(e, TransactionAborted):
        return UsageError(STATE.names_in(f"transaction aborted ({e.rule}): {e.reason}; nothing changed"))
    return UsageError(STATE.names_in(str(e)))


def _user_facing(e: BaseException) -> bool:
    """Errors shown as one message: ours, bad arguments, and Spark's (pyspark/grpc exceptions)."""
    mod = type(e).__module__ or ""
    return isinstance(e, (ArgError, LvError)) or mod.startswith(("pyspark", "grpc", "py4j"))


def _spark_message(e: BaseException) -> str:
    lines = str(e).split("\n\nJVM stacktrace:")[0].strip().splitlines()
    return f"Spark: {lines[0] if lines else type(e).__name__}"


@magics_class
class LvMagics(Magics, Configurable):
    """LakeVilla for Jupyter magics. Settings: ``%config LvMagics.default_preset = "snapshot"``."""

    default_preset = Unicode("serializable", config=True, help="preset of %%lvtxn without one")
    default_retries = Int(0, config=True, help="how often %%lvtxn re-runs an aborted cell")
    row_limit = Int(20, config=True, help="rows shown of a SELECT result")
    out_limit = Int(1_000_000, config=True, help="most rows --out loads into a pandas DataFrame (0: no limit; "
                                                 "--out NAME --spark keeps the whole result as a Spark DataFrame)")
    commit_wait_s = Float(0.5, config=True, help="how long a commit blocks before continuing in the background")
    widgets = Bool(True, config=True, help="show the live transaction widget under cells")

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.state = STATE

    def context(self) -> MagicContext:
        """What a command sees: the kernel state, the user namespace and the current settings."""
        return MagicContext(self.state, self.shell.user_ns if self.shell is not None else None,
                            default_preset=self.default_preset, default_retries=self.default_retries,
                            row_limit=self.row_limit, out_limit=self.out_limit, commit_wait_s=self.commit_wait_s,
                            widgets=self.widgets)

    def _run(self, fn: Callable[..., None], *args: str) -> None:
        try:
            fn(self.context(), *args)
        except Exception as e:
            if not _user_facing(e):
                raise
            raise (_usage(e) if isinstance(e, (ArgError, LvError)) else UsageError(_spark_message(e))) from None

    @line_magic
    def lv(self, line: str) -> None:
        """LakeVilla commands; ``%lv help`` lists them."""
        self._run(router.run, line)

    @cell_magic
    def lvtxn(self, line: str, cell: str) -> None:
        """Run the cell as ONE transaction: ``%%lvtxn [PRESET] [--name N] [--open] ...`` (see ``%lv help``)."""
        self._run(run_lvtxn, line, cell)

    @cell_magic
    def lvsql(self, line: str, cell: str) -> None:
        """Run SQL in autocommit; ``BEGIN ... COMMIT`` (also across cells) for a transaction (see ``%lv help``)."""
        self._run(run_lvsql, line, cell)
