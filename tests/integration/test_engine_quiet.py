"""Spark tier: the engine keeps Spark's own output out of notebook cells, and warms itself.

The parallelism probe is one Spark 4 accepts and answers without a failing query; a failed query's
pyspark record (a JSON dump with the JVM stack trace) goes to the client log, not to stderr; the
background warm-up of a new server runs every step quietly and stops when cancelled. The last test
runs a real Jupyter kernel: a ``%%lvsql`` cell dividing by zero shows exactly the one-line error.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lv_core.engine import session as sess
from lv_core.engine import stream_io, warmup

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("at org.apache", "JVM", "Traceback", '"level"', "ERROR", "WARN", "Exception")


def log_size() -> int:
    path = sess.client_log_path()
    return os.path.getsize(path) if path and os.path.exists(path) else 0


def test_parallelism_probe_answers_quietly(spark: Any, capfd: Any) -> None:
    stream_io._parallelism.pop(spark, None)  # asked afresh
    before = log_size()
    got = stream_io.default_parallelism(spark)
    assert 1 <= got <= (os.cpu_count() or 1)  # the embedded server is local[*] on this machine
    assert stream_io.default_parallelism(spark) == got  # once per session
    # The partitions a range scan really has (the fallback query, one Spark 4 accepts): the same answer.
    assert spark.sql(stream_io._PROBE).collect()[0][0] == got
    out = capfd.readouterr()
    assert out.out + out.err == ""
    assert log_size() == before  # no failed query on the way


def test_failed_query_record_goes_to_the_client_log(spark: Any, capfd: Any) -> None:
    from pyspark.errors import ArithmeticException

    with pytest.raises(ArithmeticException, match="DIVIDE_BY_ZERO"):
        spark.sql("SELECT 1/0").collect()
    out = capfd.readouterr()
    assert out.out + out.err == ""
    path = sess.client_log_path()
    assert path is not None and path.startswith(sess.local_server().work_dir)  # type: ignore[union-attr]
    text = Path(path).read_text()
    assert "DIVIDE_BY_ZERO" in text and "at org.apache.spark" in text  # kept for debugging


def test_warmup_runs_every_step_quietly(spark: Any, tmp_path: Path, capfd: Any) -> None:
    w = warmup.start(spark, str(tmp_path))
    assert w.done.wait(300)
    assert w.failed == {} and set(w.steps) == {"parallelism", "write", "rewrite", "read", "arrow"}
    assert not (tmp_path / "warmup").exists()  # its scratch files are gone
    out = capfd.readouterr()
    assert out.out + out.err == ""


def test_warmup_cancel_stops_it(spark: Any, tmp_path: Path) -> None:
    w = warmup.Warmup(spark, str(tmp_path / "warmup"))
    w.stopped.set()  # cancelled before it began: no step runs
    w.thread.start()
    w.cancel()
    assert w.done.is_set() and w.steps == {} and not w.thread.is_alive()
    w = warmup.start(spark, str(tmp_path))
    t0 = time.monotonic()
    w.cancel(timeout_s=60)
    assert not w.thread.is_alive() and time.monotonic() - t0 < 60
    assert len(w.steps) + len(w.failed) < 5  # it stopped before its end
    assert spark.sql("SELECT 1").collect()[0][0] == 1  # the session is fine afterwards


def _run(kc: Any, code: str) -> list[dict[str, Any]]:
    """Execute ``code``; the cell's outputs (stream, display, error) as the notebook would store them."""
    outputs: list[dict[str, Any]] = []
    reply = kc.execute_interactive(code, timeout=600, output_hook=lambda m: outputs.append(
        {"type": m["msg_type"], **m["content"]}) if m["msg_type"] in ("stream", "display_data", "execute_result",
                                                                       "error") else None)
    assert reply["content"]["status"] in ("ok", "error")
    return outputs


@pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"), reason="no Java")
def test_divide_by_zero_cell_shows_one_line_in_a_real_kernel(tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        assert _run(kc, f"import sys; assert sys.executable == {sys.executable!r}") == []
        _run(kc, "%load_ext lv_magic\n%config LvMagics.widgets = False")
        connect = _run(kc, f"%lv connect {tmp_path / 'wh'}")
        assert all(o["type"] == "stream" and o["name"] == "stdout" for o in connect), connect
        created = _run(kc, "%%lvsql\nCREATE TABLE t (id BIGINT);\nINSERT INTO t VALUES (1)")
        assert not [o for o in created if o["type"] == "error" or o.get("name") == "stderr"], created
        outs = _run(kc, "%%lvsql\nSELECT 1/0")
        assert len(outs) == 1, outs
        (only,) = outs
        text = only.get("text", "") + only.get("evalue", "")
        assert "DIVIDE_BY_ZERO" in text and text.strip().count("\n") == 0, outs
        assert not any(n in text for n in NOISE if n != "Exception"), outs
        # The connect warmed the new engine in the background, every step, quietly (the cells above show it).
        warm = _run(kc, "from lv_core.engine import session as s; w = s._warmup; w.done.wait(300); "
                        "print(sorted(w.steps), w.failed)")
        assert warm[0]["text"].strip() == "['arrow', 'parallelism', 'read', 'rewrite', 'write'] {}", warm
        # The record is kept where the engine's logs are.
        where = _run(kc, "from lv_core.engine.session import client_log_path; print(open(client_log_path()).read())")
        assert "DIVIDE_BY_ZERO" in where[0]["text"] and "at org.apache.spark" in where[0]["text"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
