"""The Transaction: the public lifecycle (begin, operations, commit, rollback) over the stage modules.

Life of a transaction (see docs/PROTOCOL.md for the crash analysis and docs/ARCHITECTURE.md for
the stages):
1. begin: nothing is written; the first marker writes a lease that one background thread renews.
2. first access of a table (:mod:`~lv_core.txn.access`): with LV[R]/LV[CT] a marker at the next
   free version; with LV[I] the table's global-log version.
3. each operation (:mod:`~lv_core.txn.execute`) runs on the base plus the transaction's own changes
   and is recorded in its sublog.
4. commit: settle (:mod:`~lv_core.txn.settle`: wait for preceding markers, redo what they
   invalidated) -> prepare and publish (:mod:`~lv_core.txn.publish`; with LV[I]:
   :mod:`~lv_core.txn.isolation` validates R1-R3 first) -> finish (:mod:`~lv_core.txn.ending`).
With no features (preset ``delta``) every operation commits on its own (:mod:`~lv_core.txn.baseline`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Mapping

from lv_core import events as ev
from lv_core.delta.snapshot import Snapshot
from lv_core.errors import LvError, TransactionAborted, TransactionError
from lv_core.protocol import layout
from lv_core.protocol.dag import DagView, Edge
from lv_core.protocol.validation import Policy
from lv_core.storage.base import ObjectStore
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.testing import crashpoint
from lv_core.txn import ending, isolation, readonly
from lv_core.txn.access import access
from lv_core.txn.baseline import execute_autocommit
from lv_core.txn.core import Services, Settings, TxnCore, out_edges
from lv_core.txn.execute import execute as execute_op
from lv_core.txn.ops import Operation
from lv_core.txn.ports import DataPlane
from lv_core.txn.publish import Published, commit_markers
from lv_core.txn.result import CommitResult
from lv_core.txn.state import Bookkeeping

__all__ = ["Transaction"]


class Transaction:
    """One multi-statement transaction over one or more tables (see ARCHITECTURE.md).

    Created by :meth:`Lakehouse.begin <lv_core.lakehouse.Lakehouse.begin>`."""

    def __init__(self, store: ObjectStore, services: Services, settings: Settings, data: DataPlane | None, *,
                 preset: str, features: frozenset[str], slack: int, name: str | None) -> None:
        # A per-transaction counting view of the store: the widget and CommitResult report how many
        # object-store requests of each kind this transaction made (whatever thread made them).
        self.core = TxnCore(id=layout.new_txn_id(), name=name, preset=preset, features=features, slack=slack,
                            policy=Policy.for_preset(preset, slack), store=InstrumentedStore(store),
                            services=services, settings=settings, events=ev.EventStream())
        self._data = data
        self.events.emit(ev.Began(self.id, preset=preset, features=tuple(sorted(features)), name=name))

    # ------------------------------------------------------------------ identity and state
    @property
    def id(self) -> str:
        return self.core.id

    @property
    def name(self) -> str | None:
        return self.core.name

    @property
    def preset(self) -> str:
        return self.core.preset

    @property
    def features(self) -> frozenset[str]:
        return self.core.features

    @property
    def slack(self) -> int:
        return self.core.slack

    @property
    def policy(self) -> Policy:
        return self.core.policy

    @property
    def timeout_s(self) -> float:
        return self.core.settings.timeout_s

    @property
    def events(self) -> ev.EventStream:
        return self.core.events

    @property
    def store(self) -> InstrumentedStore:
        return self.core.store

    @property
    def state(self) -> str:
        """``active``, ``committing``, ``committed``, ``aborted`` or ``unknown`` (decided, completion
        left to roll forward)."""
        return self.core.state

    @property
    def book(self) -> Bookkeeping:
        """The transaction's bookkeeping (tables, operations, commit progress), for inspection."""
        return self.core.book

    @property
    def markers(self) -> bool:
        return self.core.markers

    @property
    def ct(self) -> bool:
        return self.core.ct

    @property
    def iso(self) -> bool:
        return self.core.iso

    @property
    def redo_count(self) -> int:
        return self.core.book.redo_count

    @property
    def waits(self) -> int:
        return self.core.book.waits

    @property
    def gvl_version(self) -> int | None:
        return self.core.gvl_version

    @property
    def validation(self) -> dict[str, Any]:
        return self.core.validation

    def __repr__(self) -> str:
        return f"<Transaction {self.name or self.id} {self.preset} {self.state}>"

    def ensure_active(self) -> None:
        """Raise TransactionError unless the transaction is still active."""
        if self.state != "active":
            raise TransactionError(f"transaction {self.name or self.id} is {self.state}; begin a new one")

    def requests(self) -> dict[str, int]:
        """Object-store requests this transaction made so far, by kind (GET, PUT, PUT-create, ...)."""
        return self.core.requests()

    def tables(self) -> list[str]:
        return list(self.core.book.tables)

    def marker_versions(self) -> dict[str, int]:
        return {t: s.marker_version for t, s in self.core.book.tables.items() if s.marker_version is not None}

    def out_edges(self) -> list[Edge]:
        """This transaction's outgoing DAG edges (the markers it waits behind), still pending or not."""
        return out_edges(self.id, self.core.book)

    def dag(self) -> DagView:
        """The dependency DAG around this transaction, as data (for widgets)."""
        book = self.core.book
        return DagView.around(self.id, self.state, self.out_edges(), book.cycles, book.shifts)

    def snapshot(self, table: str) -> Snapshot:
        """The snapshot this transaction reads ``table`` at (placing its marker on first access)."""
        with self.core.lock:
            self.ensure_active()
            return access(self.core, table).base

    # ------------------------------------------------------------------ operations
    def execute(self, op: Operation) -> Any:
        """Run ``op`` inside this transaction and return its value."""
        with self.core.lock:
            self.ensure_active()
            if not self.markers and not self.iso:
                return execute_autocommit(self.core, op)
            try:
                return execute_op(self.core, op)
            except TransactionAborted as e:  # e.g. it gave way to a first updater: the transaction ends
                ending.abort(self.core, e.reason, e.rule)
                raise

    def _plane(self) -> DataPlane:
        if self._data is None:
            raise TransactionError("this transaction has no data plane (use lv_core.connect(), which wires Spark in)")
        return self._data

    def table(self, name: str) -> Any:
        """The table as this transaction sees it (snapshot + own writes) as a Spark DataFrame."""
        return self._plane().table(self, name)

    def insert(self, name: str, data: Any) -> int:
        """Append rows (Spark DataFrame, pyarrow.Table, pandas DataFrame, or list of dicts); returns the row count."""
        return self._plane().insert(self, name, data)

    def update(self, name: str, set: Mapping[str, str], where: str | None = None) -> int:  # noqa: A002
        """``UPDATE name SET k = expr, ... WHERE where`` (Spark SQL expressions); returns rows affected."""
        return self._plane().update(self, name, set, where)

    def delete(self, name: str, where: str | None = None) -> int:
        """``DELETE FROM name WHERE where``; returns rows deleted."""
        return self._plane().delete(self, name, where)

    def sql(self, statement: str) -> Any:
        """Run SQL (one statement or a ``;``-separated script) inside this transaction; returns the last
        statement's result: SELECT -> DataFrame, INSERT/UPDATE/DELETE/MERGE -> one-row DataFrame of row
        counts, SHOW/DESCRIBE -> DataFrame, CREATE TABLE -> None (see :mod:`lv_core.engine.sql`)."""
        return self._plane().sql(self, statement)

    # ------------------------------------------------------------------ commit / rollback
    def commit(self) -> CommitResult:
        """Commit (blocking up to ``timeout_s``); raises TransactionAborted when it cannot."""
        core = self.core
        with core.lock:
            self.ensure_active()
            core.state = "committing"
            deadline = time.monotonic() + core.settings.timeout_s
            try:
                published: Published
                if core.iso:
                    # A read-only transaction that read the newest state of one global version needs
                    # no validation (lv_core/txn/readonly.py); anything else validates.
                    published = readonly.commit_read_only(core) or isolation.commit_isolated(core, deadline)
                elif not core.markers:
                    published = Published(dict(core.book.autocommitted))
                else:
                    published = commit_markers(core, deadline)
                crashpoint("committed")
            except TransactionAborted as e:
                ending.abort(core, e.reason, e.rule)
                raise
            except BaseException as e:
                reason = f"commit failed: {e}" if isinstance(e, LvError) else f"commit failed: {type(e).__name__}: {e}"
                if core.book.decision is not None:
                    ending.end_undecidable(core, reason)
                    raise
                ending.abort(core, reason, "crashed" if not isinstance(e, LvError) else "conflict")
                raise
            reads = core.book.read_versions() if (core.iso or core.markers) else {}
            return ending.finish(core, published, reads)

    def commit_async(self) -> "Future[CommitResult]":
        """Commit in a background thread; the future resolves to the CommitResult or the abort."""
        fut: Future[CommitResult] = Future()

        def run() -> None:
            try:
                fut.set_result(self.commit())
            except BaseException as e:  # delivered through the future
                fut.set_exception(e)

        # A thread of its own, not a pool task: a commit waits on every pool (it is the "plain thread"
        # of lv_core.concurrency's rule), and a daemon thread does not keep the interpreter alive.
        threading.Thread(target=run, name=f"lv-commit-{self.id}", daemon=True).start()
        return fut

    def cancel(self) -> None:
        """Interrupt the statement this transaction is running (from any thread, e.g. a Cancel button):
        its Spark operation stops and the statement raises :class:`~lv_core.errors.Interrupted`
        (if none is running, the next one does). The caller then rolls back, or goes on."""
        if self._data is not None:
            self._data.interrupt(self)

    def rollback(self, reason: str | None = None, rule: str = "rollback") -> None:
        """Undo everything: free markers, delete staged files and the sublog.

        ``reason``/``rule`` say why in the Aborted event (default: the user rolled back); e.g. the
        magics pass ``rule="error"`` when a statement failed and ``"interrupt"`` on an interrupt."""
        core = self.core
        with core.lock:
            # ("unknown": a commit whose outcome the log decides, rolled forward or expired: nothing to undo here)
            if self.state in ("aborted", "committed", "unknown"):
                return
            if not self.markers and core.book.autocommitted:
                # Plain Delta: statements already committed cannot be undone (the baseline's weakness).
                core.state = "aborted"
                why = reason or "rolled back"
                self.events.emit(ev.Aborted(self.id, reason=f"{why} (statements already committed stay)", rule=rule))
                return
            ending.abort(core, reason or "rolled back by the user", rule)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            if self.state == "active":
                self.commit()
        else:
            self.rollback()
