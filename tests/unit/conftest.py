"""Fixtures shared by the unit tests (the widget tests' recording comm)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest


class RecordingComm:
    """Stands in for a kernel comm: records every message a widget sends."""

    kernel = "a kernel"
    log: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def __init__(self, **kwargs: Any) -> None:
        self.comm_id = kwargs.get("comm_id") or uuid.uuid4().hex
        self.target_name = kwargs.get("target_name")

    def open(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_msg(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass

    def send(self, data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
        with self.lock:
            self.log.append((self.comm_id, data))


@pytest.fixture
def comms(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every message widgets send during the test, as (comm id, data), via :class:`RecordingComm`."""
    import ipywidgets.comm

    RecordingComm.log = []
    monkeypatch.setattr(ipywidgets.comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return RecordingComm.log
