"""``%lv connect``, ``recover``, ``inspect``, ``help``: the connection and its upkeep."""

from __future__ import annotations

import time
from typing import Any

from IPython.display import display

from lv_core.errors import LvError
from lv_magic.args import connect_parser, help_text, inspect_parser, recover_parser, selftest_parser
from lv_magic.context import MagicContext


def show_help(ctx: MagicContext, rest: list[str]) -> None:
    print(help_text())


def connect(ctx: MagicContext, rest: list[str]) -> None:
    import lv_core
    from lv_core.engine.spark_conf import parse_pairs

    ns = connect_parser().parse_args(rest)
    opts = {k: v for k, v in (("endpoint_url", ns.endpoint), ("region", ns.region), ("profile", ns.profile)) if v}
    spark_conf = parse_pairs(ns.conf)  # ConfigError before anything changes
    lh = lv_core.connect(ns.warehouse, spark=ns.spark, storage_options=opts or None, spark_conf=spark_conf or None)
    ctx.state.shutdown()
    ctx.state.txns.clear()
    ctx.state.lh = lh
    if ctx.user_ns is not None:
        ctx.user_ns["lh"] = lh
    if ns.lazy:
        print(f"connected to {lh.url} as `lh` (Spark starts on first data access)")
        return
    print(f"connected to {lh.url} as `lh`")
    start_engine(lh, ns.spark)


def start_engine(lh: Any, url: str | None) -> None:
    """Start (or reach) the Spark engine now, saying so and how long it took; silent when it runs."""
    from lv_core.engine.session import env_remote, local_server, public_url

    url = url or env_remote()
    if url is None and local_server() is not None:
        lh.spark  # noqa: B018 - the running embedded engine: nothing to wait for
        return
    say = "starting the Spark engine (once per kernel)" if url is None else f"connecting to Spark at {public_url(url)}"
    print(f"{say} ...", flush=True)
    t0 = time.monotonic()
    lh.spark  # noqa: B018 - starts or connects the engine
    print(f"Spark engine ready in {time.monotonic() - t0:.1f} s")


def recover(ctx: MagicContext, rest: list[str]) -> None:
    lh = ctx.require()
    ns = recover_parser().parse_args(rest)
    print(lh.recover(lease_grace_s=ns.grace).summary())


def doctor(ctx: MagicContext, rest: list[str]) -> None:
    """``%lv doctor``: the store checks of ``lv doctor``, as a table."""
    from IPython.display import HTML

    from lv_core.doctor import doctor as run_doctor
    from lv_magic.args import ArgError

    if rest:
        raise ArgError("%lv doctor takes no arguments (it checks the connected warehouse's store)")
    display(HTML(run_doctor(ctx.require().store).to_html()))


def selftest(ctx: MagicContext, rest: list[str]) -> None:
    """``%lv selftest``: the isolation self-test of ``lv doctor --isolation``; a cycle found is drawn."""
    from IPython.display import HTML

    from lv_core.doctor.selftest import options_of
    from lv_core.doctor.selftest import selftest as run_selftest

    ns = selftest_parser().parse_args(rest)
    lh = ctx.require()
    print(f"running the black-box isolation self-test ({ns.clients} clients x {ns.txns} transactions per preset) ...",
          flush=True)
    display(HTML(run_selftest(lh.url, storage_options=options_of(lh.store), clients=ns.clients,
                              txns=ns.txns).to_html()))


def inspect(ctx: MagicContext, rest: list[str]) -> None:
    """``%lv inspect``: the live lakehouse inspector (``--every S``: idle rescan pause; ``--static``)."""
    ns = inspect_parser().parse_args(rest)
    lh = ctx.require()
    try:
        from widgets import inspect_lakehouse
    except ImportError:
        raise LvError("the inspector widget is not available in this installation") from None
    opts: dict[str, Any] = {"live": not ns.static}
    if ns.every is not None:
        opts["idle_interval_s"] = ns.every
    display(inspect_lakehouse(lh, **opts))
