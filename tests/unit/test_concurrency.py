"""lv_core.concurrency: the wait rule between pools is enforced, and Backoff's delays."""
from __future__ import annotations

import time

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
