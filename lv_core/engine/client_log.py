"""pyspark's client log records (a failed query's JSON record with its JVM stack trace) go to a file,
never to the kernel's stderr, where they would land in a notebook cell before the one-line error."""

from __future__ import annotations

import logging
import os
import tempfile

#: pyspark's client-side loggers that print to stderr: a JSON record with the JVM stack trace of every
#: failed query (``pyspark.errors`` logs it when the exception is made), and Spark Connect's debug log.
_CLIENT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger", "pyspark.sql.connect.logging")


class _ClientLogFile(logging.FileHandler):
    """The client log; a write that fails (its folder removed) is dropped, never reported on stderr."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


_client_log: _ClientLogFile | None = None
_client_dir: str | None = None  # the per-process folder of the client log when no embedded server runs


def route_client_logs(path: str | None = None) -> str:
    """Send pyspark's client log records to a file (``path``, else the current one), not to stderr."""
    global _client_log, _client_dir
    from pyspark.logger import PySparkLogger

    if path is None:
        if _client_log is not None:
            path = _client_log.baseFilename
        else:
            if _client_dir is None:
                _client_dir = tempfile.mkdtemp(prefix="lakevilla-client-")
            path = os.path.join(_client_dir, "client.log")
    old = _client_log
    new = old if old is not None and old.baseFilename == os.path.abspath(path) else \
        _ClientLogFile(path, delay=True, encoding="utf-8")
    _client_log = new
    for name in _CLIENT_LOGGERS:
        logger = PySparkLogger.getLogger(name)  # creates it as pyspark does (with its stderr handler)
        logger.propagate = False
        for h in list(logger.handlers):
            if h is old or (isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)):
                logger.removeHandler(h)
        if new not in logger.handlers:
            logger.addHandler(new)  # PySparkLogger gives it its JSON format
    if old is not None and old is not new:
        old.close()
    return new.baseFilename


def client_log_path() -> str | None:
    """The file pyspark's client log records (failed queries with their JVM stack traces) go to, or None
    before the first session."""
    return _client_log.baseFilename if _client_log is not None else None


__all__ = ["client_log_path", "route_client_logs"]
