"""Module #2: transaction sublogs, one object per operation under ``_lakevilla/txns/<txn>/sublog/``.

An entry records what the operation did physically (files read, added, removed: the compensation of
an add is its removal, of a remove its re-addition) and, once the transaction has switched to
logical sublogs for a table, the logical description needed to re-execute it (e.g. the SQL text).
Undo walks entries newest to oldest applying compensations; redo walks oldest to newest
re-executing. The owner keeps the executable form in memory; the stored entries let a recoverer
find every file a crashed transaction staged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from lv_core.errors import LvError, NotFound
from lv_core.protocol.layout import sublog_key, sublog_prefix
from lv_core.storage.base import OVERWRITE, ObjectStore


@dataclass(frozen=True)
class SublogEntry:
    step: int
    op: str
    mode: str  # "physical" | "logical"
    tables: tuple[str, ...]
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    adds: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # compensation: remove
    removes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # compensation: add back
    logical: Mapping[str, Any] | None = None
    blind: bool = False
    exposed: bool = False
    attempt: int = 0  # 0 = first execution, n = n-th redo
    #: the owner is alive at least until then (epoch seconds) unless its lease object says otherwise
    #: (a transaction writes its lease object only once it lives long enough to renew it)
    lease_expires: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "leaseExpires": self.lease_expires,
            "step": self.step,
            "op": self.op,
            "mode": self.mode,
            "tables": list(self.tables),
            "reads": {t: list(v) for t, v in self.reads.items()},
            "adds": {t: list(v) for t, v in self.adds.items()},
            "removes": {t: list(v) for t, v in self.removes.items()},
            "logical": dict(self.logical) if self.logical is not None else None,
            "blind": self.blind,
            "exposed": self.exposed,
            "attempt": self.attempt,
            "compensation": {
                "remove": {t: list(v) for t, v in self.adds.items()},
                "add": {t: list(v) for t, v in self.removes.items()},
            },
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SublogEntry":
        return cls(
            step=int(d["step"]),
            op=str(d.get("op", "")),
            mode=str(d.get("mode", "physical")),
            tables=tuple(d.get("tables") or ()),
            reads={t: tuple(v) for t, v in (d.get("reads") or {}).items()},
            adds={t: tuple(v) for t, v in (d.get("adds") or {}).items()},
            removes={t: tuple(v) for t, v in (d.get("removes") or {}).items()},
            logical=d.get("logical"),
            blind=bool(d.get("blind", False)),
            exposed=bool(d.get("exposed", False)),
            attempt=int(d.get("attempt", 0)),
            lease_expires=_seconds(d.get("leaseExpires")),
        )


def _seconds(value: Any) -> float:
    """A time in epoch seconds; anything else (missing, text, NaN, a bool) reads as 0 (long ago)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0.0
    return float(value)


def write_entry(store: ObjectStore, txn: str, entry: SublogEntry) -> None:
    """Persist one entry (a redo rewrites the entry of its step)."""
    store.put(sublog_key(txn, entry.step), json.dumps(entry.to_json()).encode(), mode=OVERWRITE)


def read_sublog(store: ObjectStore, txn: str) -> list[SublogEntry]:
    """All entries of a transaction, oldest first (unreadable entries are skipped)."""
    out: list[SublogEntry] = []
    for meta in store.list(sublog_prefix(txn)):
        try:
            out.append(SublogEntry.from_json(json.loads(store.get(meta.key).data)))
        except (NotFound, ValueError, KeyError, TypeError, AttributeError, LvError):
            continue
    return sorted(out, key=lambda e: e.step)
