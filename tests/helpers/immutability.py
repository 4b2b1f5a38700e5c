"""A log-immutability checker (issue 18): once a ``_delta_log`` file exists, its bytes never change.

:class:`LogWatcher` records the bytes (a SHA-256) of every ``_delta_log`` file under a warehouse the
first time it sees it and reports a violation when a file it saw later holds other bytes or is gone.
It polls from a background thread while a test runs (other processes write too: the randomized
checker, SIGKILL crash workers), and once more at the end. ``_last_checkpoint`` is excluded: the Delta
protocol defines it as a hint that writers replace. Files whose name starts with ``.`` are temporary
files of the local store (written, then linked to their final name) and excluded too.

Polling can miss a rewrite only if a file is rewritten and rewritten back to the same bytes between
two polls; every rewrite LakeVilla ever did (a marker overwritten by a commit or a free) leaves
different bytes behind, which the next poll sees. A file that only grew (its earlier bytes are a
prefix of the new ones) was seen while a non-atomic copy was writing it (test set-up copying a
template warehouse), not rewritten: it is not reported.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lv_core.errors import NotFound
from lv_core.storage.base import ObjectStore

LOG_DIR = "_delta_log"
EXCLUDED = ("_last_checkpoint",)


def _watched(name: str) -> bool:
    return not name.startswith(".") and name not in EXCLUDED


@dataclass
class LogWatcher:
    """Watch every ``_delta_log`` file under ``root`` (a local warehouse folder) or in ``store``."""

    root: Path | None = None
    store: ObjectStore | None = None
    interval_s: float = 0.02
    seen: dict[str, tuple[object, str, int]] = field(default_factory=dict)  # key -> (fingerprint, sha256, size)
    violations: list[str] = field(default_factory=list)
    polls: int = 0

    def __post_init__(self) -> None:
        if (self.root is None) == (self.store is None):
            raise ValueError("give exactly one of root= or store=")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ listing and reading
    def _list(self) -> dict[str, object]:
        """key -> a cheap fingerprint that changes whenever the file is replaced."""
        out: dict[str, object] = {}
        if self.store is not None:
            for meta in self.store.list(""):
                parts = meta.key.split("/")
                if len(parts) >= 2 and parts[-2] == LOG_DIR and _watched(parts[-1]):
                    out[meta.key] = (meta.size, meta.etag)
            return out
        assert self.root is not None
        for dirpath, dirnames, filenames in os.walk(self.root):
            if os.path.basename(dirpath) != LOG_DIR:
                continue
            dirnames[:] = []  # sidecars and other folders inside the log: not commit files
            for name in filenames:
                if not _watched(name):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                out[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return out

    def _read(self, key: str) -> bytes | None:
        try:
            if self.store is not None:
                return self.store.get(key).data
            with open(key, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotFound):
            return None

    # ------------------------------------------------------------------ checking
    def observe(self) -> None:
        """One pass: record new files, compare changed ones, notice vanished ones."""
        listing = self._list()
        with self._lock:
            self.polls += 1
            for key, fp in listing.items():
                known = self.seen.get(key)
                if known is not None and known[0] == fp:
                    continue
                data = self._read(key)
                if data is None:
                    continue  # vanished between list and read: the next pass reports it
                digest = hashlib.sha256(data).hexdigest()
                grown = known is not None and len(data) > known[2] and (
                    hashlib.sha256(data[:known[2]]).hexdigest() == known[1])
                if known is not None and known[1] != digest and not grown:
                    self.violations.append(f"changed: {self._name(key)}")
                self.seen[key] = (fp, digest, len(data))
            for key in [k for k in self.seen if k not in listing]:
                self.violations.append(f"disappeared: {self._name(key)}")
                del self.seen[key]

    def _name(self, key: str) -> str:
        if self.root is not None:
            return os.path.relpath(key, self.root)
        return key

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.observe()
            except OSError:
                continue  # a folder removed while walking (test teardown): the final pass decides

    def start(self) -> "LogWatcher":
        self.observe()
        self._thread = threading.Thread(target=self._run, name="lv-log-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and make the final pass."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.observe()

    def __enter__(self) -> "LogWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> str:
        return (f"{len(self.seen)} _delta_log file(s) watched over {self.polls} poll(s), "
                f"{len(self.violations)} changed or disappeared")
