"""lv_core.concurrency: the wait rule between pools is enforced, and Backoff's delays."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lv_core import concurrency as cc


def test_gather_runs_in_order_and_raises_the_first_error_after_all_ended() -> None:
    assert cc.gather(cc.Pool.REQUESTS, lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]
    ended: list[int] = []

    def f(x: int) -> int:
        time.sleep(0.01 * x)
        ended.append(x)
        if x == 1:
            raise ValueError("one")
        return x

    with pytest.raises(ValueError, match="one"):
        cc.gather(cc.Pool.TASKS, f, [1, 2, 3])
    assert sorted(ended) == [1, 2, 3]


def test_a_task_may_wait_on_earlier_pools_only() -> None:
    def inner(pool: cc.Pool) -> list[int]:
        return cc.gather(pool, lambda x: x, [1, 2])

    assert cc.submit(cc.Pool.TASKS, inner, cc.Pool.REQUESTS).result() == [1, 2]
    assert cc.submit(cc.Pool.WAITS, inner, cc.Pool.TASKS).result() == [1, 2]
    for pool, on in [(cc.Pool.TASKS, cc.Pool.TASKS), (cc.Pool.REQUESTS, cc.Pool.REQUESTS),
                     (cc.Pool.TASKS, cc.Pool.WAITS)]:
        with pytest.raises(RuntimeError, match="may not wait"):
            cc.submit(pool, inner, on).result()
    assert cc.current_pool() is None


def test_backoff_grows_to_its_cap_and_respects_a_deadline() -> None:
    b = cc.Backoff(0.01, 0.05)
    assert [round(b.next_delay(), 3) for _ in range(5)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    b.reset()
    assert b.next_delay() == 0.01
    j = cc.Backoff(1.0, 1.0, jitter=0.5)
    assert all(0.5 <= j.next_delay() <= 1.0 for _ in range(50))
    t0 = time.monotonic()
    assert cc.Backoff(5.0, 5.0).sleep(deadline=t0 + 0.02) is False
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(ValueError):
        cc.Backoff(0.0, 1.0)


def test_gather_keeps_at_most_limit_calls_in_flight_and_stops_after_an_error() -> None:
    lock = threading.Lock()
    running, peak, started = 0, 0, []

    def f(x: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            started.append(x)
        time.sleep(0.01)
        with lock:
            running -= 1
        if x == 2:
            raise KeyError(x)
        return x

    assert cc.gather(cc.Pool.REQUESTS, lambda x: x, range(10), limit=3) == list(range(10))
    started.clear()
    with pytest.raises(KeyError):
        cc.gather(cc.Pool.REQUESTS, f, range(20), limit=3)
    assert peak <= 3
    assert len(started) < 20  # no call starts once one failed (at most the window in flight then)


def test_then_goes_on_from_a_future_without_a_waiting_thread() -> None:
    gate = threading.Event()
    first = cc.submit(cc.Pool.TASKS, lambda: gate.wait(5) and 20)
    seen: list[cc.Pool | None] = []

    def go(x: int) -> int:
        seen.append(cc.current_pool())
        return x + 1

    nxt = cc.then(cc.Pool.TASKS, first, go)
    assert not nxt.done()
    gate.set()
    assert nxt.result(5) == 21 and seen == [cc.Pool.TASKS]
    failed = cc.then(cc.Pool.TASKS, cc.submit(cc.Pool.REQUESTS, lambda: 1 // 0), go)
    with pytest.raises(ZeroDivisionError):
        failed.result(5)


def test_every_thread_pool_of_lv_core_is_one_of_the_three() -> None:
    root = Path(__file__).resolve().parents[2]
    found = sorted(str(p.relative_to(root)) for p in (root / "lv_core").rglob("*.py")
                   if "ThreadPoolExecutor(" in p.read_text(encoding="utf-8"))
    assert found == []  # lv_core.concurrency subclasses it; nothing else makes one
