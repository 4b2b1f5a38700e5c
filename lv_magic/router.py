"""``%lv COMMAND ...`` -> the function that runs it (explicit: every command is listed here)."""

from __future__ import annotations

from typing import Callable

from lv_magic.args import split_line
from lv_magic.cmd import admin, info, txn
from lv_magic.context import MagicContext

Command = Callable[[MagicContext, list[str]], None]

#: Same names, same order as :data:`lv_magic.args.COMMANDS` (the help text).
ROUTES: dict[str, Command] = {
    "connect": admin.connect,
    "tables": info.tables,
    "markers": info.markers,
    "log": info.log,
    "dag": info.dag,
    "status": info.status,
    "begin": txn.begin,
    "commit": txn.commit,
    "rollback": txn.rollback,
    "recover": admin.recover,
    "doctor": admin.doctor,
    "selftest": admin.selftest,
    "inspect": admin.inspect,
    "help": admin.show_help,
}


def run(ctx: MagicContext, line: str) -> None:
    """Parse the ``%lv`` line and run its command (raises ArgError or LvError on user errors)."""
    cmd, rest = split_line(line)
    ROUTES[cmd](ctx, rest)
