"""A cell's SQL is parsed and bound once, and its preset resolved once (also across ``--retries``
re-runs): counted with wrappers around the real functions, in a real IPython shell on a local-folder
lakehouse. No Spark here: the SQL cells are CREATE TABLE statements (which need none); the cells
with data work are counted in the Spark tier (tests/integration/test_magic_sql.py)."""

from __future__ import annotations

from typing import Any

import pytest

import lv_core
from lv_core import presets
from lv_core.engine import sql, sql_check, sql_parse
from lv_magic.state import STATE
from tests.helpers.bank import committed_kv, make_kv
from tests.helpers.ipshell import magic_shell
from tests.helpers.spy import count_calls


@pytest.fixture(scope="module")
def ip() -> Any:
    return magic_shell(widgets=False)


@pytest.fixture
def wh(ip: Any, tmp_path: Any) -> Any:
    path = str(tmp_path / "wh")
    lh = lv_core.connect(path)
    make_kv(lh, "kv", {1: 10.0, 2: 20.0})
    ip.run_line_magic("lv", f"connect {path} --lazy")
    ip.run_cell("from tests.helpers.bank import add_kv, read_kv, write_kv")
    yield lh
    STATE.shutdown()
    STATE.txns.clear()
    STATE.sql_txn = None
    STATE.lh = None


@pytest.fixture
def counts(monkeypatch: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {"parse": count_calls(monkeypatch, sql_parse.parse_statement),
            "bind": count_calls(monkeypatch, sql_check.check_script),
            "lookup": count_calls(monkeypatch, sql.resolve_tables),
            "resolve": count_calls(monkeypatch, presets.resolve)}


def test_lvtxn_cell_is_parsed_bound_and_resolved_once(ip: Any, wh: Any, counts: dict, capsys: Any) -> None:
    cell = "BEGIN ISOLATION LEVEL SNAPSHOT;\nCREATE TABLE fresh (id BIGINT);\nCREATE TABLE fresh_b (x STRING);\nCOMMIT"
    res = ip.run_cell(f"%%lvtxn --features R\n{cell}")
    assert res.error_in_exec is None
    out = capsys.readouterr().out
    assert "CREATE TABLE fresh: created" in out and "committed: created fresh, fresh_b" in out
    assert {"fresh", "fresh_b"} <= set(wh.list_tables())
    assert len(counts["parse"]) == 4  # BEGIN, two CREATE TABLEs, COMMIT: each once
    assert len(counts["bind"]) == 1 and counts["lookup"] == []
    assert counts["resolve"] == [("snapshot", "R", None)]  # the cell's BEGIN preset with the line's features


def test_lvsql_cell_is_parsed_and_bound_once(ip: Any, wh: Any, counts: dict, capsys: Any) -> None:
    res = ip.run_cell("%%lvsql\nCREATE TABLE one (id BIGINT);\nCREATE TABLE two (id BIGINT)")
    assert res.error_in_exec is None
    assert "CREATE TABLE two: created" in capsys.readouterr().out
    assert len(counts["parse"]) == 2 and len(counts["bind"]) == 1 and counts["lookup"] == []


def test_preset_is_resolved_once_for_every_rerun(ip: Any, wh: Any, counts: dict) -> None:
    ip.run_line_magic("lv", "begin blocker repeatable_read --quiet")
    ip.run_cell_magic("lvtxn", "--name blocker --python", "add_kv(txn, 'kv', 1, 100)")
    counts["resolve"].clear()
    ip.user_ns["seen"] = []
    body = ("seen.append((txn.preset, sorted(txn.features), txn.id))\n"
            "v = read_kv(txn, 'kv', 1)[1]\n"
            "write_kv(txn, 'kv', 1, v + 1)\n"
            "if len(seen) == 1:\n"
            "    import lv_magic.state as s\n"
            "    s.STATE.get('blocker').txn.commit()\n")
    ip.run_cell_magic("lvtxn", "repeatable_read --features R --python --retries 2", body)
    seen = ip.user_ns["seen"]
    assert len(seen) == 2 and seen[0][2] != seen[1][2]  # the first attempt aborted, the second committed
    assert [s[:2] for s in seen] == [("repeatable_read", ["R"])] * 2  # both began under the one resolution
    assert counts["resolve"] == [("repeatable_read", "R", None)]
    assert committed_kv(wh, "kv")[1] == 111.0


def test_a_bad_feature_is_refused_before_anything_runs(ip: Any, wh: Any, counts: dict) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="unknown feature"):
        ip.run_cell_magic("lvtxn", "--features X", "CREATE TABLE never (id BIGINT)")
    assert "never" not in wh.list_tables() and len(counts["resolve"]) == 1
