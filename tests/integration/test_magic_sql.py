"""Spark tier: SQL cells through a real IPython shell. A cell with an error runs nothing (no table
version changes, no transaction begins, no widget); a failing or interrupted cell rolls back and says
why in one line, without a traceback; variables are typed literals; SQL transaction control."""

from __future__ import annotations

import _thread
import re
import signal
import threading
from typing import Any

import pytest
from IPython.utils.capture import capture_output

import lv_core
from lv_core import events as ev
from lv_magic.state import STATE
from tests.helpers.ipshell import magic_shell

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def ip() -> Any:
    return magic_shell(widgets=False)


@pytest.fixture
def lh(ip: Any, spark: Any, tmp_path: Any) -> Any:
    path = str(tmp_path / "wh")
    ip.run_line_magic("lv", f"connect {path}")
    lh = STATE.lh
    lh.sql("CREATE TABLE acct (id BIGINT, balance DOUBLE, owner STRING); "
           "CREATE TABLE acct_b (id BIGINT, balance DOUBLE)")
    lh.sql("INSERT INTO acct VALUES (1, 100.0, 'ann'), (2, 50.0, 'bob'); INSERT INTO acct_b VALUES (1, 10.0)")
    yield lh
    STATE.shutdown()
    STATE.txns.clear()
    STATE.sql_txn = None
    STATE.lh = None


# A statement that runs until interrupted, in a task of its first Spark job (Thread.sleep stops when Spark
# kills the task). The sleep is in the WHERE clause: the job that finds the rows to change sleeps, a read,
# which Spark always stops. (In the SET clause the sleep ran in the write job, and an interrupt landing
# while that job set up its output folder was lost: the statement ran on; see sqlcell.Lingering.)
LONG_UPDATE = ("UPDATE acct SET balance = balance + 1 WHERE id = 2 AND coalesce(length(reflect("
               "'java.lang.Thread', 'sleep', bigint(600000))), 0) >= 0")


def versions(lh: Any) -> dict[str, int]:
    return {t: lh.version(t) for t in lh.list_tables()}


def unchanged(lh: Any, before: dict[str, int]) -> bool:
    """No table has a data commit after ``before`` (a rolled-back transaction's markers are freed as
    empty versions: they change no data)."""
    return all(e.kind in ("marker", "freed") for t, v in before.items() for e in lh.log(t) if e.version > v)


def rows(lh: Any, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in lh.read(table).collect())


def run(ip: Any, line: str, cell: str, capsys: Any) -> tuple[Any, str]:
    """Run a cell as the notebook does; returns (the error or None, stdout + stderr)."""
    res = ip.run_cell(f"%%{line}\n{cell}")
    cap = capsys.readouterr()
    return res.error_in_exec, cap.out + cap.err


def recording(lh: Any) -> list[Any]:
    """The transactions the magics begin from now on."""
    began: list[Any] = []
    original = type(lh).begin

    def begin(*args: Any, **kwargs: Any) -> Any:
        began.append(original(lh, *args, **kwargs))
        return began[-1]

    lh.begin = begin
    return began


@pytest.mark.parametrize("cell, message", [
    ("UPDATE acct SET balance = balance - 1 WHERE id = 1;\nUPDATE acct_bb SET balance = balance + 1 WHERE id = 1",
     "line 2: table 'acct_bb' does not exist; did you mean 'acct_b'"),
    ("UPDATE acct SET balance = 0 WHERE id = 1;\nUPDATE acct_b SET balnce = 1", "line 2: table 'acct_b' has no column "
     "'balnce'; did you mean 'balance'?"),
    ("UPDATE acct SET balance = 0 WHERE id = 1;\nSELECT id FROM acct WHERE ownr = 'ann'", "did you mean 'owner'?"),
    ("UPDTE acct SET balance = 0 WHERE id = 1",
     r"'UPDTE' statements are not supported \(line 1\); did you mean UPDATE\?"),
    ("UPDATE acct SET balance = 0\nWHRE id = 1", "line 2, column 1 near 'WHRE'.*did you mean WHERE?"),
    ("UPDATE acct SET balance = 'lots' WHERE id = 1", "column 'balance' is double; the value 'lots' is a string"),
    ("UPDATE acct SET balance = :amount WHERE id = 1", "line 1: variable 'amount' is not defined; did you mean 'amt'"),
])
def test_cell_with_an_error_runs_nothing(ip: Any, lh: Any, capsys: Any, cell: str, message: str) -> None:
    ip.user_ns["amt"] = 5
    before = versions(lh)
    began = recording(lh)
    ip.run_line_magic("config", "LvMagics.widgets = True")
    try:
        with capture_output() as cap:
            res = ip.run_cell(f"%%lvtxn\n{cell}")
    finally:
        ip.run_line_magic("config", "LvMagics.widgets = False")
    assert type(res.error_in_exec).__name__ == "UsageError"
    assert re.search(message, str(res.error_in_exec)), str(res.error_in_exec)
    assert "Traceback" not in cap.stdout + cap.stderr
    assert cap.outputs == []  # no widget: the transaction never began
    assert began == [] and versions(lh) == before


def test_statements_say_one_line_each_and_results_show_counts(ip: Any, lh: Any, capsys: Any) -> None:
    err, out = run(ip, "lvtxn --name t1", "UPDATE acct SET balance = balance - 10 WHERE id = 1;\n"
                   "INSERT INTO acct_b VALUES (2, 10.0), (3, 0.0);\nSELECT id, balance FROM acct ORDER BY id", capsys)
    assert err is None, out
    lines = out.splitlines()
    assert "UPDATE acct: 1 row" in lines and "INSERT INTO acct_b: 2 rows" in lines
    assert "SELECT (acct): 2 rows" in lines
    assert "num_affected_rows" not in out and not any(line.startswith("0 ") for line in lines)  # no pandas index
    assert any(line.startswith("transaction t1 committed: ") for line in lines)
    assert rows(lh, "acct")[0][1] == 90.0


def test_a_cell_is_parsed_bound_and_resolved_once(ip: Any, lh: Any, capsys: Any, monkeypatch: Any) -> None:
    from lv_core import presets
    from lv_core.engine import sql, sql_check, sql_parse
    from tests.helpers.spy import count_calls

    parse, bind = count_calls(monkeypatch, sql_parse.parse_statement), count_calls(monkeypatch, sql_check.check_script)
    lookup, resolve = count_calls(monkeypatch, sql.resolve_tables), count_calls(monkeypatch, presets.resolve)
    err, out = run(ip, "lvtxn snapshot", "UPDATE ACCT SET balance = balance - 10 WHERE id = 1;\n"
                   "INSERT INTO Acct_B VALUES (2, 10.0);\nSELECT id, balance FROM acct ORDER BY id;\nDESCRIBE acct_B",
                   capsys)
    assert err is None, out
    lines = out.splitlines()
    assert "UPDATE ACCT: 1 row" in lines and "INSERT INTO Acct_B: 1 row" in lines  # as written, bound to acct
    assert rows(lh, "acct")[0][1] == 90.0 and rows(lh, "acct_b")[-1] == (2, 10.0)
    assert (len(parse), len(bind), lookup, resolve) == (4, 1, [], [("snapshot", None, None)])
    err, out = run(ip, "lvsql", "DESCRIBE Acct;\nUPDATE acct SET balance = 1 WHERE id = 2", capsys)
    assert err is None and "UPDATE acct: 1 row" in out, out
    assert (len(parse), len(bind), lookup) == (6, 2, [])


def test_runtime_failure_rolls_back_and_says_why(ip: Any, lh: Any, capsys: Any) -> None:
    before = versions(lh)
    began = recording(lh)
    err, out = run(ip, "lvtxn", "UPDATE acct SET balance = balance - 1 WHERE id = 1;\n"
                   "UPDATE acct_b SET balance = balance / (id - 1) WHERE id = 1", capsys)
    assert type(err).__name__ == "UsageError" and "DIVIDE_BY_ZERO" in str(err)
    assert "rolled back: nothing changed" in str(err)
    assert "UPDATE acct: 1 row" not in out and "Traceback" not in out
    aborted = [e for e in began[0].events.history if isinstance(e, ev.Aborted)]
    assert aborted[0].rule == "error" and aborted[0].reason.startswith("statement 2 failed: ")
    assert "by the user" not in aborted[0].reason
    ends = [(e.statement, e.stage) for e in began[0].events.history if isinstance(e, ev.Progress)
            and e.stage != "running"]
    assert ends == [(1, "done"), (2, "failed")]
    assert unchanged(lh, before)


def test_variables_are_typed_literals(ip: Any, lh: Any, capsys: Any) -> None:
    import decimal

    ip.user_ns.update(new_id=7, amount=decimal.Decimal("12.50"), who="O'Brien \\ {x}", nothing=None)
    err, out = run(ip, "lvtxn", "INSERT INTO acct VALUES ({new_id}, :amount, :who);\n"
                   "INSERT INTO acct VALUES (8, :nothing, '{who} stays -- text')  -- :undefined in a comment", capsys)
    assert err is None, out
    got = {r[0]: r for r in rows(lh, "acct")}
    assert got[7] == (7, 12.5, "O'Brien \\ {x}")
    assert got[8] == (8, None, "{who} stays -- text")


def test_interrupt_stops_the_running_statement_and_rolls_back(ip: Any, lh: Any, capsys: Any) -> None:
    before = versions(lh)
    began = recording(lh)
    running, returned = threading.Event(), threading.Event()

    def watch() -> None:  # the first progress report of the running statement -> one kernel interrupt
        if running.wait(timeout=120) and not returned.is_set():
            _thread.interrupt_main()

    original = lh.begin

    def begin(*args: Any, **kwargs: Any) -> Any:
        txn = original(*args, **kwargs)
        txn.events.subscribe(lambda e: running.set()
                             if isinstance(e, ev.Progress) and e.stage == "running" and e.statement == 2 else None)
        return txn

    lh.begin = begin
    # interrupt_main() is ignored while SIGINT has no Python handler (an earlier test or library may have
    # left SIG_DFL/SIG_IGN; a kernel always has one): install the default one for this test. One interrupt
    # only: a second one would land wherever the cell's clean-up happens to be.
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=watch, daemon=True).start()
        try:
            err, out = run(ip, "lvtxn", f"UPDATE acct SET balance = 0 WHERE id = 1;\n{LONG_UPDATE}", capsys)
        finally:
            returned.set()
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert running.is_set()
    assert type(err).__name__ == "UsageError", out
    assert str(err).startswith("interrupted (kernel interrupt): statement 2 stopped")
    assert "rolled back; nothing changed" in str(err) and "Traceback" not in out
    aborted = [e for e in began[0].events.history if isinstance(e, ev.Aborted)]
    assert aborted[0].rule == "interrupt" and "by the user" not in aborted[0].reason
    assert unchanged(lh, before)
    err, out = run(ip, "lvtxn", "SELECT count(*) AS n FROM acct", capsys)  # the engine is usable again
    assert err is None and "SELECT (acct): 1 row" in out


def _cancel_at_first_progress(lh: Any, statement: int) -> None:
    """Every transaction ``lh`` begins cancels itself (from another thread) at the first progress report
    of the cell's statement number ``statement`` (a short statement before it may report progress too)."""
    original = lh.begin

    def begin(*args: Any, **kwargs: Any) -> Any:
        txn = original(*args, **kwargs)
        def on(e: Any) -> None:
            if isinstance(e, ev.Progress) and e.stage == "running" and e.statement == statement:
                threading.Thread(target=txn.cancel).start()

        txn.events.subscribe(on, replay=False)
        return txn

    lh.begin = begin


def test_cancel_from_another_thread(ip: Any, lh: Any, capsys: Any) -> None:
    before = versions(lh)
    _cancel_at_first_progress(lh, statement=1)
    err, out = run(ip, "lvtxn", LONG_UPDATE, capsys)
    assert type(err).__name__ == "UsageError" and str(err).startswith("cancelled: statement 1 stopped"), out
    assert unchanged(lh, before)


def test_cancel_in_an_autocommit_cell(ip: Any, lh: Any, capsys: Any) -> None:
    before = versions(lh)
    _cancel_at_first_progress(lh, statement=2)
    err, out = run(ip, "lvsql", f"UPDATE acct SET balance = 3 WHERE id = 1;\n{LONG_UPDATE}", capsys)
    assert type(err).__name__ == "UsageError" and str(err).startswith("cancelled: statement 2 stopped"), out
    assert "UPDATE acct: 1 row" in out  # statement 1 committed on its own (autocommit) and says so
    assert rows(lh, "acct")[0][1] == 3.0 and unchanged(lh, {"acct_b": before["acct_b"]})


def test_sql_transaction_control_in_cells(ip: Any, lh: Any, capsys: Any) -> None:
    before = versions(lh)
    err, out = run(ip, "lvsql", "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ;\n"
                   "UPDATE acct SET balance = balance + 1 WHERE id = 1", capsys)
    assert err is None and "BEGIN: sql (repeatable_read) is open" in out and "UPDATE acct: 1 row" in out
    ip.run_line_magic("lv", "status")
    assert re.search(r"^sql +repeatable_read +active +acct@\d+$", capsys.readouterr().out, re.M)
    assert unchanged(lh, before)  # not committed yet
    err, out = run(ip, "lvsql", "UPDATE acct_b SET balance = balance + 1 WHERE id = 1;\nCOMMIT", capsys)
    assert err is None
    assert re.search(r"^COMMIT: sql committed \((acct_b@\d+, acct@\d+|acct@\d+, acct_b@\d+)\)$", out, re.M), out
    assert rows(lh, "acct")[0][1] == 101.0 and rows(lh, "acct_b")[0][1] == 11.0
    after = versions(lh)
    assert not unchanged(lh, before)
    err, out = run(ip, "lvsql", "BEGIN;\nDELETE FROM acct;\nROLLBACK", capsys)
    assert err is None and "ROLLBACK: sql rolled back; nothing changed" in out
    err, out = run(ip, "lvsql", "BEGIN ATOMIC\n  DELETE FROM acct WHERE id = 1;\n"
                   "  UPDATE acct_b SET balance = balance / (id - 1);\nEND", capsys)
    assert type(err).__name__ == "UsageError" and "(BEGIN ATOMIC) rolled back" in str(err)
    assert "DELETE FROM acct" not in out
    assert unchanged(lh, after)
    err, out = run(ip, "lvtxn", "BEGIN ISOLATION LEVEL SNAPSHOT;\nUPDATE acct SET balance = 5 WHERE id = 2;\nCOMMIT",
                   capsys)
    assert err is None and "UPDATE acct: 1 row" in out
    err, out = run(ip, "lvsql", "BEGIN;\nUPDATE acct SET balance = 7 WHERE id = 2", capsys)
    err, out = run(ip, "lvsql", "UPDATE acct SET balance = balance / (id - 2) WHERE id = 2", capsys)
    assert "DIVIDE_BY_ZERO" in str(err) and "transaction sql stays open" in str(err)
    err, out = run(ip, "lvsql", "COMMIT", capsys)
    assert err is None and rows(lh, "acct")[1][1] == 7.0


def test_lh_sql_begin_commit(lh: Any) -> None:
    before = rows(lh, "acct")
    lh.sql("BEGIN; UPDATE acct SET balance = 1 WHERE id = 1")
    lh.sql("UPDATE acct SET balance = 2 WHERE id = 2")
    assert rows(lh, "acct") == before  # nothing committed yet (the table holds the transaction's marker)
    lh.sql("COMMIT")
    assert [r[1] for r in rows(lh, "acct")] == [1.0, 2.0]
    with pytest.raises(lv_core.LvError, match="BEGIN ATOMIC without END"):
        lh.sql("BEGIN ATOMIC UPDATE acct SET balance = 0")
