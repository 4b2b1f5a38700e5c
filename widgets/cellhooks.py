"""Run a function after every cell of this kernel (IPython's ``post_execute`` event), registered once.

Outputs and widgets that change while no cell of theirs runs (a background commit, a live inspector)
resend themselves from there: a frontend, and nbclient, then record the change with a cell.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

_REGISTERED: set[Callable[..., Any]] = set()
_LOCK = threading.Lock()


def after_each_cell(fn: Callable[..., Any]) -> None:
    """Register ``fn`` for IPython's ``post_execute`` event, once; nothing outside IPython."""
    with _LOCK:
        if fn in _REGISTERED:
            return
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - the magics and ipywidgets need IPython
            return
        ip = get_ipython()
        if ip is not None:
            ip.events.register("post_execute", fn)
            _REGISTERED.add(fn)


__all__ = ["after_each_cell"]
