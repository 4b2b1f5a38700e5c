"""Transaction control in SQL (pure): ``BEGIN [TRANSACTION|WORK] [ISOLATION LEVEL <preset>]``,
``START TRANSACTION ...``, ``COMMIT [TRANSACTION|WORK]``, ``ROLLBACK [TRANSACTION|WORK]`` and the
block ``BEGIN ATOMIC <statements> END``, parsed into :class:`TxnControl` statements (kind ``"txn"``).

They map to the same transactions as ``lh.begin()``/``commit()``/``rollback()`` (and the magics'
``%lv begin``/``commit``): ``lh.sql`` runs the statements after a BEGIN in that one transaction
until COMMIT or ROLLBACK (across calls); a ``BEGIN ATOMIC ... END`` block must end in the same
script and is rolled back as a whole when one of its statements fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from lv_core.engine.sql_ast import SqlError, Statement
from lv_core.presets import PRESETS

__all__ = ["TxnControl", "check_blocks", "control", "split_atomic", "preset_of"]

_BEGIN = re.compile(r"^\s*(?:BEGIN|START)(?:\s+(?P<atomic>ATOMIC)|(?:\s+(?:TRANSACTION|WORK))?"
                    r"(?:\s+ISOLATION\s+LEVEL\s+(?P<level>[A-Za-z_][A-Za-z_ ]*?))?)\s*$", re.I | re.S)
_END = re.compile(r"^\s*(?P<verb>COMMIT|ROLLBACK|ABORT|END)(?:\s+(?:TRANSACTION|WORK))?\s*$", re.I | re.S)
_ATOMIC_HEAD = re.compile(r"^\s*BEGIN\s+ATOMIC\b", re.I)


@dataclass(frozen=True)
class TxnControl:
    """``action``: "begin", "commit" or "rollback"; ``preset``: the isolation level of a BEGIN
    (None: the default); ``atomic``: BEGIN ATOMIC / its END."""

    action: str
    preset: Optional[str] = None
    atomic: bool = False


def preset_of(level: str, line: int) -> str:
    """An ``ISOLATION LEVEL`` as a preset name (``REPEATABLE READ`` -> ``repeatable_read``).

    Raises:
        SqlError: not a preset.
    """
    name = "_".join(level.lower().split())
    if name not in PRESETS:
        raise SqlError(f"line {line}: unknown isolation level {level.strip()!r}; choose one of: "
                       f"{', '.join(p.upper().replace('_', ' ') for p in PRESETS)}", line=line, text=level)
    return name


def control(text: str, line: int) -> Optional[Statement]:
    """The transaction-control statement ``text`` is, or None if it is none."""
    m = _BEGIN.match(text)
    if m is not None:
        level = m.group("level")
        spec = TxnControl("begin", preset_of(level, line) if level else None, atomic=bool(m.group("atomic")))
        return Statement("txn", text, None, spec, line=line)
    m = _END.match(text)
    if m is not None:
        verb = m.group("verb").upper()
        spec = TxnControl("rollback" if verb in ("ROLLBACK", "ABORT") else "commit", atomic=verb == "END")
        return Statement("txn", text, None, spec, line=line)
    return None


def split_atomic(text: str) -> Optional[tuple[str, str]]:
    """``BEGIN ATOMIC <first statement>`` (one ``;``-part) -> (``BEGIN ATOMIC``, the statement)."""
    m = _ATOMIC_HEAD.match(text)
    if m is None or not text[m.end():].strip():
        return None
    return text[:m.end()], text[m.end():]


def check_blocks(statements: Sequence[Statement]) -> None:
    """Every ``BEGIN ATOMIC`` has its ``END`` in the same script, blocks do not nest, and no
    ``END`` stands alone.

    Raises:
        SqlError: naming the line.
    """
    open_at: Optional[int] = None
    for st in statements:
        if st.kind != "txn":
            continue
        c: TxnControl = st.spec
        if c.action == "begin" and open_at is not None:
            raise SqlError(f"line {st.line}: BEGIN inside the BEGIN ATOMIC block of line {open_at}; blocks do not "
                           "nest", line=st.line)
        if c.action == "begin" and c.atomic:
            open_at = st.line
        elif c.atomic:  # END
            if open_at is None:
                raise SqlError(f"line {st.line}: END without BEGIN ATOMIC", line=st.line)
            open_at = None
        elif open_at is not None:
            raise SqlError(f"line {st.line}: {c.action.upper()} inside the BEGIN ATOMIC block of line {open_at}; "
                           "the block ends with END", line=st.line)
    if open_at is not None:
        raise SqlError(f"line {open_at}: BEGIN ATOMIC without END; add END after the block's last statement",
                       line=open_at)
