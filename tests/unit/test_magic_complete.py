"""Completion in %%lvtxn / %%lvsql cells through IPython's own completer on a real shell (no Spark:
tables and columns come from the Delta logs)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.completer import provisionalcompleter

import lv_core
from lv_magic.state import STATE
from tests.helpers.ipshell import magic_shell


@pytest.fixture(scope="module")
def ip() -> Any:
    return magic_shell()


@pytest.fixture
def wh(ip: Any, tmp_path: Any) -> Any:
    lh = lv_core.connect(str(tmp_path / "wh"))
    lh.create_table("acct", "id BIGINT, balance DOUBLE, owner STRING")
    lh.create_table("acct_b", "id BIGINT, bonus DOUBLE")
    ip.run_line_magic("lv", f"connect {tmp_path / 'wh'} --lazy")
    yield lh
    STATE.lh = None


def complete(ip: Any, text: str) -> set[str]:
    with provisionalcompleter():
        return {c.text for c in ip.Completer.completions(text, len(text))}


def test_tables_columns_and_keywords(ip: Any, wh: Any) -> None:
    assert {"acct", "acct_b"} <= complete(ip, "%%lvtxn\nSELECT * FROM ac")
    assert complete(ip, "%%lvsql\nUPDATE acct SET bal") == {"balance"}
    assert complete(ip, "%%lvtxn\nSELECT a.id FROM acct a JOIN acct_b b ON a.id = b.id WHERE b.bo") >= {"bonus"}
    assert complete(ip, "%%lvtxn\nSELECT o FROM acct a WHERE a.") == {"id", "balance", "owner"}
    assert "WHERE" in complete(ip, "%%lvtxn\nUPDATE acct SET balance = 0 WH")
    assert "where" in complete(ip, "%%lvtxn\nupdate acct set balance = 0 wh")


def test_other_cells_are_left_alone(ip: Any, wh: Any) -> None:
    assert "acct" not in complete(ip, "x = 1\nac")
    assert "acct" not in complete(ip, "%%lvtxn ac")  # the magic's own line: its options, not SQL


def test_lv_line_completes_commands_presets_and_open_transactions(ip: Any, wh: Any) -> None:
    assert complete(ip, "%lv co") == {"connect", "commit"}
    assert {"connect", "tables", "begin", "commit", "rollback", "help"} <= complete(ip, "%lv ")
    assert complete(ip, "x = 1\n%lv rec") == {"recover"}  # a line magic in any line of a cell
    assert complete(ip, "%lv begin t9 snap") == {"snapshot"}
    assert {"serializable", "snapshot", "delta"} <= complete(ip, "%%lvtxn ")
    assert complete(ip, "%%lvtxn --name t1 --na") == {"--name"}
    assert complete(ip, "%%lvsql --chart ") == {"bar", "line", "scatter"}
    assert complete(ip, "%lv markers ac") == {"acct", "acct_b"}
    assert "t1" not in complete(ip, "%lv commit ")  # nothing open yet
    ip.run_line_magic("lv", "begin t1 --quiet")
    ip.run_line_magic("lv", "begin other snapshot --quiet")
    try:
        assert complete(ip, "%lv commit ") == {"t1", "other"}
        assert complete(ip, "%lv rollback o") == {"other"}
        assert complete(ip, "%%lvtxn --name ") == {"t1", "other"}
        ip.run_line_magic("lv", "rollback other")
        assert complete(ip, "%lv commit ") == {"t1"}  # ended transactions are not offered
    finally:
        STATE.shutdown()
        STATE.txns.clear()
