"""The black-box history model: what each transaction read and appended, and how it ended.

Only client observations go in: the lists read, the unique elements appended, the outcome. No
version number, commit id or other system-reported state is recorded, so the checker cannot be
fooled by the system under test describing itself wrongly (Elle's premise).

On disk a history is JSON lines, one transaction per line; every client process may write its own
file and :func:`load_history` merges them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from lv_core.errors import LvError

__all__ = ["HistoryError", "MicroOp", "OpKind", "Outcome", "Txn", "dump_history", "load_history"]

PathLike = str | os.PathLike[str]


class HistoryError(LvError):
    """A malformed history (bad JSON, wrong field types, non-unique ids or appended elements)."""


class OpKind(str, Enum):
    """A micro-operation's kind; the values are Elle's spellings, used in the JSON form."""

    READ = "r"
    APPEND = "append"


class Outcome(str, Enum):
    """How a transaction ended, as far as its client knows."""

    OK = "ok"  # committed
    FAIL = "fail"  # certainly did not commit (aborted, rolled back)
    INFO = "info"  # unknown: crash, lost response, timeout after the commit was sent


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class MicroOp:
    """One read or append of a key (``"table/row"``).

    ``value`` is the appended element (an int unique per key) for APPEND; for READ the list
    observed, or None when the read never ran (so it proves nothing).
    """

    kind: OpKind
    key: str
    value: int | tuple[int, ...] | None

    def __post_init__(self) -> None:
        kind = OpKind(self.kind)
        object.__setattr__(self, "kind", kind)
        if not isinstance(self.key, str) or not self.key:
            raise HistoryError(f"a micro-op needs a non-empty string key, not {self.key!r}")
        if kind is OpKind.APPEND:
            if not _is_int(self.value):
                raise HistoryError(f"append to {self.key} needs an int element, not {self.value!r}")
        elif self.value is not None:
            if not isinstance(self.value, (list, tuple)) or not all(_is_int(x) for x in self.value):
                raise HistoryError(f"read of {self.key} needs a list of ints or None, not {self.value!r}")
            object.__setattr__(self, "value", tuple(self.value))

    @classmethod
    def read(cls, key: str, value: Iterable[int] | None) -> MicroOp:
        """A read of ``key`` that observed ``value`` (None: the read did not run)."""
        return cls(OpKind.READ, key, None if value is None else tuple(value))

    @classmethod
    def append(cls, key: str, element: int) -> MicroOp:
        """An append of the unique ``element`` to ``key``."""
        return cls(OpKind.APPEND, key, element)

    @property
    def appended(self) -> int:
        """The appended element (APPEND only); typed, so callers need no cast."""
        if self.kind is not OpKind.APPEND or not isinstance(self.value, int):
            raise HistoryError(f"{self} is not an append")
        return self.value

    @property
    def observed(self) -> tuple[int, ...] | None:
        """The list read (READ only), or None when the read did not run."""
        if self.kind is not OpKind.READ:
            raise HistoryError(f"{self} is not a read")
        return self.value if isinstance(self.value, tuple) else None

    def to_obj(self) -> list[Any]:
        """Elle's compact form: ``["append", key, 5]`` or ``["r", key, [1, 2]]``."""
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return [self.kind.value, self.key, value]

    @classmethod
    def from_obj(cls, obj: Any) -> MicroOp:
        if not isinstance(obj, (list, tuple)) or len(obj) != 3:
            raise HistoryError(f"a micro-op is [kind, key, value], not {obj!r}")
        try:
            kind = OpKind(obj[0])
        except ValueError:
            raise HistoryError(f"unknown micro-op kind {obj[0]!r}") from None
        return cls(kind, obj[1], obj[2])

    def __str__(self) -> str:
        if self.kind is OpKind.APPEND:
            return f"append({self.key}, {self.value})"
        shown = fmt_list(self.value) if isinstance(self.value, tuple) else "?"
        return f"r({self.key}) -> {shown}"


def fmt_list(values: tuple[int, ...], limit: int = 8) -> str:
    """A list for humans; long lists keep their head and tail (the tail is what edges are about)."""
    if len(values) <= limit:
        return "[" + ", ".join(map(str, values)) + "]"
    head, tail = values[:2], values[-(limit - 3):]
    return f"[{', '.join(map(str, head))}, ... {', '.join(map(str, tail))}] ({len(values)} elements)"


@dataclass(frozen=True)
class Txn:
    """One transaction as its client saw it. ``error`` keeps the abort rule/message for reports."""

    id: str
    process: int
    ops: tuple[MicroOp, ...]
    outcome: Outcome
    preset: str = ""
    start: float = 0.0
    end: float = 0.0
    error: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise HistoryError(f"a transaction needs a non-empty string id, not {self.id!r}")
        if not _is_int(self.process):
            raise HistoryError(f"txn {self.id}: process must be an int, not {self.process!r}")
        object.__setattr__(self, "ops", tuple(self.ops))
        if not all(isinstance(op, MicroOp) for op in self.ops):
            raise HistoryError(f"txn {self.id}: ops must be MicroOp instances")
        try:
            object.__setattr__(self, "outcome", Outcome(self.outcome))
        except ValueError:
            raise HistoryError(f"txn {self.id}: unknown outcome {self.outcome!r}") from None

    def to_obj(self) -> dict[str, Any]:
        return {"id": self.id, "process": self.process, "ops": [op.to_obj() for op in self.ops],
                "outcome": self.outcome.value, "preset": self.preset, "start": self.start, "end": self.end,
                "error": self.error}

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(self.to_obj(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> Txn:
        """Parse a JSON line (or an already decoded object); raises HistoryError when malformed."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise HistoryError(f"not JSON: {e}") from None
        if not isinstance(data, Mapping):
            raise HistoryError(f"a transaction is a JSON object, not {type(data).__name__}")
        try:
            ops = data["ops"]
            if not isinstance(ops, list):
                raise HistoryError("ops must be a list")
            return cls(id=data["id"], process=data["process"], ops=tuple(MicroOp.from_obj(o) for o in ops),
                       outcome=data["outcome"], preset=str(data.get("preset", "")),
                       start=float(data.get("start", 0.0)), end=float(data.get("end", 0.0)),
                       error=str(data.get("error", "")))
        except KeyError as e:
            raise HistoryError(f"missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise HistoryError(f"bad field: {e}") from None

    def describe(self) -> str:
        """``T1 (process 0, ok): append(k, 1); r(k) -> [1]`` for reports."""
        why = f", {self.error}" if self.error else ""
        preset = f", {self.preset}" if self.preset else ""
        ops = "; ".join(map(str, self.ops)) or "(no ops)"
        return f"{self.id} (process {self.process}, {self.outcome.value}{preset}{why}): {ops}"


def dump_history(path: PathLike, txns: Iterable[Txn], *, append: bool = False) -> None:
    """Write ``txns`` as JSON lines (``append=True`` adds to an existing per-process file)."""
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for t in txns:
            f.write(t.to_json() + "\n")


def load_history(paths: PathLike | Iterable[PathLike]) -> list[Txn]:
    """Read and merge JSON-lines files (one per process), ordered by start time, then file order.

    Ids must be unique across all files: the checker names transactions by id.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    txns: list[Txn] = []
    seen: dict[str, str] = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    t = Txn.from_json(line)
                except HistoryError as e:
                    raise HistoryError(f"{Path(p)}:{n}: {e}") from None
                if t.id in seen:
                    raise HistoryError(f"{Path(p)}:{n}: txn id {t.id!r} already in {seen[t.id]}")
                seen[t.id] = str(p)
                txns.append(t)
    txns.sort(key=lambda t: t.start)  # stable: equal starts keep file order
    return txns
