"""``%lv inspect [--every S] [--static]`` through a real IPython shell (no Spark)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

import lv_core
from lv_magic.state import STATE
from tests.helpers.bank import make_kv
from tests.helpers.ipshell import magic_shell

pytest.importorskip("ipywidgets")


@pytest.fixture(scope="module")
def ip() -> Any:
    return magic_shell()


@pytest.fixture
def shown(ip: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, comms: Any) -> Any:
    """Connects ``%lv`` to a fresh warehouse; yields the list of what ``%lv inspect`` displays."""
    import lv_magic.cmd.admin as admin

    path = str(tmp_path / "wh")
    make_kv(lv_core.connect(path), "kv", {1: 1.0})
    ip.run_line_magic("lv", f"connect {path} --lazy")
    out: list[Any] = []
    monkeypatch.setattr(admin, "display", out.append)
    yield out
    for w in out:
        w.close()
    STATE.shutdown()
    STATE.txns.clear()
    STATE.lh = None


def test_inspect_is_live_with_its_idle_pause_or_static(ip: Any, shown: list[Any]) -> None:
    from IPython.display import display

    ip.run_line_magic("lv", "inspect --every 60")
    ip.run_line_magic("lv", "inspect --static")
    ip.run_line_magic("lv", "inspect")
    every, static, default = shown
    assert every.policy.idle_interval_s == 60 and every.policy.interval_s == 5
    assert default.policy.idle_interval_s == 30
    assert all(w.scan is not None and [t.name for t in w.scan.tables] == ["kv"] for w in shown)
    display(static)
    display(default)  # what the real display does: the widget, its saved copy, and the poller
    assert default.live and not static.live


def test_inspect_options_are_checked(ip: Any, shown: list[Any]) -> None:
    for line in ("inspect --every 0", "inspect --every soon", "inspect --bogus"):
        with pytest.raises(UsageError):
            ip.run_line_magic("lv", line)
    assert shown == []
