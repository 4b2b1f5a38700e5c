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

from lv_core.delta.actions import Action, decode_commit
from lv_core.delta.checkpoint import checkpoint_names, decode_checkpoint, parse_checkpoint_name
from lv_core.delta.errors import VersionNotFound
from lv_core.delta.features import check_readable
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.errors import DeltaLogError, NotFound, TableNotFound
from lv_core.storage.base import ObjectStore

__all__ = ["DeltaLog", "LogListing"]

_COMMIT = re.compile(r"^(\d{20})\.json$")


@dataclass
class LogListing:
    """What one LIST of ``_delta_log/`` found: commit versions and complete classic checkpoints."""

    commits: set[int] = field(default_factory=set)
    checkpoints: dict[int, int] = field(default_factory=dict)  # version -> parts (complete ones only)

    @property
    def latest(self) -> Optional[int]:
        vs = self.commits | set(self.checkpoints)
        return max(vs) if vs else None

    def best_checkpoint(self, at_most: int) -> Optional[int]:
        vs = [v for v in self.checkpoints if v <= at_most]
        return max(vs) if vs else None


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
        """GET and decode every part of the classic checkpoint at ``version``.

        Raises:
            NotFound: a part is missing.
        """
        actions: list[Action] = []
        for name in checkpoint_names(version, parts):
            data = self.store.get(self.prefix + name).data
            actions.extend(decode_checkpoint(data, name=f"{self.table}/{name}"))
        return actions

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
        for (v, n), seen in parts_seen.items():
            if len(seen) == n and (v not in out.checkpoints or n < out.checkpoints[v]):
                out.checkpoints[v] = n
        return out

    # ------------------------------------------------------------------ latest version
    def latest_version_by_list(self) -> int:
        """Latest version via ``_last_checkpoint`` + one LIST from that checkpoint on.

        Cost: 1 GET (``_last_checkpoint``, found or not) + 1 LIST.

        Raises:
            TableNotFound: no log at all.
        """
        lc = self.read_last_checkpoint()
        listing = self.list_log(int(lc["version"]) if lc else None)
        latest = listing.latest
        if latest is None:
            if lc is not None:
                return int(lc["version"])
            raise self._not_found()
        return latest

    def latest_version_by_probe(self, hint: Optional[int] = None) -> int:
        """Latest version without LIST: HEAD ``v+1``, ``v+2``, ... until one is missing.

        ``v`` is ``hint`` (a version known to exist) or else the ``_last_checkpoint`` version.
        Cost: with a hint, ``d + 1`` HEADs where ``d`` is how far the log moved past the hint;
        without one, 1 GET (``_last_checkpoint``) + ``d + 1`` HEADs (``d`` counted from the
        checkpoint, or from -1 when there is none).

        Raises:
            TableNotFound: no hint, no checkpoint and no version 0.
        """
        if hint is None:
            lc = self.read_last_checkpoint()
            v = int(lc["version"]) if lc else -1
        else:
            v = hint
        while True:
            try:
                self.store.head(self.commit_key(v + 1))
            except NotFound:
                break
            v += 1
        if v < 0:
            raise self._not_found()
        return v

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, version: Optional[int] = None, *, method: str = "list", check: bool = True) -> Snapshot:
        """The table at ``version`` (latest if None): last checkpoint, then the JSON commits after it.

        ``method="list"`` (cost, latest version, ``k`` commits after the checkpoint):
        1 GET ``_last_checkpoint`` + 1 LIST + ``parts`` GETs (checkpoint, if any) + ``k`` GETs.
        ``method="probe"`` never lists: 1 GET ``_last_checkpoint`` + ``parts`` GETs + ``k`` GETs of
        the commits + 1 GET that finds the next commit missing (a GET rather than a HEAD, because
        the commit has to be read anyway). With an explicit ``version``, the probe path reads up to
        it and stops (no final GET); if ``version`` is older than the last checkpoint it replays
        from version 0 (use ``method="list"`` to find an older checkpoint).

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
        """Advance ``snapshot`` by reading the commits after it (probe style, no LIST).

        Cost: ``k`` GETs for ``k`` new commits, plus 1 GET finding the next one missing when
        ``version`` is None.
        """
        commits = self._read_from(snapshot.version + 1, version)
        if version is not None and snapshot.version + len(commits) < version:
            raise VersionNotFound(self.table, version)
        return replay(snapshot, commits, table=self.table) if commits else snapshot

    def _not_found(self) -> TableNotFound:
        return TableNotFound(f"table {self.table!r} does not exist (no Delta log under {self.prefix})")

    def _read_from(self, first: int, last: Optional[int]) -> list[tuple[int, list[Action]]]:
        """GET commits ``first, first+1, ...`` up to ``last`` (or until one is missing)."""
        out: list[tuple[int, list[Action]]] = []
        v = first
        while last is None or v <= last:
            try:
                actions, _etag = self.read_commit(v)
            except VersionNotFound:
                if last is not None:
                    raise
                break
            out.append((v, actions))
            v += 1
        return out

    def _from_checkpoint(self, version: int, parts: int) -> Optional[Snapshot]:
        try:
            actions = self.read_checkpoint(version, parts)
        except NotFound:
            return None
        return replay(None, [(version, actions)], table=self.table).with_checkpoint_version(version)

    def _snapshot_by_probe(self, version: Optional[int]) -> Snapshot:
        lc = self.read_last_checkpoint()
        base: Optional[Snapshot] = None
        if lc is not None and (version is None or int(lc["version"]) <= version):
            base = self._from_checkpoint(int(lc["version"]), int(lc.get("parts") or 1))
        first = base.version + 1 if base else 0
        try:
            commits = self._read_from(first, version)
        except VersionNotFound as e:
            if base is None and e.version == 0:
                if version is not None and lc is not None:
                    raise VersionNotFound(self.table, version, "its commits were cleaned up; "
                                          "try method='list' to use an older checkpoint") from None
                raise self._not_found() from None
            raise VersionNotFound(self.table, version if version is not None else e.version) from None
        if base is None and not commits:
            raise self._not_found()
        return replay(base, commits, table=self.table) if commits else base  # type: ignore[return-value]

    def _snapshot_by_list(self, version: Optional[int]) -> Snapshot:
        lc = self.read_last_checkpoint()
        lc_version = int(lc["version"]) if lc else None
        partial = lc_version is not None and (version is None or lc_version <= version)
        listing = self.list_log(lc_version if partial else None)
        if partial and lc_version not in listing.checkpoints:
            partial = False  # the hinted checkpoint is gone or incomplete: look at the whole log
            listing = self.list_log(None)
        latest = listing.latest
        if latest is None:
            raise self._not_found()
        target = latest if version is None else version
        if target > latest:
            raise VersionNotFound(self.table, target, f"the latest version is {latest}")
        cp = listing.best_checkpoint(target)
        needed = range((cp if cp is not None else -1) + 1, target + 1)
        missing = [v for v in needed if v not in listing.commits]
        if missing:
            if version is not None and (cp is None and min(listing.commits, default=0) > 0):
                raise VersionNotFound(self.table, version, "its commits were cleaned up")
            raise DeltaLogError(f"table {self.table!r}: commit files missing for versions "
                                f"{missing[:5]}{'...' if len(missing) > 5 else ''}")
        base = None
        if cp is not None:
            base = self._from_checkpoint(cp, listing.checkpoints[cp])
            if base is None:
                raise DeltaLogError(f"table {self.table!r}: checkpoint {cp} vanished while reading")
        commits = [(v, self.read_commit(v)[0]) for v in needed]
        return replay(base, commits, table=self.table) if commits else base  # type: ignore[return-value]
