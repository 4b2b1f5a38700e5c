"""Errors specific to the Delta log layer (all derive from :class:`lv_core.errors.DeltaLogError`)."""

from __future__ import annotations

from lv_core.errors import DeltaLogError, NotFound


class VersionConflict(DeltaLogError):
    """Another writer already created the commit file for this version (put-if-absent lost).

    Attributes:
        table: the table name.
        version: the version that was taken.
    """

    def __init__(self, table: str, version: int) -> None:
        super().__init__(
            f"version {version} of table {table!r} was committed by someone else first. "
            "Help: reload the table's latest snapshot and retry at a later version."
        )
        self.table = table
        self.version = version


class CommitChanged(DeltaLogError):
    """A conditional overwrite of a commit failed: the commit changed (or vanished) since it was read.

    Attributes:
        table: the table name.
        version: the commit's version.
    """

    def __init__(self, table: str, version: int) -> None:
        super().__init__(
            f"commit {version} of table {table!r} changed since it was read (conditional overwrite refused). "
            "Help: read the commit again and decide from its current content."
        )
        self.table = table
        self.version = version


class VersionNotFound(DeltaLogError, NotFound):
    """The requested version of a table's log does not exist (also a storage :class:`NotFound`).

    Attributes:
        latest: the log's latest version when the raiser knew it (None: not known), so that a caller can
            tell a version the log never held (``version > latest``) from one cleaned up without a request.
    """

    def __init__(self, table: str, version: int, detail: str = "", *, latest: int | None = None) -> None:
        msg = f"table {table!r} has no version {version}"
        if latest is not None and not detail:
            detail = f"the latest version is {latest}"
        super().__init__(msg + (f": {detail}" if detail else ""))
        self.table = table
        self.version = version
        self.latest = latest
