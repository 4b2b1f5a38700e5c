"""The magics through a real IPython shell (no Spark: Python bodies with file-level operations)."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

import lv_core
from lv_magic.args import ArgError, parse_lvtxn
from lv_magic.state import STATE
from tests.helpers.bank import committed_kv, make_kv
from tests.helpers.ipshell import magic_shell


@pytest.fixture(scope="module")
def ip():
    return magic_shell(widgets=False)


@pytest.fixture
def wh(ip, tmp_path):
    path = str(tmp_path / "wh")
    lh = lv_core.connect(path)
    make_kv(lh, "kv", {1: 10.0, 2: 20.0})
    ip.run_line_magic("lv", f"connect {path} --lazy")
    ip.user_ns["lv_core"] = lv_core
    ip.run_cell("from tests.helpers.bank import add_kv, read_kv, write_kv")
    yield lh
    STATE.shutdown()
    STATE.txns.clear()
    STATE.lh = None


def test_parse_lvtxn_options():
    a = parse_lvtxn("snapshot --name t1 --open --features R,CT --slack 2 --retries 3 --timeout 5 --out res --quiet")
    assert (a.preset, a.name, a.open, a.features, a.slack, a.retries, a.timeout, a.out, a.quiet) == \
        ("snapshot", "t1", True, "R,CT", 2, 3, 5.0, "res", True)
    for bad in ["serialisable", "--slack -1", "--timeout 0", "--out 1x", "--bogus", "--name 'a b'", "'unclosed"]:
        with pytest.raises(ArgError):
            parse_lvtxn(bad)


def test_help_lists_every_command_and_option(ip, capsys):
    ip.run_line_magic("lv", "help")
    out = capsys.readouterr().out
    for word in ["connect", "tables", "markers", "log", "dag", "status", "begin", "commit", "rollback", "recover",
                 "inspect", "--name", "--open", "--features", "--slack", "--retries", "--timeout", "--out",
                 "--python", "--quiet", "serializable", "snapshot", "write_serializable", "repeatable_read", "delta"]:
        assert word in out


def test_user_errors_are_usage_errors(ip, wh):
    for line in ["bogus", "log", "commit nope", "begin", "connect ftp://x"]:
        with pytest.raises(UsageError):
            ip.run_line_magic("lv", line)
    with pytest.raises(UsageError, match="unknown preset"):
        ip.run_cell_magic("lvtxn", "serialisable --python", "pass")
    with pytest.raises(UsageError, match="does not exist"):
        ip.run_cell_magic("lvtxn", "--python", "read_kv(txn, 'nope')")
    assert committed_kv(wh, "kv") == {1: 10.0, 2: 20.0}


def test_not_connected_is_a_clear_error(ip):
    STATE.lh = None
    with pytest.raises(UsageError, match="lv connect"):
        ip.run_cell_magic("lvtxn", "--python", "pass")


def test_python_cell_commits_as_one_transaction(ip, wh):
    ip.run_cell_magic("lvtxn", "repeatable_read --python", "add_kv(txn, 'kv', 1, -5)\nadd_kv(txn, 'kv', 2, 5)")
    assert committed_kv(wh, "kv") == {1: 5.0, 2: 25.0}


def test_failing_cell_rolls_back(ip, wh):
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("lvtxn", "--python", "add_kv(txn, 'kv', 1, -5)\n1/0")
    assert committed_kv(wh, "kv") == {1: 10.0, 2: 20.0}


def test_interleaved_lost_update_is_prevented(ip, wh, capsys):
    ip.run_line_magic("lv", "begin t1 repeatable_read --quiet")
    ip.run_line_magic("lv", "begin t2 repeatable_read --quiet")
    ip.run_cell_magic("lvtxn", "--name t1 --python", "v1 = read_kv(txn, 'kv', 1)[1]")
    ip.run_cell_magic("lvtxn", "--name t2 --python", "v2 = read_kv(txn, 'kv', 1)[1]")
    ip.run_cell_magic("lvtxn", "--name t1 --python", "write_kv(txn, 'kv', 1, v1 + 1)")
    ip.run_cell_magic("lvtxn", "--name t2 --python", "write_kv(txn, 'kv', 1, v2 + 1)")
    ip.run_line_magic("lv", "status")
    ip.run_line_magic("lv", "commit t2")  # t2 waits behind t1: returns at once
    out = capsys.readouterr().out
    assert "t2: waiting for t1 at kv@" in out and "background" in out  # names, not transaction ids
    ip.run_line_magic("lv", "dag")
    ip.run_line_magic("lv", "status")
    out = capsys.readouterr().out
    assert re.search(r"^t2 +t1 +kv@\d+$", out, re.M), out
    assert re.search(r"^t2 +repeatable_read +waiting for t1 at kv@\d+", out, re.M), out
    assert STATE.get("t1").txn.id not in out
    ip.run_line_magic("lv", "commit t1")
    with pytest.raises(lv_core.TransactionAborted) as ei:
        STATE.get("t2").future.result(timeout=30)
    assert ei.value.rule == "exposed_read"
    assert committed_kv(wh, "kv")[1] == 11.0


def test_commit_reports_a_waiting_commit_that_ended_before_it_looked(ip, wh, capsys, monkeypatch):
    """`%lv commit t1` says how t2's background commit ended even when t2 (waiting for t1) ended before the
    cell looked: the waiting commits are those from before t1 ended, not those still running after."""
    import lv_magic.cmd.txn as cmd_txn

    ip.run_line_magic("lv", "begin t1 repeatable_read --quiet")
    ip.run_line_magic("lv", "begin t2 repeatable_read --quiet")
    ip.run_cell_magic("lvtxn", "--name t1 --python", "write_kv(txn, 'kv', 1, read_kv(txn, 'kv', 1)[1] + 1)")
    ip.run_cell_magic("lvtxn", "--name t2 --python", "write_kv(txn, 'kv', 1, read_kv(txn, 'kv', 1)[1] + 100)")
    ip.run_line_magic("lv", "commit t2")  # waits behind t1 in the background
    capsys.readouterr()
    real_settle = cmd_txn.settle

    def settle_late(ctx, ended, *args, **kw):  # the cell's thread is slower than t2's abort
        STATE.get("t2").future.exception(timeout=30)
        return real_settle(ctx, ended, *args, **kw)

    monkeypatch.setattr(cmd_txn, "settle", settle_late)
    ip.run_line_magic("lv", "commit t1")
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith("t2 aborted (exposed_read")]
    # One line is the background output's own update ("... (after waiting for t1 at kv@3)"); the cell's is the other.
    assert [line for line in said if "(after waiting for t1" not in line], out


def test_tables_markers_log_dag_recover(ip, wh, capsys):
    ip.run_line_magic("lv", "begin t1 repeatable_read --quiet")
    ip.run_cell_magic("lvtxn", "--name t1 --python", "add_kv(txn, 'kv', 1, 1)")
    ip.run_line_magic("lv", "markers")
    ip.run_line_magic("lv", "log kv")
    ip.run_line_magic("lv", "tables")
    ip.run_line_magic("lv", "dag")
    ip.run_line_magic("lv", "recover")
    out = capsys.readouterr().out
    assert "live marker" in out
    ip.run_line_magic("lv", "rollback t1")
    assert committed_kv(wh, "kv") == {1: 10.0, 2: 20.0}


def test_retries_rerun_the_cell(ip, wh, capsys):
    ip.run_line_magic("lv", "begin blocker repeatable_read --quiet")
    ip.run_cell_magic("lvtxn", "--name blocker --python", "add_kv(txn, 'kv', 1, 100)")
    ip.user_ns["attempts"] = 0
    body = ("attempts += 1\n"
            "v = read_kv(txn, 'kv', 1)[1]\n"
            "write_kv(txn, 'kv', 1, v + 1)\n"
            "if attempts == 1:\n"
            "    import lv_magic.state as s\n"
            "    s.STATE.get('blocker').txn.commit()\n")
    ip.run_cell_magic("lvtxn", "repeatable_read --python --retries 2", body)
    assert ip.user_ns["attempts"] == 2
    assert committed_kv(wh, "kv")[1] == 111.0


def test_every_command_is_routed_and_runs_without_a_shell(capsys):
    from lv_magic.args import COMMANDS
    from lv_magic.context import MagicContext
    from lv_magic.router import ROUTES, run
    from lv_magic.state import KernelState

    assert list(ROUTES) == list(COMMANDS)  # the help text lists exactly the commands that run
    run(MagicContext(KernelState(), None), "help")
    assert capsys.readouterr().out.startswith("LakeVilla for Jupyter")
    with pytest.raises(lv_core.LvError, match="lv connect"):
        run(MagicContext(KernelState(), None), "tables")


def test_connect_conf_option(ip, tmp_path, capsys):
    path = str(tmp_path / "wh2")
    ip.run_line_magic("lv", f"connect {path} --lazy --conf spark.driver.memory=3g "
                      "--conf spark.sql.shuffle.partitions=6")
    lh = STATE.lh
    assert lh is not None and lh.data_plane.spark_conf == {
        "spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "6"}
    for bad in ["--conf memory=3g", "--conf spark.driver.memory", "--conf"]:
        with pytest.raises(UsageError):
            ip.run_line_magic("lv", f"connect {tmp_path / 'other'} {bad}")
        assert STATE.lh is lh  # nothing changed
    ip.run_line_magic("lv", "help")
    assert "--conf KEY=VALUE" in capsys.readouterr().out
    STATE.lh = None
