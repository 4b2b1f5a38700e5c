"""Notebook variables in SQL text (pure): ``{name}`` and ``:name`` (jupysql's conventions) become SQL
literals of the value's type; the value is never pasted in as SQL text.

Only code is rewritten: ``{name}`` or ``:name`` inside a quoted literal, a quoted identifier or a
comment stays as written, and so do ``::`` casts. ``{{`` and ``}}`` stand for literal braces.
Values: None -> NULL, bool -> TRUE/FALSE, int, float (-> DOUBLE, also NaN/Infinity), Decimal
(-> DECIMAL(p, s)), str (a quoted literal; quotes and backslashes escaped), bytes (X'..'),
datetime.date -> DATE '...', datetime.datetime -> TIMESTAMP '...' (with its UTC offset if aware).
"""

from __future__ import annotations

import datetime as dt
import decimal
import numbers
import re
from collections.abc import Mapping
from typing import Any

from lv_core.engine.sql_ast import SqlError
from lv_core.engine.sql_hints import did_you_mean
from lv_core.engine.sqlsplit import runs

__all__ = ["bind_params", "literal"]

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}|(?<![:\w]):([A-Za-z_]\w*)")


def literal(value: Any, name: str = "value") -> str:
    """``value`` as a Spark SQL literal.

    Raises:
        SqlError: a type with no SQL literal (lists, dicts, objects), or a Decimal beyond 38 digits.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "TRUE" if value else "FALSE"
    if isinstance(value, decimal.Decimal):
        return _decimal(value, name)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (bytes, bytearray)):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise SqlError(f"variable {name!r} is a {type(value).__name__}: it has no SQL literal (use None, bool, int, "
                   "float, Decimal, str, bytes, date or datetime)", text=name)


def _decimal(value: decimal.Decimal, name: str) -> str:
    if not value.is_finite():
        raise SqlError(f"variable {name!r} is Decimal({str(value)!r}): DECIMAL has no such value", text=name)
    sign, digits, exp = value.as_tuple()
    assert isinstance(exp, int)
    scale = max(0, -exp)
    precision = max(len(digits) + max(0, exp), scale, 1)
    if precision > 38:
        raise SqlError(f"variable {name!r} has {precision} digits; Spark's DECIMAL holds at most 38", text=name)
    return f"CAST('{value:f}' AS DECIMAL({precision}, {scale}))"


def _bindable(value: Any) -> bool:
    return value is None or isinstance(value, (bool, numbers.Number, str, bytes, bytearray, dt.date))


def bind_params(text: str, values: Mapping[str, Any]) -> str:
    """``text`` with every ``{name}``/``:name`` in code replaced by the literal of ``values[name]``.

    Raises:
        SqlError: an undefined name (naming its line, with close names), or a value with no literal.
    """
    out: list[str] = []
    for r in runs(text):
        chunk = text[r.start:r.end]
        if r.kind != "code":
            out.append(chunk)
            continue

        def sub(m: re.Match[str], start: int = r.start) -> str:
            if m.group(0) == "{{":
                return "{"
            if m.group(0) == "}}":
                return "}"
            name = m.group(1) or m.group(2)
            if name not in values:
                line = text.count("\n", 0, start + m.start()) + 1
                public = [k for k, v in values.items() if not k.startswith("_") and _bindable(v)]
                raise SqlError(f"line {line}: variable {name!r} is not defined{did_you_mean(name, public)}",
                               line=line, text=m.group(0))
            return literal(values[name], name)

        out.append(_TOKEN.sub(sub, chunk))
    return "".join(out)
