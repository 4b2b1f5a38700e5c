"""Cancelling a running statement from the widget, while the cell that runs it is still busy.

A widget button's click reaches the kernel as a comm message on the shell channel, which the main
thread handles only after the running cell ends: too late to cancel the statement that keeps the
cell busy. ipykernel 7.4 routes every comm message in its shell-channel thread first, asking the
comm which (sub)shell should handle it (``BaseComm._reply_subshell_for``); :func:`early_clicks`
hooks that question to start the click handler at once in a thread of its own, and then lets the
message go its usual way (the handler must be idempotent: it runs again after the cell). Kernels
without that routing simply handle the click after the cell, as any widget.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

log = logging.getLogger(__name__)

ROUTING_HOOK = "_reply_subshell_for"  # ipykernel >= 7.4: asked in the shell-channel thread per comm message


def interrupt_spark(lakehouse: Any) -> None:
    """Interrupt every operation running in ``lakehouse``'s Spark session (Spark Connect ``interruptAll``;
    a classic session cancels all jobs)."""
    spark = lakehouse.spark
    if hasattr(spark, "interruptAll"):
        spark.interruptAll()
    else:  # pragma: no cover - classic (non-Connect) sessions
        spark.sparkContext.cancelAllJobs()


def default_cancel(txn: Any, lakehouse: Any | None) -> Callable[[], None] | None:
    """What the Cancel button calls by default: the transaction's own ``cancel()`` (it interrupts only
    that transaction's Spark operations, by tag) when it has one, else an interrupt of the lakehouse's
    Spark session, else nothing (the button stays hidden)."""
    for name in ("cancel", "interrupt"):
        own = getattr(txn, name, None)
        if callable(own):
            return own
    if lakehouse is not None and hasattr(type(lakehouse), "spark"):  # on the class: reading it starts Spark
        return lambda: interrupt_spark(lakehouse)
    return None


def _is_click(data: Any) -> bool:
    if not isinstance(data, Mapping) or data.get("method") != "custom":
        return False
    content = data.get("content")
    return isinstance(content, Mapping) and content.get("event") == "click"


def early_clicks(button: Any, on_click: Callable[[], object]) -> bool:
    """Run ``on_click`` (in a new thread) as soon as a click on ``button`` reaches the kernel, even while
    a cell runs. Returns False when the kernel offers no such hook (clicks then wait for the cell)."""
    comm = getattr(button, "comm", None)
    original = getattr(comm, ROUTING_HOOK, None)
    if comm is None or not callable(original):
        return False

    def route(data: Any, default: Any) -> Any:
        if _is_click(data):
            threading.Thread(target=_safely, args=(on_click,), name="lv-cancel", daemon=True).start()
        return original(data, default)

    setattr(comm, ROUTING_HOOK, route)
    return True


def _safely(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # a failed cancel is logged, never raised into the kernel's threads
        log.exception("cancelling the statement failed")


__all__ = ["ROUTING_HOOK", "default_cancel", "early_clicks", "interrupt_spark"]
