"""Counting the calls of a function everywhere it is bound (``from m import f`` copies the name into
every importing module, so patching the defining module alone misses those callers), and recording the
requests an instrumented store sends, in order."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

PACKAGES = ("lv_core", "lv_magic", "widgets")


def count_calls(monkeypatch: Any, fn: Callable[..., Any]) -> list[tuple[Any, ...]]:
    """Replace ``fn`` by a counting wrapper under every name our packages' modules bind it to (undone
    by ``monkeypatch``); returns the list that records the positional arguments of each call."""
    calls: list[tuple[Any, ...]] = []

    @functools.wraps(fn)
    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return fn(*args, **kwargs)

    bound = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in PACKAGES:
            continue
        for attr, value in list(vars(mod).items()):
            if value is fn:
                monkeypatch.setattr(mod, attr, counting)
                bound += 1
    assert bound, f"{fn.__qualname__} is bound nowhere in {PACKAGES}"
    return calls


def record_requests(monkeypatch: Any, store: Any) -> list[tuple[str, str]]:
    """Record ``(kind, key)`` of every request ``store`` (an ``InstrumentedStore``) sends from now on, in the
    order they start (undone by ``monkeypatch``)."""
    seen: list[tuple[str, str]] = []
    request = store._request

    def rec(kind: str, key: str, call: Callable[[], Any]) -> Any:
        seen.append((kind, key))
        return request(kind, key, call)

    monkeypatch.setattr(store, "_request", rec)
    return seen
