"""Write, then read back after a lost response: the one place that decides what a failed write did.

A write request can fail after the store applied it (the response got lost: a timeout, a reset
connection, a 5xx after the fact). Its outcome is then unknown, and the only way to learn it is to
read the object back. A refused condition (:class:`~lv_core.errors.PreconditionFailed`,
:class:`~lv_core.errors.AlreadyExists`) is not such an error: it is the store's answer, and is raised
as it is. When the read fails as well, nothing was learnt and the write's own error is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from lv_core.errors import AlreadyExists, LvError, NotFound, PreconditionFailed
from lv_core.storage.base import OVERWRITE, ObjectStore, PutMode

__all__ = ["Unanswered", "etag_if_holds", "put_or_confirm", "write_or_read_back"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Unanswered(Generic[R]):
    """A write whose outcome was unknown: its ``error``, and what was ``found`` when read back."""

    error: LvError
    found: R


def write_or_read_back(write: Callable[[], T], read_back: Callable[[], R]) -> T | Unanswered[R]:
    """``write()``'s result; after an error whose outcome is unknown, what ``read_back()`` finds
    (the caller judges whether its write landed).

    Raises:
        PreconditionFailed, AlreadyExists: the store refused the write's condition.
        LvError: the write's error, when reading back failed too.
    """
    try:
        return write()
    except (PreconditionFailed, AlreadyExists):
        raise
    except LvError as e:
        try:
            return Unanswered(e, read_back())
        except LvError:
            raise e from None


def etag_if_holds(store: ObjectStore, key: str, data: bytes) -> str | None:
    """The object's etag when it holds exactly ``data`` (our write landed), else None (1 GET)."""
    try:
        got = store.get(key)
    except NotFound:
        return None
    return got.etag if got.data == data else None


def put_or_confirm(store: ObjectStore, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
    """PUT ``data``; after a lost response, GET it back: our bytes there mean written. Returns the
    etag of our bytes. Cost: 1 PUT (+ 1 GET after an error whose outcome is unknown).

    Raises:
        PreconditionFailed, AlreadyExists: the store refused ``mode``'s condition.
        LvError: the write's error, when our bytes are not there (or could not be read).
    """
    got = write_or_read_back(lambda: store.put(key, data, mode=mode), lambda: etag_if_holds(store, key, data))
    if not isinstance(got, Unanswered):
        return got
    if got.found is None:
        raise got.error
    return got.found
