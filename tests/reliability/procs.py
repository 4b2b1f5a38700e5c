"""Spawning client processes for the reliability tests (PYTHONPATH at the repository root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parents[2]


def spawn(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=e, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_all(procs: Iterable[subprocess.Popen], timeout_s: float) -> list[tuple[int, str, str]]:
    """Wait for every process (killing the ones still running at the deadline); (rc, out, err) each."""
    deadline = time.monotonic() + timeout_s
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e = f"{e}\n[killed at the deadline]"
        out.append((p.returncode, o, e))
    return out


def wait_paused(p: subprocess.Popen, point: str, timeout_s: float = 60.0) -> None:
    """Read the client's stdout until it reports ``LV-PAUSED <point>`` (or fail with its stderr)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        if not sel.select(timeout=0.5):
            if p.poll() is not None:
                break
            continue
        line = p.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        seen.append(line)
        if line.strip() == f"LV-PAUSED {point}":
            return
    p.kill()
    _, err = p.communicate()
    raise AssertionError(f"client did not pause at {point}: stdout {''.join(seen)!r}, stderr {err[-3000:]}")
