"""Reading a table's Delta log from an object store: commits, checkpoints, latest version, snapshots.

All decisions are delegated to pure functions (:func:`~lv_core.delta.snapshot.replay`,
:func:`~lv_core.delta.checkpoint.decode_checkpoint`, :func:`~lv_core.delta.actions.decode_commit`);
this module only decides which objects to fetch, and documents what each call costs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from lv_core import concurrency
from lv_core.delta.actions import Action, UnknownAction, decode_commit
from lv_core.delta.checkpoint import (
    checkpoint_names,
    decode_checkpoint,
    decode_json_checkpoint,
    parse_checkpoint_name,
    parse_v2_checkpoint_name,
    sidecar_name,
)
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.features import check_readable
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.errors import DeltaLogError, NotFound, TableNotFound
from lv_core.storage.base import ObjectStore

__all__ = ["DeltaLog", "LogListing"]

_COMMIT = re.compile(r"^(\d{20})\.json$")

#: At most this many commit GETs in flight at once (one snapshot read).
MAX_PARALLEL_GETS = 16


@dataclass
class LogListing:
    """What one LIST of ``_delta_log/`` found: commit versions and complete checkpoints.

    ``checkpoints`` holds classic ones (single or multi-part, complete only: version -> parts),
    ``v2_checkpoints`` UUID-named ones (version -> file name).
    """

    commits: set[int] = field(default_factory=set)
    checkpoints: dict[int, int] = field(default_factory=dict)  # version -> parts (complete ones only)
    v2_checkpoints: dict[int, str] = field(default_factory=dict)  # version -> UUID-named file name

    @property
    def latest(self) -> Optional[int]:
        vs = self.commits | set(self.checkpoints) | set(self.v2_checkpoints)
        return max(vs) if vs else None

    def has_checkpoint(self, version: int) -> bool:
        return version in self.checkpoints or version in self.v2_checkpoints

    def best_checkpoint(self, at_most: int) -> Optional[int]:
        vs = [v for v in set(self.checkpoints) | set(self.v2_checkpoints) if v <= at_most]
        return max(vs) if vs else None

    def contiguous_from(self, version: int) -> int:
        """The last version of the unbroken run of commits ``version+1, version+2, ...`` (``version`` if none)."""
        while version + 1 in self.commits:
            version += 1
        return version

    def checkpoint_files(self, version: int) -> list[str]:
        """File names of the checkpoint at ``version`` (a UUID-named one if there is one)."""
        if version in self.v2_checkpoints:
            return [self.v2_checkpoints[version]]
        return checkpoint_names(version, self.checkpoints[version])


def _missing(table: str, missing: list[int]) -> DeltaLogError:
    shown = ", ".join(str(v) for v in missing[:10]) + (", ..." if len(missing) > 10 else "")
    return DeltaLogError(f"table {table!r}: the Delta log has a gap: commit files missing for versions "
                         f"[{shown}] ({len(missing)} in all), with no checkpoint covering them. Help: restore "
                         "the missing files from a backup; readers cannot reconstruct the table without them.")


class DeltaLog:
    """The Delta log of table ``table`` (key prefix ``<table>/_delta_log/``) in ``store``."""

    def __init__(self, store: ObjectStore, table: str) -> None:
        self.store = store
        self.table = table
        self.prefix = f"{table}/_delta_log/"

    def __repr__(self) -> str:
        return f"DeltaLog({self.table!r})"

    # ------------------------------------------------------------------ keys and single reads
    def commit_key(self, version: int) -> str:
        """``<table>/_delta_log/<version:020d>.json``."""
        if version < 0:
            raise ValueError(f"negative version {version}")
        return f"{self.prefix}{version:020d}.json"

    @property
    def last_checkpoint_key(self) -> str:
        return self.prefix + "_last_checkpoint"

    def read_commit(self, version: int) -> tuple[list[Action], str]:
        """GET one commit: its actions and the etag of the bytes read (for a later ``IfMatch``).

        Raises:
            VersionNotFound: no such commit file (also a :class:`~lv_core.errors.NotFound`).
            DeltaLogError: the commit is malformed.
        """
        try:
            res = self.store.get(self.commit_key(version))
        except NotFound:
            raise VersionNotFound(self.table, version) from None
        return decode_commit(res.data, version=version, table=self.table), res.etag

    def read_last_checkpoint(self) -> Optional[dict[str, Any]]:
        """GET ``_last_checkpoint`` (None if absent or unreadable: it is only a hint)."""
        try:
            data = self.store.get(self.last_checkpoint_key).data
        except NotFound:
            return None
        try:
            info = json.loads(data)
            int(info["version"])
            return info
        except (ValueError, KeyError, TypeError):
            return None

    def read_checkpoint(self, version: int, parts: int = 1) -> list[Action]:
        """GET and decode every part of the classic checkpoint at ``version`` (and its sidecars).

        Raises:
            NotFound: a part is missing.
        """
        return self.read_checkpoint_files(checkpoint_names(version, parts))

    def read_checkpoint_files(self, names: list[str]) -> list[Action]:
        """GET and decode checkpoint files (names inside ``_delta_log/``), classic or UUID-named
        (JSON or Parquet), then the sidecar files (``_delta_log/_sidecars/``) they reference.

        Cost: one GET per file and per sidecar. ``checkpointMetadata`` and ``sidecar`` actions are
        resolved here and not returned.

        Raises:
            NotFound: a file or sidecar is missing.
            DeltaLogError: a file is malformed.
        """
        actions: list[Action] = []
        for name in names:
            data = self.store.get(self.prefix + name).data
            where = f"{self.table}/{name}"
            actions.extend(decode_json_checkpoint(data, name=where) if name.endswith(".json")
                           else decode_checkpoint(data, name=where))
        out: list[Action] = []
        for a in actions:
            if isinstance(a, UnknownAction) and a.key == "sidecar":
                side = f"_sidecars/{sidecar_name(a.body)}"
                data = self.store.get(self.prefix + side).data
                out.extend(decode_checkpoint(data, name=f"{self.table}/{side}"))
            elif not (isinstance(a, UnknownAction) and a.key == "checkpointMetadata"):
                out.append(a)
        return out

    def hinted_checkpoint(self, lc: Optional[dict[str, Any]]) -> Optional[tuple[int, list[str]]]:
        """(version, file names) of the checkpoint ``_last_checkpoint`` names (a V2 one via ``v2Checkpoint.path``)."""
        if lc is None:
            return None
        v = int(lc["version"])
        v2 = lc.get("v2Checkpoint")
        if isinstance(v2, dict) and isinstance(v2.get("path"), str) and v2["path"]:
            name = v2["path"].rstrip("/").rsplit("/", 1)[-1]
            if parse_v2_checkpoint_name(name) == v:
                return v, [name]
        try:
            parts = int(lc.get("parts") or 1)
        except (TypeError, ValueError):
            parts = 1
        return v, checkpoint_names(v, parts)

    def list_log(self, start_after_version: Optional[int] = None) -> LogListing:
        """One LIST of the log (from the files of ``start_after_version`` on, if given)."""
        start = None if start_after_version is None else f"{self.prefix}{start_after_version:020d}.checkpoint"
        out = LogListing()
        parts_seen: dict[tuple[int, int], set[int]] = {}
        for meta in self.store.list(self.prefix, start_after=start):
            name = meta.key[len(self.prefix):]
            m = _COMMIT.match(name)
            if m:
                out.commits.add(int(m.group(1)))
                continue
            cp = parse_checkpoint_name(name)
            if cp:
                v, part, n = cp
                parts_seen.setdefault((v, n), set()).add(part)
                continue
            v2 = parse_v2_checkpoint_name(name)
            if v2 is not None:
                out.v2_checkpoints.setdefault(v2, name)
        for (v, n), seen in parts_seen.items():
            if len(seen) == n and (v not in out.checkpoints or n < out.checkpoints[v]):
                out.checkpoints[v] = n
        return out

    # ------------------------------------------------------------------ latest version
    def latest_version(self, hint: Optional[int] = None) -> int:
        """The latest version: probing forward from ``hint`` (a version known to exist, e.g. one this
        process read) or, without one, by LIST (:meth:`latest_version_by_list`): only a LIST can prove
        that ``_last_checkpoint`` is not stale (a newer checkpoint, older commits cleaned up)."""
        return self.latest_version_by_probe(hint) if hint is not None else self.latest_version_by_list()

    def latest_version_by_list(self) -> int:
        """Latest version via ``_last_checkpoint`` + one LIST from that checkpoint on.

        Cost: 1 GET (``_last_checkpoint``, found or not) + 1 LIST; 1 more LIST (the whole log) when
        ``_last_checkpoint`` names a checkpoint that is not there (missing, incomplete, ahead of the files).

        Raises:
            TableNotFound: no log at all.
        """
        latest = self._listing(self.read_last_checkpoint()).latest
        if latest is None:
            raise self._not_found()
        return latest

    def latest_version_by_probe(self, hint: Optional[int] = None) -> int:
        """Latest version from ``v`` on: HEAD ``v+1``; if it exists, one LIST of the log from it.

        ``v`` is ``hint`` (a version known to exist) or else the ``_last_checkpoint`` version (-1
        without one). The latest version is the end of the unbroken run of commits after ``v``.
        Cost: with a hint, 1 HEAD when the log did not move, else 1 HEAD + 1 LIST (one more LIST
        per further 1,000 keys), however far it moved; without one, 1 GET (``_last_checkpoint``)
        more. Without a hint it falls back to :meth:`latest_version_by_list` when the HEAD proves
        nothing: no ``0.json`` and no ``_last_checkpoint`` (a cleaned-up or checkpoint-only log), or
        no commit after the hinted checkpoint (which may be missing or ahead of the files). A stale
        ``_last_checkpoint`` with commits after it is not detected: use :meth:`latest_version` for
        a cold start.

        Raises:
            TableNotFound: no log at all.
        """
        if hint is None:
            lc = self.read_last_checkpoint()
            v = int(lc["version"]) if lc else -1
        else:
            v = hint
        try:
            self.store.head(self.commit_key(v + 1))
        except NotFound:
            return self.latest_version_by_list() if hint is None else v
        return self.list_log(v + 1).contiguous_from(v + 1)

    def _listing(self, lc: Optional[dict[str, Any]], version: Optional[int] = None) -> LogListing:
        """LIST from the checkpoint ``_last_checkpoint`` names (if not after ``version``), or the whole
        log when there is no such hint or the hinted checkpoint is not there."""
        lc_version = int(lc["version"]) if lc else None
        if lc_version is not None and (version is None or lc_version <= version):
            listing = self.list_log(lc_version)
            if listing.has_checkpoint(lc_version):
                return listing
        return self.list_log(None)

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, version: Optional[int] = None, *, method: str = "list", check: bool = True) -> Snapshot:
        """The table at ``version`` (latest if None): last checkpoint, then the JSON commits after it.

        ``method="list"`` (cost, latest version, ``k`` commits after the checkpoint):
        1 GET ``_last_checkpoint`` + 1 LIST + ``parts`` GETs (checkpoint, if any) + ``k`` GETs.
        ``method="probe"`` starts from the checkpoint ``_last_checkpoint`` names: 1 GET
        ``_last_checkpoint`` + ``parts`` GETs + a GET of the first commit after it; when that exists,
        1 LIST from it finds the latest and the other ``k - 1`` commits are read (no final GET
        finding a commit missing). With an explicit ``version``, the probe path reads exactly up to
        it, no LIST; if ``version`` is older than the last checkpoint it replays from version 0 (use
        ``method="list"`` to find an older checkpoint). Commits are always read with up to
        :data:`MAX_PARALLEL_GETS` GETs in flight: a cold read of ``k`` commits costs about
        ``k / MAX_PARALLEL_GETS`` round trips, not ``k``.

        Raises:
            TableNotFound: the table has no log.
            VersionNotFound: ``version`` does not exist (yet, or any more).
            UnsupportedFeature: ``check`` and the table needs a reader feature we lack.
            DeltaLogError: the log is inconsistent (gaps, malformed files).
        """
        if method == "list":
            snap = self._snapshot_by_list(version)
        elif method == "probe":
            snap = self._snapshot_by_probe(version)
        else:
            raise ValueError(f"method must be 'list' or 'probe', not {method!r}")
        if check:
            check_readable(snap.protocol, snap.metadata, table=self.table)
        return snap

    def update(self, snapshot: Snapshot, version: Optional[int] = None) -> Snapshot:
        """Advance ``snapshot`` by reading the commits after it (probe style).

        Cost: ``k`` GETs for ``k`` new commits; with ``version`` None 1 GET when there is none, and
        1 LIST (finding the latest) when there are some.
        """
        commits = self._read_from(snapshot.version + 1, version)
        if version is not None and snapshot.version + len(commits) < version:
            raise VersionNotFound(self.table, version)
        return replay(snapshot, commits, table=self.table) if commits else snapshot

    def _not_found(self) -> TableNotFound:
        return TableNotFound(f"table {self.table!r} does not exist (no Delta log under {self.prefix})")

    def _read_from(self, first: int, last: Optional[int]) -> list[tuple[int, list[Action]]]:
        """The commits ``first .. last`` (``last`` None: up to the latest), the GETs in parallel.

        With ``last``: 1 GET of ``last`` (missing: VersionNotFound at once), then the others in
        parallel. Without: 1 GET of ``first`` (missing: nothing new), 1 LIST from it finding the
        latest, then the commits in between in parallel.
        """
        if last is None:
            try:
                head = self.read_commit(first)[0]
            except VersionNotFound:
                return []
            last = self.list_log(first).contiguous_from(first)
            return [(first, head), *self.read_commits(range(first + 1, last + 1))]
        if last < first:
            return []
        tail = self.read_commit(last)[0]
        return [*self.read_commits(range(first, last)), (last, tail)]

    def read_commits(self, versions: range) -> list[tuple[int, list[Action]]]:
        """GET the commits ``versions`` with up to :data:`MAX_PARALLEL_GETS` in flight, in order.

        Raises:
            VersionNotFound: the lowest missing version (the other GETs are abandoned).
        """
        got = concurrency.gather(concurrency.Pool.REQUESTS, lambda v: self.read_commit(v)[0], versions,
                                 limit=MAX_PARALLEL_GETS)
        return list(zip(versions, got, strict=True))

    def _from_checkpoint(self, version: int, names: list[str]) -> Optional[Snapshot]:
        """The snapshot a checkpoint holds (None if a file of it, or a sidecar, is missing)."""
        try:
            actions = self.read_checkpoint_files(names)
        except NotFound:
            return None
        return replay(None, [(version, actions)], table=self.table).with_checkpoint_version(version)

    def _snapshot_by_probe(self, version: Optional[int]) -> Snapshot:
        """Checkpoint named by ``_last_checkpoint``, then GETs of the commits after it. Falls back to
        :meth:`_snapshot_by_list` whenever that cannot prove its answer: the hinted checkpoint is
        missing, no ``0.json`` without a checkpoint, or a commit below ``version`` is missing."""
        lc = self.read_last_checkpoint()
        hinted = self.hinted_checkpoint(lc)
        base: Optional[Snapshot] = None
        if hinted is not None and (version is None or hinted[0] <= version):
            base = self._from_checkpoint(*hinted)
            if base is None:
                return self._snapshot_by_list(version, lc)
        first = base.version + 1 if base else 0
        try:
            commits = self._read_from(first, version)
        except VersionNotFound:
            return self._snapshot_by_list(version, lc)
        if base is None and not commits:
            return self._snapshot_by_list(version, lc)
        return replay(base, commits, table=self.table) if commits else base  # type: ignore[return-value]

    def _snapshot_by_list(self, version: Optional[int], lc: Any = False) -> Snapshot:
        """Newest complete checkpoint at or below the target found by LIST, then the commits after it.

        ``lc``: the ``_last_checkpoint`` content already read (False: read it now)."""
        if lc is False:
            lc = self.read_last_checkpoint()
        listing = self._listing(lc, version)
        latest = listing.latest
        if latest is None:
            raise self._not_found()
        target = latest if version is None else version
        if target > latest:
            raise VersionNotFound(self.table, target, latest=latest)
        cp = listing.best_checkpoint(target)
        needed = range((cp if cp is not None else -1) + 1, target + 1)
        missing = [v for v in needed if v not in listing.commits]
        if missing:
            earliest = min(listing.commits | set(listing.checkpoints) | set(listing.v2_checkpoints))
            if version is not None and cp is None and missing[-1] < earliest:
                raise VersionNotFound(self.table, version, "its commits were cleaned up")
            raise _missing(self.table, missing)
        base = None
        if cp is not None:
            base = self._from_checkpoint(cp, listing.checkpoint_files(cp))
            if base is None:
                raise DeltaLogError(f"table {self.table!r}: checkpoint {cp} (or a sidecar of it) vanished while "
                                    "reading")
        commits = self.read_commits(needed)
        return replay(base, commits, table=self.table) if commits else base  # type: ignore[return-value]
