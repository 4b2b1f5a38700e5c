"""The Lakehouse: a warehouse (object store root) of Delta tables, and transactions over them."""

from __future__ import annotations

import contextlib
import operator
import threading
from typing import Any, ClassVar, Iterable, Iterator

import pyarrow as pa

from lv_core.delta.actions import Action, Metadata
from lv_core.delta.checkpoint import checkpoint_interval, should_checkpoint, write_checkpoint
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.features import check_readable
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.table import create_table as _create_table
from lv_core.delta.table import validate_table_name
from lv_core.errors import ConfigError, DeltaLogError, LvError, NotFound, TableExists, TableNotFound
from lv_core.presets import Isolation, resolve
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.lease import LeaseObserver
from lv_core.protocol.recovery import RecoveryReport, recover
from lv_core.protocol.scan import (
    MAX_VERSIONS,
    LogEntry,
    MarkerScan,
    TableMarkers,
    list_tables,
    log_entries,
    reserved_tail,
)
from lv_core.protocol.tablelog import LaterSnapshot, TableLogs
from lv_core.protocol.vacuum import VacuumReport, vacuum
from lv_core.protocol.vlock import ValidationLock
from lv_core.storage.base import ObjectStore
from lv_core.txn import cleaner
from lv_core.txn.core import Services, Settings, Tuning
from lv_core.txn.ports import DataPlane, DataPlaneFactory
from lv_core.txn.transaction import Transaction

__all__ = ["Lakehouse", "RecoveryReport"]


class Lakehouse:
    """Tables under one warehouse root, and transactions over them.

    Metadata operations (listing, versions, creating tables, the protocol) never start Spark; the
    data plane (``data_plane(lakehouse, spark)``, wired in by :func:`lv_core.connect`) is built on
    first data access.
    """

    #: The data plane of lakehouses built without one (set by the composition root, :mod:`lv_core.wiring`).
    default_data_plane: ClassVar[DataPlaneFactory | None] = None

    def __init__(self, store: ObjectStore, *, spark: Any = None, data_plane: DataPlaneFactory | None = None,
                 lease_s: float = 30.0, poll_min_s: float = 0.005, poll_max_s: float = 0.2,
                 cycle_check_s: float = 0.25, shift_after_s: float = 5.0, tuning: Tuning | None = None) -> None:
        for opt, value, allow_zero in (("lease_s", lease_s, False), ("poll_min_s", poll_min_s, False),
                                       ("poll_max_s", poll_max_s, False), ("cycle_check_s", cycle_check_s, False),
                                       ("shift_after_s", shift_after_s, False)):
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                    or (value == 0 and not allow_zero)):
                raise ConfigError(f"{opt} must be a positive number of seconds, not {value!r}")
        if poll_max_s < poll_min_s:
            raise ConfigError(f"poll_max_s ({poll_max_s}) must not be smaller than poll_min_s ({poll_min_s})")
        self._store = store
        self._spark_arg = spark
        self._plane_factory = data_plane or type(self).default_data_plane  # via the class: a plain callable
        self._plane: DataPlane | None = None
        self._plane_lock = threading.Lock()
        self.lease_s = lease_s
        self.poll_min_s = poll_min_s
        self.poll_max_s = poll_max_s
        self.cycle_check_s = cycle_check_s  # how often a waiting transaction re-checks for cycles
        self.shift_after_s = shift_after_s  # waiting longer than this triggers a pre-emptive shift
        if tuning is not None and not isinstance(tuning, Tuning):
            raise ConfigError(f"tuning must be an lv_core.Tuning, not {tuning!r}")
        #: Speed knobs of the protocol, carried by every transaction's :class:`Settings`.
        self.tuning = tuning or Tuning()
        #: Latest-version hints and resolved snapshots of the tables (shared by its transactions).
        self.logs = TableLogs(store)
        #: The global version log (LV[I]).
        self.global_log = GlobalLog(store, defer=cleaner.background,  # its hint: after the lock is released
                                    linear_probes=self.tuning.gvl_linear_probes)
        #: The warehouse's validation lock (LV[I]).
        self.leases = LeaseObserver()  # judges other transactions gone by observation (no clock trust)
        t = self.tuning
        self.validation_lock = ValidationLock(store, self.global_log, lease_s=lease_s, poll_min_s=poll_min_s,
                                              poll_max_s=poll_max_s, queued_poll_s=t.queued_poll_s,
                                              contended_s=t.contended_s, plan_attempts=t.plan_attempts)

    @property
    def store(self) -> ObjectStore:
        """The warehouse's object store."""
        return self._store

    def __repr__(self) -> str:
        return f"Lakehouse({self.store.url()!r})"

    @property
    def url(self) -> str:
        return self.store.url()

    # ------------------------------------------------------------------ tables
    def create_table(self, name: str, schema: str | pa.Schema | DeltaSchema, partition_by: list[str] | None = None,
                     *, if_not_exists: bool = False, description: str | None = None,
                     properties: dict[str, Any] | None = None) -> Snapshot | None:
        """Create a Delta table at version 0 (DDL text like ``"id BIGINT, balance DOUBLE"`` or a pyarrow schema).

        ``properties``: Delta table properties (``{"delta.appendOnly": "true"}``,
        ``{"delta.enableInCommitTimestamps": "true"}``); one LakeVilla cannot write is refused."""
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        try:
            snap = _create_table(self.store, name, schema, partition_by, description=description,
                                 configuration=properties)
        except TableExists:
            if if_not_exists:
                return None
            raise
        self.logs.note_committed(name, snap)
        return snap

    def list_tables(self) -> list[str]:
        """Names of the Delta tables directly under the warehouse root (also ones written by others)."""
        return list_tables(self.store)

    def scan_markers(self, tables: str | Iterable[str] | None = None, *, now: float | None = None,
                     decisions: bool = False, max_versions: int | None = MAX_VERSIONS) -> list[TableMarkers]:
        """The pending LakeVilla markers of ``tables`` (default: every table), with their owners' leases.

        ``decisions``: tell expired markers whose commit was decided (recovery rolls those forward)
        apart from plain expired ones; ``max_versions``: versions read per table after its last
        checkpoint (None: all). Unreadable versions are reported in each result's ``errors``.

        Raises:
            InvalidTableName, TableNotFound: a named table is invalid or does not exist.
        """
        names = self.list_tables() if tables is None else [tables] if isinstance(tables, str) else list(tables)
        if tables is not None:
            for name in names:
                self.logs.require(name)
        scan = MarkerScan(self.store, now=now, decisions=decisions)
        return [scan.table(name, max_versions=max_versions) for name in names]

    def log(self, name: str, limit: int = 50) -> list[LogEntry]:
        """The last ``limit`` versions of the table's Delta log, oldest first, followed by the versions
        reserved past its tail by LakeVilla markers (kind "marker" while pending, "freed" once given up).

        Raises:
            InvalidTableName, TableNotFound: a bad name, or no such table.
        """
        last = reserved_tail(self.store, name, self.version(name))
        return log_entries(self.store, name, max(0, last - limit + 1), last)

    def version(self, name: str) -> int:
        """The latest version of a table's Delta log (a running transaction's marker reserves a later
        version, which becomes part of the log once the transaction commits or gives it up).

        Raises:
            InvalidTableName: ``name`` cannot name a table.
            TableNotFound: the table does not exist.
        """
        validate_table_name(name)
        return self.logs.latest_hint(name)

    def has_table(self, name: str) -> bool:
        """Whether table ``name`` exists (raises InvalidTableName for a name that cannot be a table)."""
        try:
            self.logs.require(name)
            return True
        except TableNotFound:
            return False

    def snapshot(self, name: str, version: int | None = None, *, as_of: int | None = None) -> Snapshot:
        """The table's Delta snapshot: latest (pending markers read as empty), at ``version``, or as of
        global version ``as_of`` of the global version log (whole-lakehouse time travel).

        Raises:
            InvalidTableName, TableNotFound: a bad name, or no such table.
            ConfigError: ``version`` or ``as_of`` is not an integer, or both are given.
            VersionNotFound: the table has no such ``version``.
            UnsupportedFeature: reading the table (at that version) needs a reader feature LakeVilla lacks.
        """
        validate_table_name(name)
        if version is not None:
            version = _version_number("version", version)
        if as_of is not None:
            if version is not None:
                raise ConfigError("give either version or as_of, not both")
            state = self.global_state(as_of)
            v = state.table_version(name)
            if v is None:
                raise TableNotFound(f"table {name!r} is not in global version {as_of} of the lakehouse")
            try:
                snap = self._snapshot_at(name, v)
            except VersionNotFound as e:  # a version no holder can have named: another client wrote it
                raise self.global_log.refuse_missing(state, e) from None
        elif version is None:
            snap = self.logs.latest_snapshot(name)
        else:
            snap = self._snapshot_at(name, version)
        # The cached path replays new commits without checking them: check the protocol (no request).
        check_readable(snap.protocol, snap.metadata, table=name)
        return snap

    def _snapshot_at(self, name: str, version: int) -> Snapshot:
        """The snapshot at ``version``, with a missing version named as such (whatever the cache held)."""
        if version < 0:
            raise VersionNotFound(name, version, "versions start at 0")
        try:
            return self.logs.resolved_view(name, version)[0]
        except NotFound as e:
            if isinstance(e, VersionNotFound) and e.table == name and e.version == version:
                raise
            # A warm cache reads the versions after it one by one: the first missing one surfaces
            # as a bare NotFound. Tell "no such version" from "a commit in between is missing".
            latest = self.logs.latest_hint(name)
            if version > latest:
                raise VersionNotFound(name, version, latest=latest) from None
            raise DeltaLogError(f"table {name!r}: cannot read version {version}: a commit file before it "
                                f"is missing ({e})") from e

    def global_state(self, as_of: int | None = None) -> GvlState:
        """The global version log: its head, or global version ``as_of`` (table -> validated version).

        Raises:
            ConfigError: ``as_of`` is not an integer.
            GlobalVersionNotFound: global version ``as_of`` was never published.
        """
        if as_of is None:
            return self.global_log.head()
        return self.global_log.at(_version_number("as_of (a global version)", as_of))

    # ------------------------------------------------------------------ data (the data plane)
    @property
    def data_plane(self) -> DataPlane:
        """The data plane (built on first use; Spark starts or connects on its first data access).

        Raises:
            ConfigError: the lakehouse was built without one (use :func:`lv_core.connect`).
        """
        if self._plane is None:
            with self._plane_lock:
                if self._plane is None:
                    if self._plane_factory is None:
                        raise ConfigError("this Lakehouse has no data plane: open it with lv_core.connect() "
                                          "(or lv_core.Lakehouse), which wires Spark in")
                    self._plane = self._plane_factory(self, self._spark_arg)
        return self._plane

    @property
    def spark(self) -> Any:
        """The Spark Connect session (started or connected on first use)."""
        return self.data_plane.spark

    def read(self, name: str, version: int | None = None) -> Any:
        """The table (latest, or at ``version``) as a Spark DataFrame, outside any transaction."""
        return self.data_plane.read(name, version)

    def sql(self, statement: str) -> Any:
        """Run SQL in autocommit: each statement of the (``;``-separated) script in its own ``serializable``
        transaction; DDL, SHOW and DESCRIBE need none. Returns the last statement's result (see
        :mod:`lv_core.engine.sql`)."""
        return self.data_plane.autocommit_sql(statement)

    # ------------------------------------------------------------------ transactions
    def begin(self, preset: str | Isolation = "serializable", features: Any = None, slack: int | None = None,
              timeout_s: float = 60.0, name: str | None = None, *, retries: int = 5) -> Transaction:
        """Start a transaction (see ARCHITECTURE.md for presets and features). ``preset`` may be one
        resolved before (:func:`lv_core.presets.resolve`), which carries its features and slack."""
        if isinstance(preset, Isolation):
            if features is not None or slack is not None:
                raise ConfigError("a resolved preset carries its features and slack; give them to resolve()")
            p, feats, s = preset
        else:
            p, feats, s = resolve(preset, features, slack)
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ConfigError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be a non-negative integer, not {retries!r}")
        services = Services(self.logs, self.global_log, self.validation_lock, self.after_commit, self.leases)
        settings = Settings(timeout_s=float(timeout_s), retries=retries, lease_s=self.lease_s,
                            poll_min_s=self.poll_min_s, poll_max_s=self.poll_max_s,
                            cycle_check_s=self.cycle_check_s, shift_after_s=self.shift_after_s,
                            tuning=self.tuning)
        plane = self.data_plane if self._plane_factory is not None else None
        return Transaction(self.store, services, settings, plane, preset=p.name, features=feats, slack=s,
                           name=name)

    @contextlib.contextmanager
    def transaction(self, preset: str = "serializable", **kwargs: Any) -> Iterator[Transaction]:
        """``with lh.transaction() as txn:`` commits on a clean exit, rolls back on an exception."""
        txn = self.begin(preset, **kwargs)
        try:
            yield txn
        except BaseException:
            txn.rollback()
            raise
        if txn.state == "active":
            txn.commit()

    def after_commit(self, table: str, version: int, base: Snapshot, actions: list[Action]) -> None:
        """A commit of ``actions`` landed at ``version`` over the resolved snapshot ``base``: cache the
        new snapshot (when ``base`` is the version before it) and write a checkpoint when ``version``
        is due (``delta.checkpointInterval``, default 10) and every version up to it is resolved (in
        the background: the commit does not wait for it; ``close()`` does).

        When other commits landed between ``base`` and ``version``, a due checkpoint reads them first
        (the cached snapshot advanced, or the log); pending markers below ``version`` skip it.
        """
        later = LaterSnapshot(base, version, actions) if base.version == version - 1 else None
        if later is not None:
            self.logs.note_committed(table, later)  # replayed when first read, not in the commit
        metadata = next((a for a in reversed(actions) if isinstance(a, Metadata)), base.metadata)
        if not should_checkpoint(version, checkpoint_interval(metadata)):
            return
        from lv_core.txn import cleaner

        cleaner.background(f"checkpoint of {table}@{version}", lambda: self._checkpoint(table, version, later))

    def _checkpoint(self, table: str, version: int, later: LaterSnapshot | None) -> None:
        """Write the checkpoint of ``table`` at ``version`` (in the background: a commit does not wait)."""
        with contextlib.suppress(LvError):
            if later is not None:
                snap = later.get()
            else:
                snap, pending = self.logs.resolved_view(table, version)
                if pending or not should_checkpoint(version, checkpoint_interval(snap.metadata)):
                    return
            write_checkpoint(self.store, table, snap)

    # ------------------------------------------------------------------ operations
    def recover(self, *, lease_grace_s: float | None = None) -> RecoveryReport:
        """Free expired markers, roll forward decided commits, clean provably orphaned leftovers.

        ``lease_grace_s``: how long after its lease ran out a transaction's sublog is kept (its owner
        may return); default: the lease time.
        """
        return recover(self.store, lease_grace_s=self.lease_s if lease_grace_s is None else lease_grace_s,
                       lease_s=self.lease_s)

    def vacuum(self, name: str, retain_hours: float | None = None, *, dry_run: bool = False,
               enforce_retention: bool = True) -> VacuumReport:
        """Delete the table's data files that no version within the last ``retain_hours`` needs (default:
        its ``delta.deletedFileRetentionDuration``, 168 hours); see :mod:`lv_core.protocol.vacuum`.

        Raises:
            InvalidTableName, TableNotFound: a bad name, or no such table.
            ConfigError: a retention below the table's, unless ``enforce_retention=False``.
        """
        self.logs.require(name)
        return vacuum(self.store, name, retain_hours=retain_hours, enforce_retention=enforce_retention,
                      dry_run=dry_run)

    def close(self) -> None:
        """Wait for the background clean-up of finished transactions, then close the store."""
        from lv_core.txn import cleaner

        cleaner.drain(60.0)
        self.store.close()


def _version_number(what: str, value: Any) -> int:
    """``value`` as a version number (an integer, not a bool), else ConfigError naming ``what``."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer version number, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigError(f"{what} must be an integer version number, not {value!r}") from None
