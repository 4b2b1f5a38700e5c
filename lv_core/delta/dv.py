"""Deletion vectors of ``add``/``remove`` actions: descriptors, DV files, and the deleted row indexes.

A descriptor (``add.deletionVector``, Delta protocol "Deletion Vectors") names the rows of a data file
that are logically deleted. ``storageType``:

* ``i``: the bitmap is inline, Z85-encoded in ``pathOrInlineDv`` (``sizeInBytes`` = real byte length);
* ``u``: the bitmap lives in ``<table>/<prefix>/deletion_vector_<uuid>.bin`` where ``pathOrInlineDv`` is
  an optional random prefix followed by the Z85 text (20 characters) of the UUID's 16 bytes;
* ``p``: the bitmap lives in the file at the absolute URI ``pathOrInlineDv`` (same form as ``add.path``).

A DV file is a version byte (1), then per DV: its size (uint32 big-endian), the bitmap bytes and the
CRC-32 of the bitmap (uint32 big-endian); ``offset`` points at the size field of one DV.
Bitmap bytes are decoded by :mod:`lv_core.delta.roaring`.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import unquote, urlparse

import numpy as np

from lv_core.delta.actions import AddFile
from lv_core.delta.roaring import BitmapError, decode_bitmap, encode_bitmap, z85_decode, z85_encode
from lv_core.storage.base import ObjectStore

__all__ = ["DV_FILE_VERSION", "DeletionVector", "deleted_rows", "dv_file", "dv_of", "live_records"]

#: The format version byte at the start of a DV file.
DV_FILE_VERSION = 1
_UUID_Z85_LEN = 20


@dataclass(frozen=True)
class DeletionVector:
    """A parsed deletion vector descriptor (validated on construction by :meth:`from_json`)."""

    storage_type: str
    path_or_inline: str
    size_in_bytes: int
    cardinality: int
    offset: Optional[int] = None

    @classmethod
    def from_json(cls, body: Any, *, path: str = "?") -> "DeletionVector":
        """Parse ``add.deletionVector``.

        Raises:
            BitmapError: missing or ill-typed fields, an unknown ``storageType``.
        """
        where = f"deletion vector of {path!r}"
        if not isinstance(body, Mapping):
            raise BitmapError(f"{where} is not an object: {body!r}")
        st, pod = body.get("storageType"), body.get("pathOrInlineDv")
        size, card, off = body.get("sizeInBytes"), body.get("cardinality"), body.get("offset")
        if st not in ("i", "u", "p"):
            raise BitmapError(f"{where} has storageType {st!r}; expected 'i', 'u' or 'p'")
        if not isinstance(pod, str) or not pod:
            raise BitmapError(f"{where} has no pathOrInlineDv")
        for name, v in (("sizeInBytes", size), ("cardinality", card), ("offset", off)):
            if (v is not None or name != "offset") and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise BitmapError(f"{where} has an invalid {name} {v!r}")
        if st == "u" and len(pod) < _UUID_Z85_LEN:
            raise BitmapError(f"{where}: {pod!r} is too short for a Z85 UUID")
        return cls(st, pod, int(size or 0), int(card or 0), None if off is None else int(off))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline}
        if self.offset is not None:
            body["offset"] = self.offset
        body.update({"sizeInBytes": self.size_in_bytes, "cardinality": self.cardinality})
        return body

    @property
    def unique_id(self) -> str:
        """``<storageType><pathOrInlineDv>[@<offset>]`` (the spec's derived ``uniqueId``)."""
        base = self.storage_type + self.path_or_inline
        return base if self.offset is None else f"{base}@{self.offset}"

    @classmethod
    def inline(cls, rows: Any, *, runs: bool = False) -> "DeletionVector":
        """An inline descriptor holding ``rows`` (for fixtures and tests)."""
        data = encode_bitmap(rows, runs=runs)
        padded = data + b"\0" * (-len(data) % 4)
        return cls("i", z85_encode(padded), len(data), len(decode_bitmap(data)))

    def relative_file(self) -> str:
        """For ``u``: the DV file's path relative to the table folder."""
        prefix, code = self.path_or_inline[:-_UUID_Z85_LEN], self.path_or_inline[-_UUID_Z85_LEN:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(code))}.bin"
        return f"{prefix}/{name}" if prefix else name


def dv_of(add: AddFile) -> Optional[DeletionVector]:
    """The deletion vector of an ``add`` (None if it has none)."""
    body = add.extra.get("deletionVector")
    return None if body is None else DeletionVector.from_json(body, path=add.path)


def live_records(add: AddFile) -> Optional[int]:
    """Rows of the file a reader sees: ``numRecords`` minus the deletion vector's cardinality."""
    n = add.num_records
    if n is None:
        return None
    dv = add.extra.get("deletionVector")
    card = dv.get("cardinality") if isinstance(dv, Mapping) else None
    return n - card if isinstance(card, int) else n


def dv_file(bitmaps: list[bytes]) -> tuple[bytes, list[int]]:
    """The bytes of a DV file holding ``bitmaps`` and the offset of each (for fixtures and tests)."""
    out = bytearray([DV_FILE_VERSION])
    offsets = []
    for b in bitmaps:
        offsets.append(len(out))
        out += struct.pack(">I", len(b)) + b + struct.pack(">I", zlib.crc32(b))
    return bytes(out), offsets


def _key_of_uri(store: ObjectStore, uri: str, where: str) -> str:
    """The store key of an absolute URI inside the warehouse."""
    def norm(u: str) -> tuple[str, str, str]:
        p = urlparse(u)
        scheme = "s3" if p.scheme in ("s3", "s3a", "s3n") else p.scheme
        return scheme, p.netloc if scheme != "file" else "", unquote(p.path).rstrip("/")

    s, n, path = norm(uri)
    rs, rn, root = norm(store.url())
    if (s, n) != (rs, rn) or not path.startswith(root + "/"):
        raise BitmapError(f"{where}: the DV file {uri!r} is outside the warehouse {store.url()!r}")
    return path[len(root) + 1:]


def _read_dv_file(store: ObjectStore, key: str, dv: DeletionVector, where: str) -> bytes:
    """The bitmap bytes of one DV in a DV file (checks the size field and the CRC)."""
    off = dv.offset or 0
    start = 0 if off <= 1 else off  # an absent offset means the file's first DV, right after the version byte
    raw = store.get(key, byte_range=(start, max(off, 1) + 8 + dv.size_in_bytes)).data
    if start == 0:
        if raw[:1] != bytes([DV_FILE_VERSION]):
            raise BitmapError(f"{where}: {key!r} is not a version-{DV_FILE_VERSION} deletion vector file")
        raw, off = raw[1:], 1
    if len(raw) != 8 + dv.size_in_bytes:
        raise BitmapError(f"{where}: {key!r} is truncated")
    (size,) = struct.unpack(">I", raw[:4])
    if size != dv.size_in_bytes:
        raise BitmapError(f"{where}: {key!r} holds {size} bytes at offset {off}, the descriptor says "
                          f"{dv.size_in_bytes}")
    data = raw[4:4 + size]
    (crc,) = struct.unpack(">I", raw[4 + size:])
    if zlib.crc32(data) != crc:
        raise BitmapError(f"{where}: checksum mismatch in {key!r} at offset {off}")
    return data


def deleted_rows(store: ObjectStore, table: str, add: AddFile) -> Optional[np.ndarray]:
    """The row indexes (sorted ``uint64``) the ``add``'s deletion vector deletes; None without one.

    Raises:
        BitmapError: a malformed descriptor, DV file or bitmap, or a cardinality that does not match.
        NotFound: the DV file is missing.
    """
    dv = dv_of(add)
    if dv is None:
        return None
    where = f"table {table!r}, deletion vector of {add.path!r}"
    if dv.storage_type == "i":
        data = z85_decode(dv.path_or_inline)
        if len(data) < dv.size_in_bytes:
            raise BitmapError(f"{where}: the inline bitmap is shorter than sizeInBytes")
        data = data[:dv.size_in_bytes]
    else:
        key = (f"{table}/{dv.relative_file()}" if dv.storage_type == "u"
               else _key_of_uri(store, dv.path_or_inline, where))
        data = _read_dv_file(store, key, dv, where)
    rows = decode_bitmap(data)
    if len(rows) != dv.cardinality:
        raise BitmapError(f"{where}: the bitmap holds {len(rows)} rows, the descriptor says {dv.cardinality}")
    return rows
