"""A strongly consistent in-memory object store (the schedule explorer's backing store).

It implements every primitive of :class:`lv_core.storage.base.ObjectStore` with the semantics the
protocol relies on (put-if-absent, compare-and-swap on etags, LIST in key order with
``start_after``), atomically under one lock. Unlike a folder, a whole warehouse is copied in
microseconds (:meth:`MemStore.clone`), so the explorer sets up its tables once and starts every
schedule from a copy; :meth:`MemStore.dump` writes it to a folder for a plain Delta reader.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Iterator

from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed
from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode

__all__ = ["MemStore"]

_etags = itertools.count(1)  # process-wide: an etag never names two versions, even across clones


class MemStore(ObjectStore):
    """Objects in a dict: key -> (bytes, etag, last_modified)."""

    scheme = "mem"

    def __init__(self, objects: dict[str, tuple[bytes, str, float]] | None = None) -> None:
        self._objects: dict[str, tuple[bytes, str, float]] = dict(objects or {})
        self._lock = threading.Lock()

    def clone(self) -> MemStore:
        """An independent copy of every object (same etags: it is the same warehouse state)."""
        with self._lock:
            return MemStore(self._objects)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._objects)

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        with self._lock:
            got = self._objects.get(key)
        if got is None:
            raise NotFound(key)
        data, etag, _ = got
        return GetResult(data if byte_range is None else data[byte_range[0]:byte_range[1]], etag)

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        etag = f'"m{next(_etags)}"'
        with self._lock:
            current = self._objects.get(key)
            if mode == CREATE and current is not None:
                raise AlreadyExists(key)
            if isinstance(mode, IfMatch) and (current is None or current[1] != mode.etag):
                raise PreconditionFailed(key)
            if not (mode in (CREATE, OVERWRITE) or isinstance(mode, IfMatch)):
                raise ValueError(f"unknown put mode {mode!r}")
            self._objects[key] = (bytes(data), etag, time.time())
        return etag

    def head(self, key: str) -> ObjectMeta:
        with self._lock:
            got = self._objects.get(key)
        if got is None:
            raise NotFound(key)
        return ObjectMeta(key, len(got[0]), got[1], got[2])

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        with self._lock:  # one consistent listing, taken when the request is made
            found = [ObjectMeta(k, len(d), e, t) for k, (d, e, t) in self._objects.items()
                     if k.startswith(prefix) and (start_after is None or k > start_after)]
        return iter(sorted(found, key=lambda m: m.key))

    def copy(self, src: str, dst: str) -> str:
        with self._lock:
            got = self._objects.get(src)
            if got is None:
                raise NotFound(src)
            self._objects[dst] = got  # as on S3, the copy keeps the source's etag
        return got[1]

    def url(self, key: str = "") -> str:
        return f"mem:///{key}"

    def dump(self, root: Path) -> Path:
        """Write every object under the folder ``root`` (for readers that only know files); returns it."""
        with self._lock:
            objects = dict(self._objects)
        for key, (data, _, _) in objects.items():
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return root
