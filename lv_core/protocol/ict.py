"""In-commit timestamps (the Delta ``inCommitTimestamp`` writer feature).

On a table with in-commit timestamps every commit starts with its ``commitInfo``, which carries
``inCommitTimestamp``: the larger of the time the writer attempted the commit and one millisecond
after the previous commit's in-commit timestamp (Delta protocol, "In-Commit Timestamps").

LakeVilla encodes a commit long before it knows which version holds it for good (a recoverer may
write it, a blind append may move), so the commit is encoded with the field present and ``null``
(:func:`commit_info_first`), and :func:`seal` fills it in just before the put-if-absent, from the
commitInfo's own ``timestamp`` and the previous version's in-commit timestamp. Sealing is a pure
function of the bytes and the version below, so the owner and a recoverer write identical bytes;
:func:`same_commit` compares bytes written with bytes planned.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from lv_core.delta.actions import Action, CommitInfo, encode_commit
from lv_core.delta.features import ict_enabled as enabled
from lv_core.errors import DeltaLogError, NotFound
from lv_core.protocol.layout import commit_key
from lv_core.storage.base import ObjectStore

FIELD = "inCommitTimestamp"


def commit_info_first(actions: list[Action], info: dict[str, Any], ict: bool) -> bytes:
    """Encode a commit: ``actions`` then the commitInfo; with ``ict``, the commitInfo first with an
    unsealed ``inCommitTimestamp`` (see :func:`seal`)."""
    return with_info(encode_commit(actions), info_lines([info], ict)[0], ict)


def info_lines(infos: list[dict[str, Any]], ict: bool) -> list[bytes]:
    """The commitInfo line of each of ``infos`` as :func:`commit_info_first` writes it (the commits of
    one transaction on many tables share them)."""
    return [encode_commit([CommitInfo({**info, FIELD: None} if ict else info)]) for info in infos]


def with_info(body: bytes, line: bytes, ict: bool) -> bytes:
    """The commit of the encoded actions ``body`` with the commitInfo ``line`` (:func:`info_lines`),
    as :func:`commit_info_first` makes it."""
    if not body:
        return line
    return line + b"\n" + body if ict else body + b"\n" + line


def stripped(info: Mapping[str, Any]) -> dict[str, Any]:
    """A commitInfo read back from the log without its in-commit timestamp (to encode it again for a
    table with or without one)."""
    return {k: v for k, v in info.items() if k != FIELD}


def _first(data: bytes) -> tuple[dict[str, Any] | None, bytes]:
    line, sep, rest = data.partition(b"\n")
    try:
        obj = json.loads(line)
    except ValueError:
        return None, rest
    ci = obj.get("commitInfo") if isinstance(obj, dict) else None
    return (ci if isinstance(ci, dict) and FIELD in ci else None), sep + rest


def _line(ci: dict[str, Any]) -> bytes:
    return json.dumps({"commitInfo": ci}, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def unsealed(data: bytes) -> bool:
    """The commit asks for an in-commit timestamp that is not filled in yet."""
    ci, _ = _first(data)
    return ci is not None and ci[FIELD] is None


def stamped(data: bytes) -> Optional[int]:
    """The in-commit timestamp of a commit's first line (None: none there)."""
    ci, _ = _first(data)
    value = ci.get(FIELD) if ci is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def previous(store: ObjectStore, table: str, version: int) -> Optional[int]:
    """The in-commit timestamp of ``version - 1`` (1 GET; None: it has none, or version is 0).

    Raises NotFound when that version is not in the log."""
    if version == 0:
        return None
    return stamped(store.get(commit_key(table, version - 1)).data)


def seal(store: ObjectStore, table: str, version: int, data: bytes, prev: Optional[int] = None,
         *, prev_known: bool = False) -> bytes:
    """The bytes to write at ``version``: ``data`` itself unless it asks for an in-commit timestamp;
    then max(its commitInfo ``timestamp``, previous + 1), reading the previous one (1 GET) unless
    ``prev_known``. Raises DeltaLogError when the version below is missing (a gap)."""
    if not data.startswith(b'{"commitInfo":'):  # (how LakeVilla encodes a commitInfo first: only then to seal)
        return data
    ci, rest = _first(data)
    if ci is None or ci[FIELD] is not None:
        return data
    if not prev_known:
        try:
            prev = previous(store, table, version)
        except NotFound:
            raise DeltaLogError(f"version {version - 1} of table {table!r} is not in the log; cannot stamp "
                                f"version {version}'s in-commit timestamp") from None
    ts = ci.get("timestamp")
    at = ts if isinstance(ts, int) and not isinstance(ts, bool) else 0
    return _line({**ci, FIELD: max(at, prev + 1 if prev is not None else 0)}) + rest


def same_commit(written: bytes, planned: bytes) -> bool:
    """``written`` (read back from the log) is ``planned`` once sealed."""
    if written == planned:
        return True
    ci, rest = _first(written)
    want, want_rest = _first(planned)
    if ci is None or want is None or ci[FIELD] is None or want[FIELD] is not None:
        return False
    return rest == want_rest and {**ci, FIELD: None} == want


__all__ = ["FIELD", "commit_info_first", "enabled", "info_lines", "previous", "same_commit", "seal", "stamped",
           "stripped", "unsealed", "with_info"]
