"""Spark tier, the magics in a real IPython kernel (jupyter_client, as a notebook front end talks to
it): ``--out`` gives pandas (``--spark`` the Spark DataFrame), results show NULL as ``NULL`` and
integer sums as integers, ``--chart`` sends an SVG, bad options change nothing, ``%lv`` typos get a
"did you mean", and ``complete_request`` completes ``%lv`` commands, presets and open transactions.

One kernel for the module; its Spark is the tests' server (``spark_remote``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]


class Kernel:
    """A started kernel and its blocking client; :meth:`run` returns what the cell sent."""

    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    def run(self, code: str, timeout: float = 300) -> dict[str, Any]:
        """Execute ``code``; returns {"status", "error" (ename: evalue), "text" (stdout and text/plain),
        "stderr" (where IPython prints a UsageError), "html" (text/html parts)}."""
        got: dict[str, Any] = {"text": "", "stderr": "", "html": "", "error": None}

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                got["text" if content["name"] == "stdout" else "stderr"] += content["text"]
            elif kind in ("display_data", "execute_result", "update_display_data"):
                got["text"] += content["data"].get("text/plain", "") + "\n"
                got["html"] += content["data"].get("text/html", "")
            elif kind == "error":
                got["error"] = f"{content['ename']}: {content['evalue']}"

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=timeout, allow_stdin=False)
        got["status"] = reply["content"]["status"]
        return got

    def value(self, expr: str) -> Any:
        """A JSON-able Python expression evaluated in the kernel."""
        got = self.run(f"import json as _j; print(_j.dumps({expr}))")
        assert got["status"] == "ok", got
        return json.loads(got["text"].strip().splitlines()[-1])

    def complete(self, code: str) -> list[str]:
        msg_id = self.kc.complete(code, len(code))
        reply = self.kc.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id
        return list(reply["content"]["matches"])


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, spark_remote: dict[str, str]) -> Iterator[Kernel]:
    from jupyter_client.manager import KernelManager

    home = tmp_path_factory.mktemp("kernel")
    km = KernelManager()
    km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "IPYTHONDIR": str(home / "ipython"), **spark_remote}
    km.start_kernel(cwd=str(home), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        k = Kernel(km, kc)
        setup = k.run(f"%load_ext lv_magic\n%config LvMagics.widgets = False\n%lv connect {home / 'wh'}")
        assert setup["status"] == "ok", setup
        made = k.run("%%lvsql\nCREATE TABLE t (id BIGINT, n INT, v DOUBLE, s STRING);\n"
                     "INSERT INTO t VALUES (1, 1, 1.5, 'a'), (2, 2, NULL, NULL), (3, 3, 2.5, 'c')")
        assert made["status"] == "ok", made
        yield k
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_out_is_pandas_with_nullable_dtypes(kernel: Kernel) -> None:
    got = kernel.run("%%lvsql --out sums\nSELECT sum(n) AS total, sum(CASE WHEN id > 5 THEN n END) AS none, "
                     "max(s) AS top FROM t")
    assert got["status"] == "ok", got
    assert kernel.value("type(sums).__module__ + '.' + type(sums).__name__") == "pandas.core.frame.DataFrame"
    assert kernel.value("{c: str(d) for c, d in sums.dtypes.items()}") == {"total": "Int64", "none": "Int64",
                                                                           "top": "string"}
    assert kernel.value("[int(sums.total[0]), bool(sums['none'].isna()[0]), sums.top[0]]") == [6, True, "c"]
    got = kernel.run("%%lvtxn --out rows\nUPDATE t SET v = v + 1 WHERE id = 1;\nSELECT * FROM t ORDER BY id")
    assert got["status"] == "ok", got
    assert kernel.value("[len(rows), str(rows.n.dtype), bool(rows.v.isna()[1]), float(rows.v[0])]") == \
        [3, "Int32", True, 2.5]
    got = kernel.run("%%lvsql --out lazy --spark\nSELECT * FROM t")
    assert got["status"] == "ok", got
    assert kernel.value("type(lazy).__module__") == "pyspark.sql.connect.dataframe"
    assert kernel.value("lazy.count()") == 3


def test_out_limit_cuts_and_says_so(kernel: Kernel) -> None:
    got = kernel.run("%config LvMagics.out_limit = 2")
    assert got["status"] == "ok", got
    try:
        got = kernel.run("%%lvsql --out two\nSELECT id FROM t ORDER BY id")
        assert got["status"] == "ok", got
        assert "--out two: the first 2 of 3 rows in pandas (LvMagics.out_limit)" in got["text"]
        assert kernel.value("list(map(int, two.id))") == [1, 2]
    finally:
        kernel.run("%config LvMagics.out_limit = 1000000")


def test_null_shows_as_null_and_integers_as_integers(kernel: Kernel) -> None:
    got = kernel.run("%%lvsql\nSELECT sum(n) AS total, sum(CASE WHEN id > 5 THEN n END) AS none FROM t")
    assert got["status"] == "ok", got
    assert "SELECT (t): 1 row: total = 6, none = NULL" in got["text"]
    assert "total = 6, none = NULL" in got["html"]
    got = kernel.run("%%lvsql\nSELECT id, n, v, s FROM t ORDER BY id")
    assert "<td>2</td><td>2</td><td>NULL</td><td>NULL</td>" in got["html"], got["html"]
    for bad in ("NaN", "<NA>", "None", "6.0", "2.0"):
        assert bad not in got["html"] and bad not in got["text"], (bad, got)


def test_chart_is_svg_and_bad_options_change_nothing(kernel: Kernel) -> None:
    got = kernel.run("%%lvsql --chart line --x id --y n,v\nSELECT * FROM t ORDER BY id")
    assert got["status"] == "ok", got
    assert "<div class='lv-chart'" in got["html"] and "<svg" in got["html"]
    assert "line chart of n, v by id (3 rows)" in got["text"]
    before = kernel.value("lh.version('t')")
    for line, message in [("--chart pie", "unknown chart 'pie'; choose one of: bar, line, scatter"),
                          ("--chart bar --y nn", "the chart's column 'nn' is not in the last SELECT's result; "
                                                 "did you mean 'n'?"),
                          ("--chart bar --y s", "the chart's y column 's' is string, not a number")]:
        got = kernel.run(f"%%lvtxn {line}\nUPDATE t SET n = n + 100;\nSELECT * FROM t")
        assert got["status"] == "error" and got["stderr"].startswith("UsageError: "), got
        assert message in got["stderr"] and "Traceback" not in got["stderr"] + got["text"], got
    assert kernel.value("lh.version('t')") == before  # the UPDATE never ran
    assert kernel.value("sorted(r.n for r in lh.read('t').collect())") == [1, 2, 3]


def test_lv_typo_says_did_you_mean(kernel: Kernel) -> None:
    got = kernel.run("%lv conect")
    assert got["status"] == "error" and "did you mean `%lv connect`?" in got["stderr"], got


def test_lv_completion(kernel: Kernel) -> None:
    assert sorted(kernel.complete("%lv co")) == ["commit", "connect"]
    assert {"serializable", "snapshot", "repeatable_read"} <= set(kernel.complete("%lv begin t9 "))
    assert "snapshot" in kernel.complete("%%lvtxn sn")
    got = kernel.run("%lv begin acct_move snapshot --quiet")
    assert got["status"] == "ok", got
    try:
        assert kernel.complete("%lv commit ") == ["acct_move"]
        assert kernel.complete("%lv rollback acc") == ["acct_move"]
        assert kernel.complete("%%lvtxn --name ") == ["acct_move"]
    finally:
        kernel.run("%lv rollback acct_move")
    assert "acct_move" not in kernel.complete("%lv commit ")
