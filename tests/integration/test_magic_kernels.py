"""The magics in real IPython kernels (jupyter_client), as a notebook runs them: a commit that went on in
the background updates the output of the cell that asked for it; another kernel's transaction is shown
by the name its owner gave it, with its short id. No Spark: Python bodies with file-level operations."""

from __future__ import annotations

import os
import queue
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import lv_core
from lv_core.protocol.layout import short_id
from tests.helpers.bank import committed_kv, make_kv

pytestmark = pytest.mark.notebook

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ran:
    """What one cell sent: its outputs (stream text and display bundles), updates of earlier displays
    (display id -> text), and its error (ename, evalue) if any."""

    text: str = ""
    displays: list[dict[str, Any]] = field(default_factory=list)  # {"id": display id or None, "data": bundle}
    updates: dict[str, str] = field(default_factory=dict)
    error: tuple[str, str] | None = None

    def shown(self) -> str:
        return self.text + "\n".join(d["data"].get("text/plain", "") for d in self.displays)


class Kernel:
    """A real IPython kernel with this worktree on its path, run cell by cell."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        """``env``: added to the kernel's environment (``spark_remote``: Spark is the tests' server)."""
        from jupyter_client.manager import start_new_kernel

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(ROOT),
                                            extra_arguments=[f"--IPKernelApp.exec_lines=import sys; "
                                                             f"sys.path.insert(0, {str(ROOT)!r})"])

    def run(self, code: str, timeout: float = 60.0) -> Ran:
        msg_id = self.kc.execute(code)
        out = Ran()
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no idle after {timeout} s for {code!r}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.text += content["text"]
            elif kind == "display_data":
                out.displays.append({"id": content.get("transient", {}).get("display_id"), "data": content["data"]})
            elif kind == "update_display_data":
                out.updates[content["transient"]["display_id"]] = content["data"].get("text/plain", "")
            elif kind == "error":
                out.error = (content["ename"], content["evalue"])
            elif kind == "status" and content["execution_state"] == "idle":
                while self.kc.get_shell_msg(timeout=timeout)["parent_header"].get("msg_id") != msg_id:
                    pass  # an earlier request's reply
                return out

    def ok(self, code: str, timeout: float = 60.0) -> Ran:
        ran = self.run(code, timeout)
        assert ran.error is None, f"{code!r}: {ran.error}"
        return ran

    def stop(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


SETUP = """%load_ext lv_magic
%config LvMagics.widgets = False
from tests.helpers.bank import add_kv, read_kv, write_kv
%lv connect {path} --lazy
"""


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    path = str(tmp_path / "wh")
    lh = lv_core.connect(path)
    make_kv(lh, "kv", {1: 10.0, 2: 20.0})
    yield path, lh


@pytest.fixture
def kernels() -> Iterator[list[Kernel]]:
    started: list[Kernel] = []
    yield started
    for k in started:
        k.stop()


def interleave(k: Kernel, first: str, second: str, key2: int) -> None:
    """``first`` reads and writes key 1, ``second`` reads and writes key ``key2`` (adding 100): both hold
    markers on kv, ``second``'s behind ``first``'s."""
    k.ok(f"%lv begin {first} repeatable_read --quiet")
    k.ok(f"%lv begin {second} repeatable_read --quiet")
    k.ok(f"%%lvtxn --name {first} --python\nv1 = read_kv(txn, 'kv', 1)[1]")
    k.ok(f"%%lvtxn --name {second} --python\nv2 = read_kv(txn, 'kv', {key2})[{key2}]")
    k.ok(f"%%lvtxn --name {first} --python\nwrite_kv(txn, 'kv', 1, v1 + 1)")
    k.ok(f"%%lvtxn --name {second} --python\nwrite_kv(txn, 'kv', {key2}, v2 + 100)")


@pytest.mark.parametrize("key2, outcome", [
    (1, r"t2 aborted \(exposed_read: returned result changed\), nothing changed: "),  # read what t1 changed
    (2, r"t2 committed: kv@\d+"),
])
def test_background_commit_shows_its_outcome_in_its_own_cell(warehouse: tuple[str, Any], kernels: list[Kernel],
                                                             key2: int, outcome: str) -> None:
    path, lh = warehouse
    k = Kernel()
    kernels.append(k)
    k.ok(SETUP.format(path=path))
    interleave(k, "t1", "t2", key2)
    asked = k.ok("%lv commit t2")  # waits behind t1: returns at once, saying so
    (note,) = [d for d in asked.displays if d["id"]]
    assert re.search(r"t2: waiting for t1 at kv@\d+; the commit continues in the background",
                     note["data"]["text/plain"])
    assert "lv-outcome-waiting" in note["data"]["text/html"]

    ended = k.ok("%lv commit t1")  # t2's wait ends in this cell
    assert re.search("^t1 committed: kv@\\d+\n" + outcome, ended.text), ended.text  # said where it happened
    update = ended.updates.get(note["id"])  # and the output of `%lv commit t2` now says how it ended
    assert update is not None and re.search(outcome, update), ended.updates
    assert "after waiting for t1" in update
    assert "waiting" not in update.split(" (after")[0]
    assert committed_kv(lh, "kv")[1] == 11.0
    assert committed_kv(lh, "kv")[2] == (20.0 if key2 == 1 else 120.0)

    status = k.ok("%lv status").shown()  # ended transactions apart from open ones
    assert "no open transactions" in status
    assert re.search(r"^t1 +repeatable_read +committed: kv@\d+", status, re.M), status
    assert re.search(r"^t2 +repeatable_read +" + ("aborted \\(exposed_read\\)" if key2 == 1 else "committed"),
                     status, re.M), status


def test_other_kernels_transactions_show_by_name_and_short_id(warehouse: tuple[str, Any],
                                                              kernels: list[Kernel]) -> None:
    path, lh = warehouse
    one, two = Kernel(), Kernel()
    kernels.extend([one, two])
    for k in (one, two):
        k.ok(SETUP.format(path=path))
    one.ok("%lv begin alpha repeatable_read --quiet")
    one.ok("%%lvtxn --name alpha --python\nadd_kv(txn, 'kv', 1, 1)")  # holds a marker on kv
    alpha = one.ok("print(__import__('lv_magic.state').state.STATE.get('alpha').txn.id)").text.strip()
    shown = f"alpha ({short_id(alpha)})"

    markers = two.ok("%lv markers").shown()
    assert re.search(rf"^kv +\d+ +{re.escape(shown)} +\d+s", markers, re.M), markers
    assert alpha not in markers

    # kernel 2 writes kv too: its commit waits behind alpha's marker, and says so by name
    two.ok("%lv begin beta repeatable_read --quiet")
    two.ok("%%lvtxn --name beta --python\nadd_kv(txn, 'kv', 2, 5)")
    asked = two.ok("%lv commit beta")
    note = "\n".join(d["data"].get("text/plain", "") for d in asked.displays) + asked.text
    assert re.search(rf"beta: waiting for {re.escape(shown)} at kv@\d+", note), note
    status = two.ok("%lv status").shown()
    assert f"waiting for {shown}" in status and alpha not in status
    dag = two.ok("%lv dag").shown()
    assert re.search(rf"^beta +{re.escape(shown)} +kv@\d+", dag, re.M), dag  # the other kernel's wait

    one.ok("%lv commit alpha")
    # the next cell of kernel 2 (here: one that awaits beta's commit) resends the outcome of `%lv commit beta`
    after = two.ok("print(__import__('lv_magic.state').state.STATE.get('beta').future.exception(timeout=30))")
    assert after.text.strip() == "None"
    (display_id,) = [d["id"] for d in asked.displays if d["id"]]
    assert re.search(r"beta committed: kv@\d+", after.updates.get(display_id, "")), after.updates
    assert committed_kv(lh, "kv") == {1: 11.0, 2: 25.0}


@pytest.mark.spark
def test_sql_lines_of_an_open_transaction_are_struck_through_when_it_rolls_back(tmp_path: Path,
                                                                               kernels: list[Kernel],
        spark_remote: dict[str, str]) -> None:
    k = Kernel(spark_remote)
    kernels.append(k)
    k.ok(SETUP.format(path=str(tmp_path / "wh")).replace(" --lazy", ""), timeout=300)  # reaches Spark
    created = k.ok("%%lvtxn --quiet\nCREATE TABLE acct (id BIGINT, balance DOUBLE);\nCREATE TABLE acct_b (id BIGINT)")
    assert re.search(r"committed: created acct, acct_b$", created.text.strip()), created.text
    k.ok("%%lvtxn --quiet\nINSERT INTO acct VALUES (1, 100.0), (2, 50.0)")
    opened = k.ok("%%lvtxn --name t1 --open --quiet\nUPDATE acct SET balance = balance - 10 WHERE id = 1")
    (lines,) = [d for d in opened.displays if "lv-lines" in d["data"].get("text/html", "")]
    assert lines["data"]["text/plain"] == "UPDATE acct: 1 row"
    rolled = k.ok("%lv rollback t1")
    assert "t1 rolled back; nothing changed" in rolled.text
    update = rolled.updates.get(lines["id"])  # the earlier cell's line, in place
    assert update == "UPDATE acct: 1 row  (rolled back)", rolled.updates
    kept = k.ok("%%lvtxn --name t2 --open --quiet\nUPDATE acct SET balance = balance + 1 WHERE id = 2")
    (lines2,) = [d for d in kept.displays if "lv-lines" in d["data"].get("text/html", "")]
    done = k.ok("%lv commit t2")
    assert re.search(r"t2 committed: acct@\d+", done.text) and lines2["id"] not in done.updates  # stays as it was


@pytest.mark.spark
def test_lvsql_lines_of_an_open_begin_are_struck_through_when_it_rolls_back(tmp_path: Path,
                                                                           kernels: list[Kernel],
        spark_remote: dict[str, str]) -> None:
    """The same for %%lvsql: the statements of a BEGIN left open at the cell's end, not those before it."""
    k = Kernel(spark_remote)
    kernels.append(k)
    k.ok(SETUP.format(path=str(tmp_path / "wh")).replace(" --lazy", ""), timeout=300)  # reaches Spark
    k.ok("%%lvtxn --quiet\nCREATE TABLE acct (id BIGINT, balance DOUBLE)")
    opened = k.ok("%%lvsql\nINSERT INTO acct VALUES (1, 100.0);\nBEGIN;\n"
                  "UPDATE acct SET balance = balance - 10 WHERE id = 1")
    (lines,) = [d for d in opened.displays if "lv-lines" in d["data"].get("text/html", "")]
    assert lines["data"]["text/plain"] == "UPDATE acct: 1 row", lines  # the INSERT before BEGIN is not in it
    assert "INSERT INTO acct: 1 row" in opened.shown()
    rolled = k.ok("%%lvsql\nROLLBACK")
    assert rolled.updates.get(lines["id"]) == "UPDATE acct: 1 row  (rolled back)", rolled.updates


def test_a_sql_commit_that_waits_shows_its_outcome_in_its_own_cell(warehouse: tuple[str, Any],
                                                                   kernels: list[Kernel]) -> None:
    path, lh = warehouse
    k = Kernel()
    kernels.append(k)
    k.ok(SETUP.format(path=path))
    k.ok("%lv begin t1 repeatable_read --quiet")
    k.ok("%%lvtxn --name t1 --python\nadd_kv(txn, 'kv', 1, 1)")
    k.ok("%%lvsql --quiet\nBEGIN ISOLATION LEVEL REPEATABLE READ")  # the transaction named "sql"
    k.ok("%%lvtxn --name sql --python\nadd_kv(txn, 'kv', 2, 5)")  # its marker on kv comes after t1's
    asked = k.ok("%%lvsql\nCOMMIT")
    (note,) = [d for d in asked.displays if d["id"] and "lv-outcome" in d["data"].get("text/html", "")]
    assert re.search(r"^COMMIT: sql: waiting for t1 at kv@\d+", note["data"]["text/plain"])
    ended = k.ok("%lv commit t1")
    assert re.search(r"^t1 committed: kv@\d+\nsql committed: kv@\d+", ended.text), ended.text
    assert re.search(r"^COMMIT: sql committed: kv@\d+", ended.updates.get(note["id"], "")), ended.updates
    assert committed_kv(lh, "kv") == {1: 11.0, 2: 25.0}


def test_a_commit_whose_wait_times_out_says_so_in_its_own_cell(warehouse: tuple[str, Any],
                                                               kernels: list[Kernel]) -> None:
    path, lh = warehouse
    k = Kernel()
    kernels.append(k)
    k.ok(SETUP.format(path=path))
    k.ok("%lv begin t1 repeatable_read --quiet")
    k.ok("%lv begin t2 repeatable_read --timeout 2 --quiet")
    k.ok("%%lvtxn --name t1 --python\nadd_kv(txn, 'kv', 1, 1)")
    k.ok("%%lvtxn --name t2 --python\nadd_kv(txn, 'kv', 2, 5)")
    asked = k.ok("%lv commit t2")  # t1 stays open: t2's wait runs out after 2 s
    (note,) = [d for d in asked.displays if d["id"]]
    assert "t2: waiting for t1" in note["data"]["text/plain"]
    later = k.ok("from lv_magic.state import STATE\n"
                 "print(type(STATE.get('t2').future.exception(timeout=60)).__name__)")
    assert later.text.strip() == "TransactionAborted"
    update = later.updates.get(note["id"], "")  # resent from this (the next) cell: a saved notebook keeps it
    assert update.startswith("t2 aborted: its wait timed out, nothing changed ("), later.updates
    k.ok("%lv rollback t1")
    assert committed_kv(lh, "kv") == {1: 10.0, 2: 20.0}


def test_a_commit_that_goes_on_waiting_for_another_does_not_hold_the_cell(warehouse: tuple[str, Any],
                                                                          kernels: list[Kernel]) -> None:
    """t2 waits for t1 (kv) and t3 (kv2). `%lv commit t1` does not wait for t2, which still waits for t3
    (tutorial 02's shape); `%lv commit t3` then says how t2 ended, and so does t2's own cell."""
    path, lh = warehouse
    make_kv(lh, "kv2", {1: 1.0, 2: 2.0})
    k = Kernel()
    kernels.append(k)
    k.ok(SETUP.format(path=path))
    for name in ("t1", "t3", "t2"):
        k.ok(f"%lv begin {name} repeatable_read --quiet")
    k.ok("%%lvtxn --name t1 --python\nadd_kv(txn, 'kv', 1, 1)")
    k.ok("%%lvtxn --name t3 --python\nadd_kv(txn, 'kv2', 1, 1)")
    k.ok("%%lvtxn --name t2 --python\nadd_kv(txn, 'kv', 2, 5)\nadd_kv(txn, 'kv2', 2, 5)")
    asked = k.ok("%lv commit t2")
    (note,) = [d for d in asked.displays if d["id"]]
    assert re.search(r"t2: waiting for t[13] at kv2?@\d+", note["data"]["text/plain"])
    first = k.ok("import time\nt0 = time.monotonic()")
    assert first.error is None
    said = k.ok("%lv commit t1").text
    assert said.startswith("t1 committed: kv@")
    if "waiting for t1" in note["data"]["text/plain"]:  # it waited for t1 first: the t1 cell says where it is now
        assert re.search(r"^t2: waiting for t3 at kv2@\d+; its commit goes on in the background$", said, re.M), said
    took = float(k.ok("print(time.monotonic() - t0)").text)
    assert took < 8.0, took  # not held for settle's 10 s: t2 went on to wait for t3
    ended = k.ok("%lv commit t3")
    both = r"t2 committed: (kv@\d+, kv2@\d+|kv2@\d+, kv@\d+)"
    assert re.search(r"^t3 committed: kv2@\d+\n" + both, ended.text), ended.text
    assert re.search("^" + both, ended.updates.get(note["id"], "")), ended.updates
    assert committed_kv(lh, "kv") == {1: 11.0, 2: 25.0} and committed_kv(lh, "kv2") == {1: 2.0, 2: 7.0}
