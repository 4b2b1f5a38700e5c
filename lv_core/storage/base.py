"""The object-store interface the whole protocol relies on.

Only the primitives the LakeVilla paper assumes: GET (optionally ranged), PUT in three
modes (overwrite, create = put-if-absent, if_match = compare-and-swap on an etag), HEAD,
DELETE and LIST by prefix; plus COPY, which the Spark engine uses to give the data files it
wrote their final names without moving the bytes through this client. Keys are
``/``-separated and relative to the warehouse root.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator, Union


@dataclass(frozen=True)
class IfMatch:
    """Put mode: overwrite only if the current object's etag equals ``etag``."""

    etag: str


#: ``"overwrite"`` (unconditional), ``"create"`` (put-if-absent) or :class:`IfMatch`.
PutMode = Union[str, IfMatch]
OVERWRITE = "overwrite"
CREATE = "create"


@dataclass(frozen=True)
class ObjectMeta:
    """What HEAD and LIST report about an object."""

    key: str
    size: int
    etag: str
    last_modified: float  # seconds since the epoch


@dataclass(frozen=True)
class GetResult:
    """Body and etag of a GET (the etag of the version whose bytes were returned)."""

    data: bytes
    etag: str


class ObjectStore(ABC):
    """A strongly consistent object store with conditional writes."""

    #: ``"file"`` or ``"s3"``; tells the engine how data files can be reached.
    scheme: str = ""

    @abstractmethod
    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        """Return the object's bytes (``byte_range`` = (start, end_exclusive)).

        Raises:
            NotFound: the key does not exist.
        """

    @abstractmethod
    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        """Write ``data`` at ``key`` atomically and return the new etag.

        Raises:
            AlreadyExists: ``mode == "create"`` and the key exists.
            PreconditionFailed: ``mode`` is :class:`IfMatch` and the etag differs or the key is gone.
        """

    @abstractmethod
    def head(self, key: str) -> ObjectMeta:
        """Return size and etag of the object.

        Raises:
            NotFound: the key does not exist.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete the key; deleting a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Yield the objects whose key starts with ``prefix``, in lexicographic key order.

        ``start_after`` skips keys ``<=`` it (S3 ``StartAfter``).
        """

    def copy(self, src: str, dst: str) -> str:
        """Copy the object at ``src`` to ``dst`` (replacing ``dst`` if it exists); return the new etag.

        Like an unconditional put of ``src``'s bytes at ``dst``. This default reads and writes the
        bytes through the client; stores that can copy on their side override it.

        Raises:
            NotFound: ``src`` does not exist.
        """
        return self.put(dst, self.get(src).data)

    @abstractmethod
    def url(self, key: str = "") -> str:
        """An absolute URL for ``key`` (``file:///...`` or ``s3://bucket/...``) for other readers."""

    def exists(self, key: str) -> bool:
        """True if the key exists (a HEAD). Never use this to decide a write: use put modes."""
        from lv_core.errors import NotFound

        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def storage_options_for_deltalake(self) -> dict[str, str]:
        """The ``storage_options`` a delta-rs reader/writer needs for :meth:`url` paths ({} for a folder)."""
        return {}

    def close(self) -> None:  # noqa: B027 - an optional hook: only stores holding connections override it
        """Release connections (no-op by default)."""
