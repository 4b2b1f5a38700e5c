"""What every stage of a transaction works with: its identity, settings, the lakehouse's services,
its event stream and its :class:`~lv_core.txn.state.Bookkeeping` (no behaviour beyond small helpers).

The stage modules (:mod:`~lv_core.txn.access`, :mod:`~lv_core.txn.waiting`,
:mod:`~lv_core.txn.execute`, :mod:`~lv_core.txn.settle`, :mod:`~lv_core.txn.publish`,
:mod:`~lv_core.txn.ending`, :mod:`~lv_core.txn.baseline`, :mod:`~lv_core.txn.isolation`) are
functions over a :class:`TxnCore`; the lifecycle class only sequences them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lv_core import events as ev
from lv_core.delta.actions import Action
from lv_core.delta.snapshot import Snapshot
from lv_core.protocol import clock, ict, layout
from lv_core.protocol.dag import Edge
from lv_core.protocol.gvl import GlobalLog
from lv_core.protocol.lease import LeaseObserver
from lv_core.protocol.markers import Footprint, MarkerInfo, VersionState
from lv_core.protocol.tablelog import TableLogs
from lv_core.protocol.validation import Policy
from lv_core.protocol.vlock import ValidationLock
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.txn.ops import Operation, OpResult
from lv_core.txn.state import Bookkeeping

__all__ = ["FOOTPRINT_MAX", "Services", "Settings", "Tuning", "TxnCore", "out_edges", "removed_files"]

#: The default of :attr:`Tuning.footprint_max`.
FOOTPRINT_MAX = 256



@dataclass(frozen=True)
class Tuning:
    """How hard the protocol works to be fast, never what it decides: every knob a user or a test may
    turn, with its default (the lakehouse's ``tuning`` option; :class:`Settings` carries it).

    Protocol constants (key layouts, formats) are not here; nor are the thread pools
    (:mod:`lv_core.concurrency`).
    """

    #: A transaction silent for this share of its lease reasserts its markers before publishing.
    silence_share: float = 0.5
    #: Versions between a snapshot and a marker read ahead at once while waiting, and how many of
    #: those reads are in flight together.
    read_ahead: int = 32
    read_ahead_parallel: int = 8
    #: At most this many paths in a marker's footprint (reads + removes); beyond it none is written.
    footprint_max: int = FOOTPRINT_MAX
    #: At most this many marker objects above ours are looked at for a first updater to give way to.
    precedence_probes: int = 8
    #: A waiter looks at the lease of the transaction it waits behind at most this often (and at once
    #: when the wait starts); never less often than every tenth of the lease (issue 38: once per poll,
    #: it was a GET per poll round).
    lease_check_s: float = 1.0
    #: Global versions read one by one past the last one known before re-reading the hint and galloping.
    gvl_linear_probes: int = 4
    #: A waiter that queued a commit request looks at least this often (its outcome may be published
    #: by any holder at any time).
    queued_poll_s: float = 0.05
    #: For this long after finding the validation key held (or losing a claim with a plan), commits
    #: queue at once instead of trying to take the key with their plan.
    contended_s: float = 2.0
    #: Tries of a recorded plan whose requests failed before the holder leaves it to a roll forward.
    plan_attempts: int = 3
    #: At most this many bytes of commits (all parts together) are copied into every part of a multi-table
    #: LV[R]/LV[CT] commit, which then decides it alone; bigger ones record their decision first (one more
    #: round trip). 0: always record it.
    embed_max: int = 64 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.silence_share <= 1:
            raise ValueError(f"silence_share must be in (0, 1], not {self.silence_share!r}")
        if not self.lease_check_s > 0:
            raise ValueError(f"lease_check_s must be > 0, not {self.lease_check_s!r}")
        if not self.queued_poll_s > 0 or not self.contended_s >= 0:
            raise ValueError(f"need queued_poll_s > 0 and contended_s >= 0, not {self.queued_poll_s!r}, "
                             f"{self.contended_s!r}")
        for name in ("read_ahead", "read_ahead_parallel", "footprint_max", "precedence_probes", "gvl_linear_probes",
                     "plan_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if isinstance(self.embed_max, bool) or not isinstance(self.embed_max, int) or self.embed_max < 0:
            raise ValueError(f"embed_max must be a non-negative integer, not {self.embed_max!r}")


@dataclass(frozen=True)
class Settings:
    """Timing and bounds of one transaction (from ``begin`` and the lakehouse's options)."""

    timeout_s: float
    retries: int
    lease_s: float
    poll_min_s: float
    poll_max_s: float
    cycle_check_s: float
    shift_after_s: float
    max_shifts: int = 8
    tuning: Tuning = Tuning()

    def lease_check(self) -> float:
        """How often a waiter looks at the lease of the transaction it waits behind."""
        return min(self.tuning.lease_check_s, self.lease_s / 10)

    def shift_after(self) -> float:
        """How long a waiter waits before shifting pre-emptively."""
        return max(self.cycle_check_s * 2, min(self.shift_after_s, self.timeout_s / 4))


@dataclass(frozen=True)
class Services:
    """What the lakehouse offers a transaction: its table-log cache, the global version log, the
    validation lock, a callback for what a commit published (caches, checkpoints), and its observer of
    other transactions' leases."""

    logs: TableLogs
    glog: GlobalLog
    vlock: ValidationLock
    after_commit: Callable[[str, int, Snapshot, list[Action]], None]
    leases: LeaseObserver = field(default_factory=LeaseObserver)


@dataclass
class TxnCore:
    """One transaction's identity, settings, services, events and bookkeeping."""

    id: str
    name: str | None
    preset: str
    features: frozenset[str]
    slack: int
    policy: Policy
    store: InstrumentedStore
    services: Services
    settings: Settings
    events: ev.EventStream
    book: Bookkeeping = field(default_factory=Bookkeeping)
    state: str = "active"  # active, committing, committed, aborted, unknown
    lock: threading.RLock = field(default_factory=threading.RLock)
    shift_lock: threading.Lock = field(default_factory=threading.Lock)  # one shift at a time
    edges_write: threading.Lock = field(default_factory=threading.Lock)  # one edges object PUT at a time
    edges_cv: threading.Condition = field(default_factory=threading.Condition)  # background exposure state
    t0: float = field(default_factory=time.monotonic)
    created: float = field(default_factory=clock.wall)
    gvl_version: int | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    #: LV[I]: tables found to have no log version past the version read, after the head was known
    #: (:mod:`lv_core.txn.current`); a read-only transaction needs no validation for them
    confirmed: set[str] = field(default_factory=set)
    #: log versions read while waiting, (table, version) -> state: a Delta file is written once and
    #: never rewritten, so a wait restarted by a marker shift does not read them again (issue 38)
    logged: dict[tuple[str, int], VersionState] = field(default_factory=dict)
    #: LV[I]: tables whose look runs beside the first operation (confirmed or taken back after it)
    looking: set[str] = field(default_factory=set)

    @property
    def markers(self) -> bool:
        """LV[R] or LV[CT]: tables are held with markers."""
        return bool({"R", "CT"} & self.features)

    @property
    def ct(self) -> bool:
        return "CT" in self.features

    @property
    def iso(self) -> bool:
        return "I" in self.features

    @property
    def claims_at_write(self) -> bool:
        """Tables are read without a marker and get one at their first write: LV[I] (reads are
        checked by validation) and LV[R] alone (reads need no marker: nothing tracks dependencies,
        and what committed between the read and the marker is redone at commit)."""
        return self.markers and (self.iso or not self.ct)

    def ict(self, table: str) -> bool:
        """``table`` has in-commit timestamps (at the snapshot this transaction builds on)."""
        ts = self.book.tables.get(table)
        return ts is not None and ict.enabled(ts.base.protocol, ts.base.metadata)

    def marker_info(self) -> MarkerInfo:
        """What this transaction's markers carry now (under a policy with file-level R1, its
        footprint; its edges live in its edges object, not in every marker)."""
        return MarkerInfo(txn=self.id, created=self.created,
                          lease_expires=self.book.lease_expires, client=layout.client_label(),
                          footprint=self.footprint() if self.iso and self.policy.r1_files else None,
                          name=self.name or "")

    def results(self) -> list[tuple[Operation, OpResult]]:
        """Every operation run so far with its result, the one whose markers are being claimed last."""
        done = [(rec.op, rec.result) for rec in self.book.ops]
        return done + ([self.book.claiming] if self.book.claiming is not None else [])

    def footprint(self) -> Footprint | None:
        """Files whose content reached the caller and files rewritten so far, per table (None when
        more than :attr:`Tuning.footprint_max` paths: markers stay small; nothing is then known)."""
        done = self.results()
        reads: dict[str, set[str]] = {}
        for op, res in done:
            if op.exposed:
                for t, paths in res.reads.items():
                    reads.setdefault(t, set()).update(paths)
        removes = removed_files(res for _, res in done)
        if sum(map(len, reads.values())) + sum(map(len, removes.values())) > self.settings.tuning.footprint_max:
            return None
        return Footprint({t: frozenset(v) for t, v in reads.items()}, {t: frozenset(v) for t, v in removes.items()})

    def requests(self) -> dict[str, int]:
        """Object-store requests made so far, by kind."""
        return {k: v for k, v in self.store.counts().items() if v}


def removed_files(results: Iterable[OpResult]) -> dict[str, set[str]]:
    """Table -> paths of every data file the results removed (rewrote or deleted)."""
    out: dict[str, set[str]] = {}
    for res in results:
        for t, rms in res.removes.items():
            out.setdefault(t, set()).update(r.path for r in rms)
    return out


def out_edges(txn_id: str, book: Bookkeeping) -> list[Edge]:
    """The transaction's outgoing DAG edges (the markers it waits behind), still pending or not."""
    return [Edge(txn_id, x, t, v) for (x, t), v in sorted(book.preds.items())]
