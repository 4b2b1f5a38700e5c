"""Split a SQL script into statements on ``;`` outside quotes and comments (pure)."""

from __future__ import annotations


def quoted_end(text: str, i: int) -> int | None:
    """Index of the quote closing the quoted run that starts at ``text[i]`` ('...', "...", `...`),
    honouring backslash escapes (not in backticks) and doubled quotes; None when it is unterminated."""
    c, j, n = text[i], i + 1, len(text)
    while j < n:
        if text[j] == "\\" and c != "`":
            j += 2
            continue
        if text[j] == c:
            if j + 1 < n and text[j + 1] == c:  # doubled quote
                j += 2
                continue
            return j
        j += 1
    return None


def split_statements(script: str) -> list[str]:
    """Statements of ``script`` in order, stripped, empty ones dropped.

    ``;`` inside '...', "...", `...`, -- line comments and /* block comments */ does not split.
    """
    out: list[str] = []
    buf: list[str] = []
    i, n = 0, len(script)
    while i < n:
        c = script[i]
        if c in ("'", '"', "`"):
            end = quoted_end(script, i)
            j = n if end is None else end
            buf.append(script[i:j + 1])
            i = j + 1
        elif script.startswith("--", i):
            j = script.find("\n", i)
            j = n if j < 0 else j
            buf.append(script[i:j])
            i = j
        elif script.startswith("/*", i):
            j = script.find("*/", i + 2)
            j = n if j < 0 else j + 2
            buf.append(script[i:j])
            i = j
        elif c == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(c)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if _has_code(s)]


def _has_code(stmt: str) -> bool:
    """True if the text holds more than whitespace and comments."""
    s = stmt.strip()
    while s:
        if s.startswith("--"):
            nl = s.find("\n")
            s = "" if nl < 0 else s[nl + 1:].strip()
        elif s.startswith("/*"):
            end = s.find("*/")
            s = "" if end < 0 else s[end + 2:].strip()
        else:
            return True
    return False
