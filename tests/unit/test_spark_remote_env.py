"""``SPARK_REMOTE`` (pyspark's setting naming a Spark Connect server) picks the engine of ``spark=None``;
no JVM runs here: a server that does not answer shows which path was taken. A real server named by
it is in the Spark tier (``test_spark_session``)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from lv_core.engine.session import env_remote, get_spark
from lv_core.errors import EngineError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_named_by_spark_remote_is_reached_instead_of_starting_one(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    monkeypatch.setenv("SPARK_REMOTE", f"sc://127.0.0.1:{port}/;token=s3cret")
    with pytest.raises(EngineError, match=f"No Spark Connect server answers at 127.0.0.1:{port}") as e:
        get_spark()
    assert "s3cret" not in str(e.value)


@pytest.mark.parametrize("value", ["", "local", "local[*]", "  "])
def test_other_values_leave_the_embedded_server(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SPARK_REMOTE", value)
    assert env_remote() is None


def test_connect_names_the_server_of_spark_remote_without_its_token(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: Any) -> None:
    from lv_magic.cmd.admin import start_engine

    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example:15002/;token=s3cret")

    class Lakehouse:
        spark = object()

    start_engine(Lakehouse(), None)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "connecting to Spark at sc://spark.example:15002 ..."
    assert "s3cret" not in out
