"""User Spark settings: ``connect(spark_conf={...})`` and ``%lv connect --conf key=value``.

* :func:`normalize` checks the settings without Spark (keys ``spark.*``, one-line scalar values) and
  returns them as strings; it runs in :func:`lv_core.connect`, so a malformed setting fails at once.
* The embedded server gets them at start (``spark-submit --conf``). A server already running in this
  process keeps its start settings; :func:`apply_runtime` then sets what Spark allows at runtime and
  refuses a static setting that differs, naming the key.
* A remote ``sc://`` session (or a given SparkSession): :func:`apply_runtime` sets each setting with
  ``spark.conf.set``. A setting Spark refuses (static, or a bad value) raises ConfigError naming the
  key, after the settings already made are put back: all or nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lv_core.errors import ConfigError

__all__ = ["apply_runtime", "normalize", "parse_pairs"]

_KEY_RE = re.compile(r"^spark\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_STATIC_HINTS = ("CANNOT_MODIFY_CONFIG", "CANNOT_MODIFY_STATIC_CONFIG", "static config", "Cannot modify the value")


def normalize(conf: Mapping[str, Any] | None) -> dict[str, str]:
    """``conf`` as ``{key: str}``; ConfigError for anything Spark could not take as a setting.

    Keys: ``spark.`` followed by dot-separated names (Spark ignores other keys given with ``--conf``).
    Values: str, int, float or bool (``true``/``false``); no line breaks.
    """
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise ConfigError(f"spark_conf must be a mapping {{'spark.key': value}}, not {type(conf).__name__}")
    out: dict[str, str] = {}
    for key, value in conf.items():
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ConfigError(f"spark_conf: {key!r} is not a Spark setting name (expected 'spark.something', "
                              "e.g. 'spark.driver.memory')")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            text = str(value)
        else:
            raise ConfigError(f"spark_conf: the value of {key} must be a string, number or bool, "
                              f"not {type(value).__name__}")
        if "\n" in text or "\r" in text or "\x00" in text:
            raise ConfigError(f"spark_conf: the value of {key} must be one line")
        if not text.strip():
            raise ConfigError(f"spark_conf: the value of {key} is empty")
        out[key] = text
    return out


def parse_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` (``--conf`` options; a later key wins) as a checked mapping."""
    raw: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf needs key=value (e.g. spark.driver.memory=4g), not {pair!r}")
        raw[key.strip()] = value.strip()
    return normalize(raw)


def _current(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # pyspark raises several types for an unknown or unreadable key
        return None
    return None if value is None else str(value)


def apply_runtime(spark: Any, conf: Mapping[str, str], *, where: str) -> None:
    """Set ``conf`` on a running session: settings already in effect are skipped; all or nothing.

    Raises:
        ConfigError: Spark refused a setting (static: fixed when the server started; or a bad value);
            the message names the key and ``where`` (which server), and no setting was changed.
    """
    done: list[tuple[str, str | None]] = []
    for key, value in conf.items():
        before = _current(spark, key)
        if before == value:
            continue
        try:
            spark.conf.set(key, value)
        except Exception as e:  # AnalysisException, IllegalArgumentException, SparkConnectGrpcException...
            _restore(spark, done)
            raise ConfigError(_refusal(key, value, before, str(e), where)) from None
        done.append((key, before))


def _restore(spark: Any, done: list[tuple[str, str | None]]) -> None:
    for key, before in reversed(done):
        try:
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
        except Exception:  # best effort: it was settable a moment ago  # noqa: S110
            pass


def _refusal(key: str, value: str, before: str | None, reason: str, where: str) -> str:
    first = reason.strip().splitlines()[0] if reason.strip() else "refused"
    if any(h.lower() in reason.lower() for h in _STATIC_HINTS):
        now = f" (it runs with {before})" if before is not None else ""
        return (f"spark_conf: {key} is a static Spark setting: it can only be set when the server starts, and "
                f"{where} is already running{now}. {_static_fix(where)} No setting was changed.")
    return f"spark_conf: Spark refused {key}={value} on {where}: {first[:300]}. No setting was changed."


def _static_fix(where: str) -> str:
    if where.startswith("the embedded"):
        return ("Stop it first (lv_core.engine.session.stop_spark(), or restart the kernel): the next data "
                "access starts it with your settings.")
    return "Set it in the server's configuration (spark-defaults.conf or start-connect-server.sh --conf)."
