"""VACUUM: delete the data files of a table that no version within the retention window needs.

A version is *retained* when it is the latest or was the latest at some moment within the window
(``now - retain``): the version current at the window's start (the newest commit written before it,
by the commit file's modification time, as Delta does) and every later one. The files kept are
every file some retained version lists: the files of the window's first version plus every file
a later commit added (with their deletion-vector files). A reader at any retained version therefore
finds every file it needs. (Delta Lake keeps the latest version's tombstones removed within the
window instead: the same set when ``deletionTimestamp`` is the commit time.)

Also removed: the marker objects (``_lakevilla/markers/<table>/``) of versions the log holds, which
nobody reads any more (pending markers lie past the log's tail and are kept).

Never deleted either: anything under ``_delta_log/``, hidden names (``_*``, ``.*``; partition
folders such as ``_c=1`` excepted) and so ``<table>/_lv_staging/`` (change data output of running
transactions), files a transaction sublog names or whose name carries the id of a transaction holding
a pending marker on the table (running transactions' staged files; those of dead transactions are
``lv recover``'s), and files younger than the window that no version lists (a
writer may be about to commit them: so a running write's folder ``part-<txn>-...-s<id>/``).

The retention must not be shorter than the table's ``delta.deletedFileRetentionDuration`` (default
7 days = 168 hours) unless the caller turns the check off (``enforce_retention=False``; in SQL the
Spark setting ``spark.databricks.delta.retentionDurationCheck.enabled=false``, as Delta Lake).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lv_core.delta.actions import AddFile
from lv_core.delta.checkpoint import interval_ms
from lv_core.delta.dv import dv_of
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.log import DeltaLog
from lv_core.errors import ConfigError, LvError
from lv_core.protocol import layout
from lv_core.protocol.markers import read_version
from lv_core.protocol.scan import transaction_ids
from lv_core.protocol.sublog import read_sublog
from lv_core.storage.base import ObjectStore

__all__ = ["DEFAULT_RETENTION_HOURS", "VacuumReport", "retention_hours", "vacuum"]

DEFAULT_RETENTION_HOURS = 168.0
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass
class VacuumReport:
    """What a VACUUM did (or, ``dry_run``, would do)."""

    table: str
    retain_hours: float
    oldest_retained_version: int
    latest_version: int
    deleted: list[str] = field(default_factory=list)  # paths relative to the table
    kept_referenced: int = 0  # data files some retained version needs
    kept_young: int = 0  # unreferenced, but younger than the window
    kept_in_use: int = 0  # named by a transaction sublog
    markers_removed: int = 0  # marker objects of versions the log holds (resolved: bookkeeping only)
    dry_run: bool = False


def retention_hours(configuration: dict[str, str] | None) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` in hours (default 168)."""
    ms = interval_ms((configuration or {}).get("delta.deletedFileRetentionDuration"))
    return DEFAULT_RETENTION_HOURS if ms is None else ms / 3_600_000


def _hidden(rel: str) -> bool:
    parts = rel.split("/")
    return any(p.startswith(("_", ".")) and not (i < len(parts) - 1 and "=" in p) for i, p in enumerate(parts))


def _needs(add: AddFile) -> list[str]:
    out = [add.path]
    dv = dv_of(add)
    if dv is not None and dv.storage_type == "u":
        out.append(dv.relative_file())
    return out


def _in_use(store: ObjectStore, table: str) -> set[str]:
    """Files any transaction sublog names for ``table`` (running, or dead and not yet recovered)."""
    out: set[str] = set()
    for txn in transaction_ids(store):
        try:
            entries = read_sublog(store, txn)
        except LvError:
            continue
        for e in entries:
            out.update(e.adds.get(table, ()))
    return out


def vacuum(store: ObjectStore, table: str, *, retain_hours: float | None = None, enforce_retention: bool = True,
           dry_run: bool = False, now: float | None = None) -> VacuumReport:
    """Delete the files of ``table`` that no retained version needs (see the module text).

    Raises:
        ConfigError: a negative retention, or one below the table's ``delta.deletedFileRetentionDuration``
            while ``enforce_retention`` (nothing is deleted).
        TableNotFound, DeltaLogError: the table cannot be read (nothing is deleted).
    """
    now = time.time() if now is None else now
    log = DeltaLog(store, table)
    latest = log.snapshot(method="list")
    table_hours = retention_hours(dict(latest.metadata.configuration or {}))
    hours = table_hours if retain_hours is None else float(retain_hours)
    if hours < 0:
        raise ConfigError(f"VACUUM {table}: the retention must not be negative, not {retain_hours!r} hours")
    if enforce_retention and hours < table_hours:
        raise ConfigError(
            f"VACUUM {table}: a retention of {hours:g} hours is below the table's delta.deletedFileRetentionDuration "
            f"({table_hours:g} hours): readers at older versions, and writers still committing, could lose files. "
            f"If you are sure, turn the check off ({RETENTION_CHECK}=false, e.g. %lv connect --conf "
            f"{RETENTION_CHECK}=false, or lh.vacuum(..., enforce_retention=False)); nothing was deleted.")
    cutoff = now - hours * 3600
    prefix = f"{table}/"
    commit_mtimes: dict[int, float] = {}
    data: dict[str, float] = {}  # relative path -> last modified
    for meta in store.list(prefix):
        rel = meta.key[len(prefix):]
        if rel.startswith("_delta_log/"):
            name = rel[len("_delta_log/"):]
            if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
                commit_mtimes[int(name[:20])] = meta.last_modified
            continue
        if not _hidden(rel):
            data[rel] = meta.last_modified
    before = [v for v, t in commit_mtimes.items() if t <= cutoff and v <= latest.version]
    first = max(before) if before else min((v for v in commit_mtimes if v <= latest.version), default=latest.version)
    try:
        base = log.snapshot(first, method="list", check=False)
    except VersionNotFound:  # its commits were cleaned up: the oldest state still readable is a checkpoint
        base = log.snapshot(latest.checkpoint_version or latest.version, method="list", check=False)
    needed: set[str] = set()
    for add in base.files.values():
        needed.update(_needs(add))
    for v in range(base.version + 1, latest.version + 1):
        actions, _etag = log.read_commit(v)
        for a in actions:
            if isinstance(a, AddFile):
                needed.update(_needs(a))
    in_use = _in_use(store, table)
    resolved, pending = _markers(store, table, latest.version)
    rep = VacuumReport(table, hours, base.version, latest.version, dry_run=dry_run)
    for rel, mtime in sorted(data.items()):  # store keys are the decoded log paths
        if rel in needed:
            rep.kept_referenced += 1
        elif rel in in_use or layout.writer_of(rel) in pending:
            rep.kept_in_use += 1
        elif mtime > cutoff:
            rep.kept_young += 1
        else:
            rep.deleted.append(rel)
    rep.markers_removed = len(resolved)
    if not dry_run:
        for rel in rep.deleted:
            store.delete(prefix + rel)
        for key in resolved:
            store.delete(key)
    return rep


def _markers(store: ObjectStore, table: str, latest: int) -> tuple[list[str], set[str]]:
    """The marker objects (beside the log) of versions at or below ``latest`` (the log holds those
    versions: nobody reads the objects any more), and the transactions holding a pending marker past
    it (their staged files are kept: they may not have a sublog entry). 1 LIST + 2 GETs per marker
    past the log's tail (the log first: a version committed since ``latest`` is no marker any more)."""
    resolved, pending = [], set()
    for meta in store.list(layout.markers_prefix(table)):
        name = meta.key.rsplit("/", 1)[-1]
        stem = name[:-5] if name.endswith(".json") else ""
        if not stem.isdigit():
            continue
        if int(stem) <= latest:
            resolved.append(meta.key)
            continue
        try:
            st = read_version(store, table, int(stem))
        except LvError:
            continue
        if st.pending and st.txn:
            pending.add(st.txn)
    return resolved, pending
