"""What a commit returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CommitResult:
    """Outcome of a successful commit.

    Attributes:
        txn: transaction id.
        versions: table -> Delta version holding this transaction's changes.
        read_versions: table -> version of the snapshot its reads were finally based on.
        freed: table -> version of a read-only marker freed at commit (an empty Delta commit).
        redo_count: how many times operations were redone instead of aborting.
        waits: how many times it waited for a preceding transaction.
        elapsed_s: wall time from begin to the end of commit.
        gvl_version: global version log version (LV[I]; None without it).
        validation: per-table validation outcome (LV[I]; empty without it).
        requests: object-store requests the transaction made, by kind.
    """

    txn: str
    versions: dict[str, int]
    read_versions: dict[str, int] = field(default_factory=dict)
    freed: dict[str, int] = field(default_factory=dict)
    redo_count: int = 0
    waits: int = 0
    elapsed_s: float = 0.0
    gvl_version: int | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
