"""Argument parsing for %lv and %%lvtxn, with no IPython dependency (testable alone)."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from typing import NoReturn

from lv_core.engine.sql_hints import closest
from lv_core.presets import PRESETS


class ArgError(ValueError):
    """Bad magic arguments: the message says what is wrong and what is accepted."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # no SystemExit, no usage dump on stderr
        raise ArgError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ArgError(message or f"{self.prog}: invalid arguments")


def _seconds(text: str, *, allow_zero: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if v < 0 or (v == 0 and not allow_zero):
        raise argparse.ArgumentTypeError("must be >= 0" if allow_zero else "must be > 0")
    return v


def _positive_float(text: str) -> float:
    return _seconds(text)


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return v


def lvtxn_parser() -> _Parser:
    p = _Parser(prog="%%lvtxn", add_help=False, description="Run the cell as one LakeVilla transaction.")
    p.add_argument("preset", nargs="?", default=None, help=f"isolation preset: {', '.join(PRESETS)}")
    p.add_argument("--name", help="name the transaction (to continue it with --name, %%lv commit NAME)")
    p.add_argument("--open", action="store_true", help="keep the transaction open after the cell")
    p.add_argument("--features", help="LakeVilla features, e.g. R,CT,I (overrides the preset)")
    p.add_argument("--slack", type=_non_negative_int, help="R1 slack (versions a read may lag)")
    p.add_argument("--retries", type=_non_negative_int, help="re-run the whole cell up to N times on abort")
    p.add_argument("--timeout", type=_positive_float, help="seconds a commit may wait (default 60)")
    _result_options(p)
    p.add_argument("--python", action="store_true", help="the body is Python with `txn` bound")
    p.add_argument("--quiet", action="store_true", help="no widget")
    return p


CHART_KINDS = ("bar", "line", "scatter")


def _chart_kind(text: str) -> str:
    if text.lower() not in CHART_KINDS:
        raise argparse.ArgumentTypeError(f"unknown chart {text!r}; choose one of: {', '.join(CHART_KINDS)}")
    return text.lower()


def _result_options(p: _Parser) -> None:
    """--out, --spark and --chart (with --x, --y) of the cell's last SELECT (lv_magic.results)."""
    p.add_argument("--out", help="store the last SELECT result in this variable as a pandas DataFrame (nullable "
                                 "dtypes: NULL is <NA>; at most LvMagics.out_limit rows, default 1,000,000)")
    p.add_argument("--spark", action="store_true",
                   help="with --out: store the Spark DataFrame instead (lazy, all rows)")
    p.add_argument("--chart", type=_chart_kind, help=f"chart the last SELECT result under it: {', '.join(CHART_KINDS)}")
    p.add_argument("--x", help="the chart's x column (default: the first column)")
    p.add_argument("--y", help="the chart's y columns, comma-separated (default: the numeric columns but x)")


@dataclass
class LvtxnArgs:
    preset: str | None
    name: str | None
    open: bool
    features: str | None
    slack: int | None
    retries: int | None
    timeout: float | None
    out: str | None
    spark: bool
    chart: str | None
    x: str | None
    y: str | None
    python: bool
    quiet: bool


def parse_lvtxn(line: str) -> LvtxnArgs:
    """Parse the %%lvtxn line; raise ArgError with a clear message on bad input."""
    ns = _cell_options("%%lvtxn", lvtxn_parser(), line)
    if ns.preset is not None and ns.preset.lower() not in PRESETS:
        raise ArgError(f"%%lvtxn: unknown preset {ns.preset!r}; choose one of: {', '.join(PRESETS)}")
    return LvtxnArgs(**vars(ns))


def _cell_options(prog: str, parser: _Parser, line: str) -> argparse.Namespace:
    """Parse a cell magic's option line; check ``--out`` (a variable name) and ``--name`` (a simple name)."""
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise ArgError(f"{prog}: cannot parse the options: {e}") from None
    ns = parser.parse_args(tokens)
    if ns.out is not None and not ns.out.isidentifier():
        raise ArgError(f"{prog}: --out needs a Python variable name, not {ns.out!r}")
    if ns.name is not None and not ns.name.replace("-", "_").isidentifier():
        raise ArgError(f"{prog}: --name must be a simple name (letters, digits, _ or -), not {ns.name!r}")
    return ns


@dataclass
class LvsqlArgs:
    name: str
    out: str | None
    spark: bool
    chart: str | None
    x: str | None
    y: str | None
    quiet: bool


def lvsql_parser() -> _Parser:
    p = _Parser(prog="%%lvsql", add_help=False, description="Run SQL in autocommit; BEGIN ... COMMIT for more.")
    p.add_argument("--name", default="sql", help="the name a BEGIN gives its transaction (default: sql)")
    _result_options(p)
    p.add_argument("--quiet", action="store_true", help="no widget")
    return p


def parse_lvsql(line: str) -> LvsqlArgs:
    """Parse the %%lvsql line; raise ArgError with a clear message on bad input."""
    return LvsqlArgs(**vars(_cell_options("%%lvsql", lvsql_parser(), line)))


COMMANDS = {
    "connect": "connect [WAREHOUSE] [--spark URL] [--endpoint URL] [--region R] [--profile P] [--conf KEY=VALUE ...] "
               "[--lazy]: open a warehouse (default: embedded local Spark Connect + ./lakehouse) and start the "
               "engine, saying how long it took (--lazy: on first data access); --conf (repeatable) is a "
               "Spark setting, e.g. --conf spark.driver.memory=4g (the embedded server gets it at start, a remote "
               "session at runtime)",
    "tables": "tables: the tables with their latest versions",
    "markers": "markers [TABLE]: live LakeVilla markers (owner, version, lease)",
    "log": "log TABLE: the table's Delta log, markers marked",
    "dag": "dag: the dependency DAG of the open transactions",
    "status": "status: open transactions (active / waiting / committing)",
    "begin": "begin NAME [PRESET] [--features F] [--slack N] [--timeout S]: open a named transaction",
    "commit": "commit NAME: commit it (waits in the background when it must)",
    "rollback": "rollback NAME: roll it back",
    "recover": "recover [--grace S]: free expired markers, roll decided commits forward, clean leftovers of "
               "transactions dead for more than S seconds (default: the lease)",
    "doctor": "doctor: will LakeVilla work on this store? conditional writes (alone and concurrent), read- and "
              "list-after-write, delete, clock and latency, each with what a failure means",
    "selftest": "selftest [--clients N] [--txns N]: a short black-box isolation test on this store (client "
                "processes under each preset, judged from the values read alone); a cycle found is drawn",
    "inspect": "inspect [--every S] [--static]: the live lakehouse inspector (rescans in the background, "
               "backing off to one rescan every S seconds while nothing changes, default 30; --static: Refresh "
               "only); a saved notebook keeps its last state",
    "help": "help: this text",
}


def connect_parser() -> _Parser:
    p = _Parser(prog="%lv connect", add_help=False)
    p.add_argument("warehouse", nargs="?", default=None)
    p.add_argument("--spark", default=None)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--region", default=None)
    p.add_argument("--profile", default=None)
    p.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--lazy", action="store_true")
    return p


def begin_parser() -> _Parser:
    p = _Parser(prog="%lv begin", add_help=False)
    p.add_argument("name")
    p.add_argument("preset", nargs="?", default=None)
    p.add_argument("--features", default=None)
    p.add_argument("--slack", type=_non_negative_int, default=None)
    p.add_argument("--timeout", type=_positive_float, default=None)
    p.add_argument("--quiet", action="store_true")
    return p


def recover_parser() -> _Parser:
    p = _Parser(prog="%lv recover", add_help=False)
    p.add_argument("--grace", type=lambda t: _seconds(t, allow_zero=True), default=None)
    return p


def selftest_parser() -> _Parser:
    p = _Parser(prog="%lv selftest", add_help=False)
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--txns", type=int, default=12)
    return p


def inspect_parser() -> _Parser:
    p = _Parser(prog="%lv inspect", add_help=False)
    p.add_argument("--every", type=_seconds, default=None, metavar="S",
                   help="longest pause between background rescans while nothing changes (default 30)")
    p.add_argument("--static", action="store_true", help="no background rescans: Refresh only")
    return p


def split_line(line: str) -> tuple[str, list[str]]:
    """``%lv`` line -> (command, remaining tokens)."""
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise ArgError(f"%lv: cannot parse: {e}") from None
    if not tokens:
        return "help", []
    cmd = tokens[0].lower()
    if cmd not in COMMANDS:
        near = closest(cmd, COMMANDS, n=1)
        hint = f"; did you mean {' or '.join(f'`%lv {c}`' for c in near)}?" if near else ""
        raise ArgError(f"%lv: unknown command {tokens[0]!r}{hint} (commands: {', '.join(COMMANDS)}; see %lv help)")
    return cmd, tokens[1:]


def help_text() -> str:
    lines = ["LakeVilla for Jupyter", "", "%lv COMMAND:"]
    lines += [f"  {v}" for v in COMMANDS.values()]
    lines += ["", "%%lvtxn [PRESET] [options]  "
              "(the cell body: SQL statements separated by ';', or Python with --python)"]
    for a in lvtxn_parser()._actions:
        if a.option_strings:  # argparse help strings escape % as %%
            lines.append(f"  {', '.join(a.option_strings):<12} {(a.help or '').replace('%%', '%')}")
    lines += ["", "%%lvsql [options]  (SQL in autocommit: each statement commits alone; BEGIN [ISOLATION LEVEL p] "
              "... COMMIT | ROLLBACK, or BEGIN ATOMIC ... END, for one transaction, also across cells)"]
    for a in lvsql_parser()._actions:
        if a.option_strings:
            lines.append(f"  {', '.join(a.option_strings):<12} {a.help}")
    lines += ["", "In SQL cells {name} and :name are notebook variables, bound as SQL literals ({{ is a brace)."]
    lines += ["", f"presets: {', '.join(f'{k} ({v.doc})' for k, v in PRESETS.items())}"]
    return "\n".join(lines)
