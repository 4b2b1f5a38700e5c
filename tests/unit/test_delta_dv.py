"""Deletion vectors: Z85, the RoaringBitmapArray format, DV files, descriptors, and the Arrow read path.

Fixed vectors are derived here from the format definitions (Delta protocol "Deletion Vector Format",
RoaringFormatSpec, ZeroMQ RFC 32), byte by byte with ``struct``; the table fixtures come from
:mod:`tests.helpers.dv_fixtures` and are checked against delta-rs first.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path

import numpy as np
import pytest

from lv_core.delta import DeltaLog
from lv_core.delta.actions import AddFile
from lv_core.delta.checkpoint import decode_checkpoint, encode_checkpoint
from lv_core.delta.dv import DeletionVector, deleted_rows, dv_file, live_records
from lv_core.delta.roaring import DV_MAGIC, BitmapError, decode_bitmap, encode_bitmap, z85_decode, z85_encode
from lv_core.engine.arrow_io import read_data_files
from lv_core.errors import LvError
from lv_core.storage.local import LocalStore
from tests.helpers import dv_fixtures as fx


# -- Z85 ------------------------------------------------------------------------------------------
def test_z85_vectors_from_the_definition() -> None:
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"  # RFC 32
    assert z85_encode(b"\0\0\0\0") == "00000"
    assert z85_encode(struct.pack(">I", 85)) == "00010"  # 85 = 1*85 + 0
    assert z85_encode(struct.pack(">I", 2 * 85**4 + 84)) == "2000#"  # digit 84 is the alphabet's last
    # the spec's relative-path example: prefix "ab" + the UUID d2c639aa-8816-431a-aaf6-d3fe2512ff61
    dv = DeletionVector.from_json({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
                                   "sizeInBytes": 40, "cardinality": 6})
    assert dv.relative_file() == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"


def test_z85_round_trip_and_bad_input() -> None:
    rnd = np.random.default_rng(7)
    for n in (0, 4, 16, 400):
        data = rnd.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert z85_decode(z85_encode(data)) == data
    u = uuid.uuid4()
    assert len(z85_encode(u.bytes)) == 20
    for bad in ("abc", "abcd~", "#####"):  # length, alphabet, value above 2**32 - 1
        with pytest.raises(BitmapError):
            z85_decode(bad)
    with pytest.raises(LvError):
        z85_encode(b"abc")


# -- the bitmap format ----------------------------------------------------------------------------
def _no_run_bitmap32(containers: list[tuple[int, bytes, int]]) -> bytes:
    """A 32-bit roaring bitmap without runs: cookie 12346, count, (key, card-1) pairs, offsets, bodies."""
    head = struct.pack("<II", 12346, len(containers))
    head += b"".join(struct.pack("<HH", k, card - 1) for k, _b, card in containers)
    pos = len(head) + 4 * len(containers)
    offs = b""
    for _k, body, _c in containers:
        offs += struct.pack("<I", pos)
        pos += len(body)
    return head + offs + b"".join(b for _k, b, _c in containers)


def test_array_container_bytes() -> None:
    rows = [3, 4, 7, 11, 18, 29]
    want = (struct.pack("<IQI", DV_MAGIC, 1, 0)
            + _no_run_bitmap32([(0, struct.pack("<6H", *rows), 6)]))
    assert encode_bitmap(rows) == want
    assert decode_bitmap(want).tolist() == rows


def test_buckets_and_containers_bytes() -> None:
    # values in two 16-bit containers of bucket 0 and one of bucket 1 (high 32 bits = 1)
    rows = [1, 65536 + 2, (1 << 32) + 5]
    want = (struct.pack("<IQ", DV_MAGIC, 2)
            + struct.pack("<I", 0) + _no_run_bitmap32([(0, struct.pack("<H", 1), 1), (1, struct.pack("<H", 2), 1)])
            + struct.pack("<I", 1) + _no_run_bitmap32([(0, struct.pack("<H", 5), 1)]))
    assert encode_bitmap(rows) == want
    assert decode_bitmap(want).tolist() == rows


def test_bitmap_container_bytes() -> None:
    rows = list(range(0, 10000, 2))  # 5000 values in one 64K block: more than 4096 -> a bitmap container
    body = bytes([0x55]) * 1250 + bytes(8192 - 1250)  # bits 0, 2, 4, ... of little-endian words
    want = struct.pack("<IQI", DV_MAGIC, 1, 0) + _no_run_bitmap32([(0, body, 5000)])
    assert encode_bitmap(rows) == want
    assert decode_bitmap(want).tolist() == rows


def test_run_container_bytes() -> None:
    # cookie 12347 | (1 container - 1) << 16, run bitset 0b1, (key 0, card-1 99), no offsets (< 4 containers),
    # then 1 run: start 10, length-1 99 -> rows 10..109
    bm32 = struct.pack("<HH", 12347, 0) + bytes([1]) + struct.pack("<HH", 0, 99) + struct.pack("<HHH", 1, 10, 99)
    data = struct.pack("<IQI", DV_MAGIC, 1, 0) + bm32
    assert decode_bitmap(data).tolist() == list(range(10, 110))
    assert encode_bitmap(range(10, 110), runs=True) == data


@pytest.mark.parametrize("runs", [False, True])
def test_bitmap_round_trip(runs: bool) -> None:
    rnd = np.random.default_rng(3)
    cases = [[], [0], list(range(70000)), sorted(set(rnd.integers(0, 1 << 20, 20000).tolist())),
             [5, (1 << 32) - 1, 1 << 32, (1 << 40) + 3, (1 << 62)], list(range(100, 5000)) + list(range(9000, 9100))]
    for rows in cases:
        assert decode_bitmap(encode_bitmap(rows, runs=runs)).tolist() == sorted(set(rows))


def test_bad_bitmaps_raise() -> None:
    good = encode_bitmap([1, 2, 3])
    bad = [struct.pack("<I", DV_MAGIC - 1) + good[4:],  # the legacy "native" magic
           good[:-2],  # truncated
           good + b"\0",  # trailing bytes
           struct.pack("<IQI", DV_MAGIC, 1, 1 << 31) + good[16:],  # bucket key with the top bit set
           struct.pack("<IQI", DV_MAGIC, 1, 0) + struct.pack("<II", 999, 0)]  # unknown cookie
    for data in bad:
        with pytest.raises(BitmapError):
            decode_bitmap(data)
    with pytest.raises(BitmapError):
        encode_bitmap([-1])


# -- descriptors and DV files ---------------------------------------------------------------------
def test_dv_file_layout() -> None:
    b1, b2 = encode_bitmap([1]), encode_bitmap([2, 3])
    data, offsets = dv_file([b1, b2])
    assert offsets == [1, 1 + 4 + len(b1) + 4]
    assert data == (b"\x01" + struct.pack(">I", len(b1)) + b1 + struct.pack(">I", zlib.crc32(b1))
                    + struct.pack(">I", len(b2)) + b2 + struct.pack(">I", zlib.crc32(b2)))


def _add(dv: dict) -> AddFile:
    return AddFile("f.parquet", {}, 1, 0, True, '{"numRecords": 10}', extra={"deletionVector": dv})


def test_deleted_rows_of_each_storage_type(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    root = tmp_path / "t"
    (u1, u2) = fx.file_dvs(root, [([0, 9], False), (range(3, 8), True)], prefix="xy")
    (p1,) = fx.file_dvs(root, [([4], False)], absolute=True)
    assert deleted_rows(store, "t", _add(fx.inline_dv([1, 3, 5]))).tolist() == [1, 3, 5]
    assert deleted_rows(store, "t", _add(u1)).tolist() == [0, 9]
    assert deleted_rows(store, "t", _add(u2)).tolist() == [3, 4, 5, 6, 7]
    assert deleted_rows(store, "t", _add(p1)).tolist() == [4]
    assert deleted_rows(store, "t", _add({**u1, "offset": None})).tolist() == [0, 9]  # absent: first DV
    assert deleted_rows(store, "t", AddFile("g.parquet", {}, 1, 0)) is None
    assert live_records(_add(u2)) == 5


def test_bad_descriptors_and_files_raise(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    root = tmp_path / "t"
    (u1,) = fx.file_dvs(root, [([0, 9], False)])
    bad = [{**u1, "storageType": "x"}, {**u1, "cardinality": 3}, {**u1, "sizeInBytes": u1["sizeInBytes"] + 1},
           {**u1, "pathOrInlineDv": "short"}, {**u1, "offset": -1}, {**u1, "sizeInBytes": "4"},
           {"storageType": "p", "pathOrInlineDv": "file:///elsewhere/dv.bin", "offset": 1, "sizeInBytes": 4,
            "cardinality": 1}]
    for dv in bad:
        with pytest.raises(LvError):
            deleted_rows(store, "t", _add(dv))
    path = next(root.glob("deletion_vector_*.bin"))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(BitmapError, match="checksum"):
        deleted_rows(store, "t", _add(u1))


def test_checkpoint_keeps_deletion_vectors() -> None:
    inline = fx.inline_dv([1, 2])
    u = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1, "sizeInBytes": 30,
         "cardinality": 2}
    adds = [AddFile("a.parquet", {}, 1, 0, True, None, extra={"deletionVector": inline}),
            AddFile("b.parquet", {}, 1, 0, True, None, extra={"deletionVector": u}), AddFile("c.parquet", {}, 1, 0)]
    back = decode_checkpoint(encode_checkpoint([*adds, adds[1].remove(5)])[0])
    assert [a.extra.get("deletionVector") for a in back] == [inline, u, None, u]


# -- the Arrow read path on a table proven by delta-rs ---------------------------------------------
def test_arrow_read_drops_deleted_rows_at_every_version(tmp_path: Path) -> None:
    root = tmp_path / "wh" / "t"
    want = fx.dv_history(root)
    store = LocalStore(tmp_path / "wh")
    log = DeltaLog(store, "t")
    for v, rows in enumerate(want):
        assert fx.delta_rs_rows(root, v) == rows  # the fixture is right (an independent reader)
        snap = log.snapshot(v)
        got = read_data_files(store, "t", snap.files.values(), snap.schema, snap.partition_columns)
        assert sorted(got.select(["id", "v", "p"]).to_pylist(), key=lambda r: r["id"]) == rows
    kinds = {a.extra["deletionVector"]["storageType"] for a in log.snapshot(3).files.values()
             if "deletionVector" in a.extra}
    assert kinds == {"u", "p"}
