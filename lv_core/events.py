"""Typed event streams, one per transaction, that widgets and logs subscribe to.

Events are small frozen dataclasses carrying table names, versions, transaction ids and
numbers only: never credentials, URLs with secrets or data values.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Event:
    """Base class: every event names its transaction and when it happened."""

    txn: str
    ts: float = field(default_factory=time.time, kw_only=True)

    @property
    def kind(self) -> str:
        return type(self).__name__

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind
        return d


@dataclass(frozen=True)
class Began(Event):
    preset: str
    features: tuple[str, ...]
    name: str | None = None


@dataclass(frozen=True)
class MarkerPlaced(Event):
    table: str
    version: int
    attempts: int = 1  # 1 + number of lost put-if-absent races
    shift: bool = False  # placed by a marker shift


@dataclass(frozen=True)
class MarkerLost(Event):
    table: str
    version: int


@dataclass(frozen=True)
class MarkerFreed(Event):
    table: str
    version: int
    reason: str  # "read-only", "rollback", "abort", "shift", "expired"
    by: str | None = None  # who freed it when not the owner


@dataclass(frozen=True)
class EdgeAdded(Event):
    """A DAG edge: this transaction waits behind ``to_txn``'s marker at ``table@version``."""

    to_txn: str
    table: str
    version: int


@dataclass(frozen=True)
class CycleFound(Event):
    edges: tuple[tuple[str, str, str], ...]  # (src, dst, "table@version")


@dataclass(frozen=True)
class Shifted(Event):
    moves: tuple[tuple[str, int, int], ...]  # (table, old version, new version)
    reason: str


@dataclass(frozen=True)
class SnapshotRead(Event):
    table: str
    version: int
    files: int


@dataclass(frozen=True)
class OperationDone(Event):
    step: int
    op: str
    table: str
    sublog: str  # "physical" or "logical"
    added: int = 0
    removed: int = 0


@dataclass(frozen=True)
class Progress(Event):
    """A running statement's progress, from Spark Connect's progress reports: ``done`` of ``total``
    tasks (``stage`` "running"; counted over all its Spark operations so far, a finished or skipped
    stage as all done; ``total`` 0: none known yet) with ``running`` tasks in flight, repeated about
    every second while nothing changes (``elapsed_s`` moves on); then once more with ``stage`` "done"
    (or "failed") when the statement ends. ``statement`` is its 1-based number in the cell or script."""

    statement: int
    stage: str
    done: int
    total: int
    elapsed_s: float
    running: int = 0


#: The ``table`` of a :class:`Waiting` for the validation key (LV[I]) rather than for a table's marker.
VALIDATION_KEY = "validation lock"


@dataclass(frozen=True)
class Waiting(Event):
    table: str
    version: int
    on_txn: str


@dataclass(frozen=True)
class WaitEnded(Event):
    table: str
    version: int
    on_txn: str
    outcome: str  # "committed", "freed", "expired-freed"


@dataclass(frozen=True)
class ConflictFound(Event):
    table: str
    version: int  # the predecessor commit that conflicts
    step: int  # first conflicting operation
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Redo(Event):
    from_step: int
    attempt: int


@dataclass(frozen=True)
class Validated(Event):
    """LV[I] validation outcome: per table r/h/w/l/written_logs and each rule's result."""

    compatible: bool
    gvl_version: int | None  # the global version published (None when incompatible)
    tables: dict[str, dict]  # table -> {"r", "h", "w", "l", "written_logs", "rules": {"R1": {...}}}
    failed_rule: str | None = None


@dataclass(frozen=True)
class Requests(Event):
    """Object-store requests made for this transaction so far, by kind (when the store counts them)."""

    counts: dict[str, int]


@dataclass(frozen=True)
class Committed(Event):
    versions: dict[str, int]
    redo_count: int
    elapsed_s: float


@dataclass(frozen=True)
class Aborted(Event):
    """The transaction ended without committing. ``rule``: an abort rule (``TransactionAborted.rule``),
    or for a rollback ``"rollback"`` (asked for), ``"error"`` (a statement failed) or ``"interrupt"``
    (interrupted or cancelled); ``reason`` says what happened in words."""

    reason: str
    rule: str


Subscriber = Callable[[Event], None]


class EventStream:
    """Thread-safe, replayable stream of one transaction's events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._history: list[Event] = []
        self._subscribers: list[Subscriber] = []

    def emit(self, event: Event) -> None:
        with self._lock:
            self._history.append(event)
            subs = list(self._subscribers)
        for sub in subs:
            try:
                sub(event)
            except Exception:  # a broken subscriber must never break a transaction
                pass

    def subscribe(self, callback: Subscriber, *, replay: bool = True) -> Callable[[], None]:
        """Call ``callback`` for every event (first the past ones if ``replay``); returns an unsubscribe."""
        with self._lock:
            past = list(self._history) if replay else []
            self._subscribers.append(callback)
        for ev in past:
            try:
                callback(ev)
            except Exception:
                pass

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    @property
    def history(self) -> list[Event]:
        with self._lock:
            return list(self._history)
