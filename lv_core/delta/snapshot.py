"""The state of a table at one version, and the pure log replay that builds it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Iterable, Mapping, Optional, Sequence

from lv_core.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile, Txn
from lv_core.delta.schema import DeltaSchema
from lv_core.errors import DeltaLogError

__all__ = ["Snapshot", "apply_actions", "replay"]

#: How many per-version commitInfos a snapshot keeps (the newest ones).
COMMIT_INFOS_KEPT = 1000

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class Snapshot:
    """A table at ``version``: protocol, metadata, live data files and app transaction ids.

    ``files`` maps the decoded data file path to its ``add``; ``tombstones`` maps paths removed
    (and not re-added) to their ``remove``. ``commit_infos`` holds the commitInfo of each JSON
    commit replayed (not of versions covered only by a checkpoint, which holds no commitInfo).
    """

    table: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: Mapping[str, AddFile] = field(default_factory=lambda: _EMPTY, repr=False)
    tombstones: Mapping[str, RemoveFile] = field(default_factory=lambda: _EMPTY, repr=False)
    txns: Mapping[str, Txn] = field(default_factory=lambda: _EMPTY, repr=False)
    commit_infos: Mapping[int, CommitInfo] = field(default_factory=lambda: _EMPTY, repr=False)
    checkpoint_version: Optional[int] = None

    @cached_property
    def schema(self) -> DeltaSchema:
        """The table schema parsed from ``metaData.schemaString``.

        Raises:
            DeltaLogError: the ``metaData`` of this version has no ``schemaString``.
        """
        if self.metadata.schema_string is None:
            raise DeltaLogError(f"table {self.table!r} has no schema at version {self.version} "
                                "(its metaData has no schemaString)")
        return DeltaSchema.from_json(self.metadata.schema_string)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(self.metadata.partition_columns)

    @property
    def configuration(self) -> Mapping[str, str]:
        return self.metadata.configuration

    @property
    def commit_info(self) -> Optional[CommitInfo]:
        """The commitInfo of the commit at ``version`` (None if only a checkpoint covered it)."""
        return self.commit_infos.get(self.version)

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def size_bytes(self) -> int:
        return sum(a.size for a in self.files.values())

    @property
    def num_records(self) -> Optional[int]:
        """Total rows from file stats, or None if any file lacks ``numRecords``."""
        total = 0
        for a in self.files.values():
            n = a.num_records
            if n is None:
                return None
            total += n
        return total

    def with_checkpoint_version(self, v: Optional[int]) -> "Snapshot":
        return dataclasses.replace(self, checkpoint_version=v)


def apply_actions(actions: Iterable[Action], files: dict[str, AddFile], tombstones: dict[str, RemoveFile],
                  metadata: Optional[Metadata], protocol: Optional[Protocol],
                  txns: Optional[dict[str, Txn]] = None) -> tuple[Optional[Metadata], Optional[Protocol]]:
    """Apply one commit's actions to mutable file/tombstone maps; returns the new (metadata, protocol).

    ``cdc`` (change data files), UnknownAction (domainMetadata, ...) and commitInfo change nothing here.
    Files are matched by their decoded path, so a ``remove`` another tool encoded differently
    (``a+b`` / ``a%2Bb``) still removes the file; each action keeps its own log string for writing back.

    Removes apply before adds: a version never adds and removes the same logical file (the spec's key
    is the path plus the deletion vector's id), so a ``remove(path, dv1)`` + ``add(path, dv2)`` pair that
    replaces a file's deletion vector keeps the new add whatever order the writer put them in.
    """
    actions = list(actions)
    for a in actions:
        if isinstance(a, RemoveFile):
            files.pop(a.path, None)
            tombstones[a.path] = a
    for a in actions:
        if isinstance(a, AddFile):
            files[a.path] = a
            tombstones.pop(a.path, None)
        elif isinstance(a, Metadata):
            metadata = a
        elif isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, Txn) and txns is not None:
            txns[a.app_id] = a
    return metadata, protocol


def replay(base: Optional[Snapshot], commits: Iterable[tuple[int, Sequence[Action]]], *,
           table: Optional[str] = None) -> Snapshot:
    """Apply commits (``(version, actions)``, ascending, contiguous) on top of ``base``.

    ``base=None`` starts from an empty table; then the first entry may be version 0 or the
    actions of a checkpoint at its version. The result is a new snapshot; ``base`` is unchanged.
    Empty commits (commitInfo only, e.g. LakeVilla markers) advance the version and change nothing.

    Raises:
        DeltaLogError: versions not contiguous, or no protocol/metaData by the end.
    """
    name = table if table is not None else (base.table if base else "")
    version = base.version if base else None
    protocol = base.protocol if base else None
    metadata = base.metadata if base else None
    files = dict(base.files) if base else {}
    tombstones = dict(base.tombstones) if base else {}
    txns = dict(base.txns) if base else {}
    infos = dict(base.commit_infos) if base else {}
    applied = False
    for v, actions in commits:
        if version is not None and v != version + 1:
            raise DeltaLogError(f"table {name!r}: log replay expected version {version + 1}, got {v} "
                                "(missing or out-of-order commit files)")
        version = v
        applied = True
        metadata, protocol = apply_actions(actions, files, tombstones, metadata, protocol, txns)
        for a in actions:
            if isinstance(a, CommitInfo):
                infos[v] = a
    if version is None:
        raise DeltaLogError(f"table {name!r}: nothing to replay")
    if not applied and base is not None:
        return base
    if protocol is None or metadata is None:
        missing = " and ".join(n for n, x in (("protocol", protocol), ("metaData", metadata)) if x is None)
        raise DeltaLogError(f"table {name!r}: no {missing} action up to version {version}")
    if len(infos) > COMMIT_INFOS_KEPT:
        infos = dict(sorted(infos.items())[-COMMIT_INFOS_KEPT:])
    return Snapshot(
        table=name,
        version=version,
        protocol=protocol,
        metadata=metadata,
        files=MappingProxyType(files),
        tombstones=MappingProxyType(tombstones),
        txns=MappingProxyType(txns),
        commit_infos=MappingProxyType(infos),
        checkpoint_version=base.checkpoint_version if base else None,
    )
