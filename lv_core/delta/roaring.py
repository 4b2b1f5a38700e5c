"""Byte codecs of Delta deletion vectors (pure): Z85 text and the ``RoaringBitmapArray`` bitmap format.

Written from the Delta protocol's "Deletion Vector Format" appendix and the portable RoaringBitmap
serialization ("RoaringFormatSpec"):

* Z85 (ZeroMQ RFC 32): every 4 bytes, read as a big-endian 32-bit number, become 5 characters of an
  85-letter alphabet, most significant digit first. Delta pads inline bitmaps with zero bytes to a
  multiple of 4 (``sizeInBytes`` gives the real length) and encodes UUIDs (16 bytes) as 20 characters.
* A deletion vector bitmap is the magic number 1681511377 (little-endian uint32) followed by a 64-bit
  roaring bitmap in the portable layout: ``numBuckets`` (uint64 LE), then per bucket in ascending key
  order its key (uint32 LE, the high 32 bits of its values; Delta requires the top bit 0) and a 32-bit
  roaring bitmap of the low 32 bits.
* A 32-bit roaring bitmap: a cookie, then per 16-bit container its key and cardinality - 1 (uint16
  LE pairs), optional offsets, then the containers: *array* (sorted uint16), *bitmap* (1024 uint64 LE
  words, 8192 bytes, used above 4096 values) or *run* (uint16 number of runs, then (start, length - 1)
  pairs). Cookie 12346 (uint32) + uint32 container count means no run containers and always offsets;
  cookie 12347 in the low 16 bits (count - 1 in the high 16 bits) is followed by a bitset marking run
  containers, and offsets only when there are at least 4 containers.

Decoded row indexes are returned as sorted ``numpy.uint64`` arrays (a deletion vector may name
millions of rows; they stay vectorised).
"""

from __future__ import annotations

import struct
from typing import Iterable, Union

import numpy as np

from lv_core.errors import DeltaLogError

__all__ = ["DV_MAGIC", "BitmapError", "decode_bitmap", "encode_bitmap", "z85_decode", "z85_encode"]

#: First 4 bytes (little-endian) of every Delta deletion vector bitmap.
DV_MAGIC = 1681511377

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}

_COOKIE_NO_RUNS = 12346
_COOKIE_RUNS = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096
_BITMAP_BYTES = 8192


class BitmapError(DeltaLogError):
    """Deletion vector bytes or text that do not follow the format."""


# -- Z85 ------------------------------------------------------------------------------------------
def z85_encode(data: bytes) -> str:
    """Z85 text of ``data`` (its length must be a multiple of 4)."""
    if len(data) % 4:
        raise BitmapError(f"Z85 encodes whole 4-byte groups; got {len(data)} bytes")
    out = []
    for (n,) in struct.iter_unpack(">I", data):
        digits = []
        for _ in range(5):
            n, r = divmod(n, 85)
            digits.append(_Z85[r])
        out.append("".join(reversed(digits)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    """The bytes of Z85 ``text`` (length a multiple of 5)."""
    if len(text) % 5:
        raise BitmapError(f"Z85 text has whole 5-character groups; got {len(text)} characters")
    out = bytearray()
    for i in range(0, len(text), 5):
        n = 0
        for c in text[i:i + 5]:
            d = _Z85_INDEX.get(c)
            if d is None:
                raise BitmapError(f"{c!r} is not a Z85 character")
            n = n * 85 + d
        if n > 0xFFFFFFFF:
            raise BitmapError(f"Z85 group {text[i:i + 5]!r} is out of range")
        out += struct.pack(">I", n)
    return bytes(out)


# -- 32-bit roaring -------------------------------------------------------------------------------
def _encode32(low: np.ndarray, runs: bool) -> bytes:
    """A 32-bit roaring bitmap of sorted distinct uint32 values."""
    keys = (low >> 16).astype(np.uint16)
    bounds = np.flatnonzero(np.diff(keys.astype(np.int64))) + 1 if len(low) else np.array([], np.int64)
    starts = np.concatenate([[0], bounds]).astype(np.int64) if len(low) else np.array([], np.int64)
    ends = np.concatenate([bounds, [len(low)]]).astype(np.int64) if len(low) else np.array([], np.int64)
    headers: list[tuple[int, int]] = []
    bodies: list[bytes] = []
    is_run: list[bool] = []
    for s, e in zip(starts, ends, strict=True):
        vals = (low[s:e] & 0xFFFF).astype(np.uint16)
        card = len(vals)
        if card <= _ARRAY_MAX:
            body, size = vals.astype("<u2").tobytes(), 2 * card
        else:
            bits = np.zeros(1 << 16, dtype=np.uint8)
            bits[vals] = 1
            body, size = np.packbits(bits, bitorder="little").tobytes(), _BITMAP_BYTES
        run = False
        if runs:
            gaps = np.flatnonzero(np.diff(vals.astype(np.int64)) != 1) + 1
            rs = np.concatenate([[0], gaps]).astype(np.int64)
            re_ = np.concatenate([gaps, [card]]).astype(np.int64)
            if 2 + 4 * len(rs) < size:
                pairs = np.empty(2 * len(rs), dtype="<u2")
                pairs[0::2] = vals[rs]
                pairs[1::2] = (re_ - rs - 1).astype(np.uint16)
                body, run = struct.pack("<H", len(rs)) + pairs.tobytes(), True
        headers.append((int(keys[s]), card - 1))
        bodies.append(body)
        is_run.append(run)
    n = len(headers)
    desc = b"".join(struct.pack("<HH", k, c) for k, c in headers)
    if any(is_run):
        flags = bytearray((n + 7) // 8)
        for i, r in enumerate(is_run):
            if r:
                flags[i // 8] |= 1 << (i % 8)
        head = struct.pack("<HH", _COOKIE_RUNS, n - 1) + bytes(flags) + desc
        with_offsets = n >= _NO_OFFSET_THRESHOLD
    else:
        head = struct.pack("<II", _COOKIE_NO_RUNS, n) + desc
        with_offsets = True
    if with_offsets:
        pos = len(head) + 4 * n
        offsets = []
        for b in bodies:
            offsets.append(struct.pack("<I", pos))
            pos += len(b)
        head += b"".join(offsets)
    return head + b"".join(bodies)


def _take(data: memoryview, pos: int, n: int) -> memoryview:
    if pos + n > len(data):
        raise BitmapError("deletion vector bitmap is truncated")
    return data[pos:pos + n]


def _decode32(data: memoryview, pos: int) -> tuple[list[np.ndarray], int]:
    """The values (uint32 arrays, one per container, ascending) of the 32-bit bitmap at ``pos``; end position."""
    (cookie,) = struct.unpack("<I", _take(data, pos, 4))
    pos += 4
    if cookie == _COOKIE_NO_RUNS:
        (n,) = struct.unpack("<I", _take(data, pos, 4))
        pos += 4
        run_flags = b""
        with_offsets = True
    elif cookie & 0xFFFF == _COOKIE_RUNS:
        n = (cookie >> 16) + 1
        run_flags = bytes(_take(data, pos, (n + 7) // 8))
        pos += (n + 7) // 8
        with_offsets = n >= _NO_OFFSET_THRESHOLD
    else:
        raise BitmapError(f"unknown roaring bitmap cookie {cookie}")
    desc = np.frombuffer(_take(data, pos, 4 * n), dtype="<u2").reshape(n, 2) if n else np.empty((0, 2), np.uint16)
    pos += 4 * n
    if with_offsets:
        pos += 4 * n  # containers follow in order; the offsets are not needed to read them all
    out: list[np.ndarray] = []
    prev_key = -1
    for i in range(n):
        key, card = int(desc[i, 0]), int(desc[i, 1]) + 1
        if key <= prev_key:
            raise BitmapError("roaring container keys are not ascending")
        prev_key = key
        if run_flags and run_flags[i // 8] >> (i % 8) & 1:
            (nruns,) = struct.unpack("<H", _take(data, pos, 2))
            pairs = np.frombuffer(_take(data, pos + 2, 4 * nruns), dtype="<u2").astype(np.int64).reshape(nruns, 2)
            pos += 2 + 4 * nruns
            if int((pairs[:, 1] + 1).sum()) != card or int((pairs[:, 0] + pairs[:, 1]).max(initial=0)) > 0xFFFF:
                raise BitmapError("roaring run container does not match its cardinality")
            vals = np.concatenate([np.arange(s, s + ln + 1, dtype=np.int64) for s, ln in pairs]) if nruns \
                else np.empty(0, np.int64)
        elif card <= _ARRAY_MAX:
            vals = np.frombuffer(_take(data, pos, 2 * card), dtype="<u2").astype(np.int64)
            pos += 2 * card
            if card > 1 and not (np.diff(vals) > 0).all():
                raise BitmapError("roaring array container is not sorted")
        else:
            bits = np.unpackbits(np.frombuffer(_take(data, pos, _BITMAP_BYTES), dtype=np.uint8), bitorder="little")
            pos += _BITMAP_BYTES
            vals = np.flatnonzero(bits).astype(np.int64)
            if len(vals) != card:
                raise BitmapError("roaring bitmap container does not match its cardinality")
        out.append((vals + (key << 16)).astype(np.uint64))
    return out, pos


# -- Delta's 64-bit RoaringBitmapArray ------------------------------------------------------------
def encode_bitmap(values: Union[Iterable[int], np.ndarray], *, runs: bool = False) -> bytes:
    """Serialize row indexes as a Delta deletion vector bitmap (magic + portable 64-bit roaring).

    ``runs``: use run containers where they are smaller (else array/bitmap containers only).
    """
    arr = np.unique(np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int64))
    if len(arr) and (arr[0] < 0 or arr[-1] >= 1 << 63):
        raise BitmapError("row indexes must be between 0 and 2**63 - 1")
    arr = arr.astype(np.uint64)
    high = (arr >> np.uint64(32)).astype(np.int64)
    out = [struct.pack("<I", DV_MAGIC)]
    buckets = np.unique(high)
    out.append(struct.pack("<Q", len(buckets)))
    for key in buckets:
        low = (arr[high == key] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out.append(struct.pack("<I", int(key)) + _encode32(low, runs))
    return b"".join(out)


def decode_bitmap(data: bytes) -> np.ndarray:
    """Row indexes (sorted ``uint64``) of a Delta deletion vector bitmap.

    Raises:
        BitmapError: wrong magic number, truncated or malformed bytes, trailing bytes.
    """
    view = memoryview(data)
    (magic,) = struct.unpack("<I", _take(view, 0, 4))
    if magic != DV_MAGIC:
        raise BitmapError(f"not a deletion vector bitmap (magic number {magic}, expected {DV_MAGIC})")
    (nb,) = struct.unpack("<Q", _take(view, 4, 8))
    pos = 12
    parts: list[np.ndarray] = []
    prev = -1
    for _ in range(nb):
        (key,) = struct.unpack("<I", _take(view, pos, 4))
        if key <= prev or key >> 31:
            raise BitmapError("deletion vector bucket keys must be ascending and below 2**31")
        prev = key
        containers, pos = _decode32(view, pos + 4)
        parts.extend(c + np.uint64(key << 32) for c in containers)
    if pos != len(view):
        raise BitmapError(f"deletion vector bitmap has {len(view) - pos} trailing bytes")
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
