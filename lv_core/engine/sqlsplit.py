"""The one SQL lexer of the front end (pure): quotes, comments and ``;`` separators.

:func:`runs` cuts a text into quoted runs ('...', "...", `...`), ``--`` line comments,
``/* block comments */``, ``;`` and the code between them. Splitting a script into statements,
skipping leading comments and finding an unterminated quote or comment all read these runs, so
they agree on where quotes and comments start and end. sqlglot tokenizes each statement itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["Run", "first_unterminated", "has_code", "quoted_end", "runs", "skip_comments", "split_statements"]


class Run(NamedTuple):
    """``text[start:end]`` is one ``kind`` of run: ``"code"``, ``"quoted"``, ``"line_comment"``,
    ``"block_comment"`` or ``";"``. ``closed`` is False for a quote or block comment that is still
    open at the end of the text (its run then ends there)."""

    kind: str
    start: int
    end: int
    closed: bool = True


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


def runs(text: str) -> Iterator[Run]:
    """The runs of ``text`` in order; together they cover it exactly."""
    i, n, code = 0, len(text), 0
    while i < n:
        c = text[i]
        if c in ("'", '"', "`"):
            end = quoted_end(text, i)
            run = Run("quoted", i, n, False) if end is None else Run("quoted", i, end + 1)
        elif text.startswith("--", i):
            nl = text.find("\n", i)
            run = Run("line_comment", i, n if nl < 0 else nl)
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            run = Run("block_comment", i, n, False) if end < 0 else Run("block_comment", i, end + 2)
        elif c == ";":
            run = Run(";", i, i + 1)
        else:
            i += 1
            continue
        if code < i:
            yield Run("code", code, i)
        yield run
        i = code = run.end
    if code < n:
        yield Run("code", code, n)


def _is_blank(text: str, run: Run) -> bool:
    return run.kind in ("line_comment", "block_comment") or (run.kind == "code" and not text[run.start:run.end].strip())


def has_code(text: str) -> bool:
    """True if the text holds more than whitespace and comments."""
    return not all(_is_blank(text, r) for r in runs(text))


def skip_comments(text: str) -> str:
    """``text`` from its first character that is neither whitespace nor part of a comment."""
    for r in runs(text):
        if not _is_blank(text, r):
            return text[r.start:].lstrip() if r.kind == "code" else text[r.start:]
    return ""


def first_unterminated(text: str) -> int | None:
    """Offset of the first unterminated quote or block comment in ``text`` (None if all are closed)."""
    return next((r.start for r in runs(text) if not r.closed), None)


def split_statements(script: str) -> list[str]:
    """Statements of ``script`` in order, stripped, empty ones (whitespace and comments) dropped.

    ``;`` inside '...', "...", `...`, -- line comments and /* block comments */ does not split.
    """
    out: list[str] = []
    start = 0
    for r in runs(script):
        if r.kind == ";":
            out.append(script[start:r.start])
            start = r.end
    out.append(script[start:])
    return [s.strip() for s in out if has_code(s)]
