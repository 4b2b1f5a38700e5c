"""Data file paths (issue 17 item 1): a remove repeats its add's log string byte for byte, checkpoints keep
it, replay matches by the decoded path, and what we write is encoded as Delta on Spark encodes it."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lv_core.delta import (
    AddFile,
    DeltaLog,
    Metadata,
    Protocol,
    RemoveFile,
    commit,
    create_table,
    replay,
)
from lv_core.delta.actions import decode_commit, decode_path, encode_commit, encode_path
from lv_core.delta.checkpoint import decode_checkpoint, encode_checkpoint
from lv_core.delta.paths import escape_partition_name
from lv_core.delta.stats import partition_path
from lv_core.delta.writer import write_data_files
from lv_core.engine.arrow_io import read_data_files
from lv_core.storage.local import LocalStore

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]})

# (value, folder, log path) as Spark 4 / Hadoop write them: ExternalCatalogUtils.escapePathName for the
# folder, new Path(folder, "part-0.parquet").toUri.toString for the log path (run with this project's
# pyspark jars).
SPARK = [
    ("bar+%21", "p=bar+%2521", "p=bar+%252521/part-0.parquet"),
    ("a+b", "p=a+b", "p=a+b/part-0.parquet"),
    ("50%", "p=50%25", "p=50%2525/part-0.parquet"),
    ("x!y", "p=x!y", "p=x!y/part-0.parquet"),
    ("c:d", "p=c%3Ad", "p=c%253Ad/part-0.parquet"),
    ("(p)", "p=(p)", "p=(p)/part-0.parquet"),
    ("u@h", "p=u@h", "p=u@h/part-0.parquet"),
    ("a,b", "p=a,b", "p=a,b/part-0.parquet"),
    ("sp ace", "p=sp ace", "p=sp%20ace/part-0.parquet"),
    ("über", "p=über", "p=über/part-0.parquet"),
    ("s/l", "p=s%2Fl", "p=s%252Fl/part-0.parquet"),
    ("e=q", "p=e%3Dq", "p=e%253Dq/part-0.parquet"),
    ("q?x", "p=q%3Fx", "p=q%253Fx/part-0.parquet"),
    ("h#x", "p=h%23x", "p=h%2523x/part-0.parquet"),
    ("st*r", "p=st%2Ar", "p=st%252Ar/part-0.parquet"),
    ("ap's", "p=ap%27s", "p=ap%2527s/part-0.parquet"),
    ("br[0]", "p=br%5B0%5D", "p=br%255B0%255D/part-0.parquet"),
    ("cu{r}", "p=cu%7Br}", "p=cu%257Br%7D/part-0.parquet"),
    ("ca^t", "p=ca%5Et", "p=ca%255Et/part-0.parquet"),
    ("ba\\ck", "p=ba%5Cck", "p=ba%255Cck/part-0.parquet"),
    ('dq"x', "p=dq%22x", "p=dq%2522x/part-0.parquet"),
    ("semi;c", "p=semi;c", "p=semi;c/part-0.parquet"),
    ("tab\tx", "p=tab%09x", "p=tab%2509x/part-0.parquet"),
    ("bar+%252521", "p=bar+%25252521", "p=bar+%2525252521/part-0.parquet"),
    ("a~b", "p=a~b", "p=a~b/part-0.parquet"),
    ("a$b&c", "p=a$b&c", "p=a$b&c/part-0.parquet"),
    ("lt<gt>", "p=lt<gt>", "p=lt%3Cgt%3E/part-0.parquet"),
    ("pi|pe", "p=pi|pe", "p=pi%7Cpe/part-0.parquet"),
    ("back`tick", "p=back`tick", "p=back%60tick/part-0.parquet"),
    ("nb\u00a0sp", "p=nb\u00a0sp", "p=nb%C2%A0sp/part-0.parquet"),
    ("del\x7fx", "p=del%7Fx", "p=del%257Fx/part-0.parquet"),
    ("emoji\U0001F600", "p=emoji\U0001F600", "p=emoji\U0001F600/part-0.parquet"),
]


def spark_add(path: str, value: str | None) -> AddFile:
    """An add as Delta on Spark logs it, read through our decoder."""
    line = json.dumps({"add": {"path": path, "partitionValues": {"p": value}, "size": 1, "modificationTime": 1,
                               "dataChange": True, "stats": '{"numRecords":1}'}})
    (add,) = decode_commit(line.encode())
    assert isinstance(add, AddFile)
    return add


def log_path(action: AddFile | RemoveFile) -> str:
    return json.loads(encode_commit([action]))[action.KEY]["path"]


@pytest.mark.parametrize(("value", "folder", "path"), SPARK, ids=[s[2].split("/")[0] for s in SPARK])
def test_our_writes_use_spark_encoding(value: str, folder: str, path: str) -> None:
    assert partition_path(["p"], {"p": value}) == folder
    assert encode_path(f"{folder}/part-0.parquet") == path
    assert decode_path(path) == f"{folder}/part-0.parquet"


def test_hive_escaping_and_null_folders() -> None:
    assert escape_partition_name("".join(map(chr, range(1, 0x20)))) == "".join(f"%{c:02X}" for c in range(1, 0x20))
    assert escape_partition_name("+ !()@,;$&~}<>|`-_.ü") == "+ !()@,;$&~}<>|`-_.ü"
    null = "__HIVE_DEFAULT_PARTITION__"
    assert partition_path(["p", "q"], {"p": None, "q": ""}) == f"p={null}/q={null}"
    assert partition_path(["a:b"], {"a:b": "1"}) == "a%3Ab=1"


@pytest.mark.parametrize("path", [s[2] for s in SPARK] + [
    "p=bar%2B%252521/part-0.parquet",  # another tool's (equivalent) encoding: kept as it is too
    "p=%C3%BCber/x.parquet", "x%3Ay.parquet", "s3://bucket/t/p=a+b/x.parquet", "p=50%/x.parquet"])
def test_remove_repeats_the_add_string(path: str) -> None:
    add = spark_add(path, "v")
    assert add.path == decode_path(path) and add.raw_path == path
    rm = add.remove(5)
    assert log_path(add) == path and log_path(rm) == path
    # and a remove read from a log is written back with its own string too
    (again,) = decode_commit(encode_commit([rm]))
    assert isinstance(again, RemoveFile) and again.path == add.path and log_path(again) == path
    assert encode_commit(decode_commit(encode_commit([add, rm]))) == encode_commit([add, rm])


def test_raw_path_is_not_part_of_equality_and_goes_stale_safely() -> None:
    add = spark_add("p=a+b/f.parquet", "a+b")
    assert add == AddFile("p=a+b/f.parquet", {"p": "a+b"}, 1, 1, True, '{"numRecords":1}')
    moved = dataclasses.replace(add, path="p=c d/f.parquet")  # the string no longer names the path
    assert log_path(moved) == "p=c%20d/f.parquet"
    assert log_path(AddFile("p=a+b/g.parquet", {}, 1, 1).remove(1)) == "p=a+b/g.parquet"


def test_checkpoint_keeps_the_exact_strings() -> None:
    adds = [spark_add(path, value) for value, _folder, path in SPARK]
    gone = spark_add("p=bar+%252521/old.parquet", "bar+%21").remove(7)
    other = spark_add("p=bar%2B%252521/other.parquet", "bar+%21").remove(8)
    actions = [Protocol(1, 2), Metadata("id", SCHEMA, ("p",)), *adds, gone, other]
    back = [a for blob in encode_checkpoint(actions, parts=2) for a in decode_checkpoint(blob)]
    want = {log_path(a) for a in actions if isinstance(a, (AddFile, RemoveFile))}
    got = {log_path(a) for a in back if isinstance(a, (AddFile, RemoveFile))}
    assert got == want and "p=bar%2B%252521/other.parquet" in got


def test_replay_matches_add_and_remove_by_decoded_path() -> None:
    add = spark_add("p=a+b/f.parquet", "a+b")
    head = [Protocol(1, 2), Metadata("id", SCHEMA, ("p",)), add]
    # another tool encoded the same file differently: it still removes it
    (rm,) = decode_commit(b'{"remove":{"path":"p=a%2Bb/f.parquet","deletionTimestamp":3,"dataChange":true}}')
    snap = replay(None, [(0, head), (1, [rm])])
    assert snap.files == {} and list(snap.tombstones) == ["p=a+b/f.parquet"]
    assert log_path(snap.tombstones["p=a+b/f.parquet"]) == "p=a%2Bb/f.parquet"


def test_our_paths_agree_with_delta_rs(tmp_path: Path) -> None:
    """delta-rs escapes folders more than Spark, but logs them by the same URI rule as ours; where its
    folder escaping and Spark's agree, our folder is its folder."""
    values = [s[0] for s in SPARK if s[0] != "emoji\U0001F600"] + ["plain-1.x_y", None]
    write_deltalake(str(tmp_path / "t"), pa.table({"id": list(range(len(values))), "p": values}), partition_by=["p"])
    lines = [json.loads(x) for x in (tmp_path / "t/_delta_log/00000000000000000000.json").read_text().splitlines()]
    adds = [x["add"] for x in lines if "add" in x]
    assert len(adds) == len(values)
    for a in adds:
        assert encode_path(decode_path(a["path"])) == a["path"]  # same URI form for the same folder
        value = a["partitionValues"]["p"]
        if value in ("c:d", "s/l", "e=q", "50%", "q?x", "h#x", "plain-1.x_y", None):
            assert decode_path(a["path"]).split("/")[0] == partition_path(["p"], {"p": value})


def spark_layout_table(root: Path) -> list[dict]:
    """A table laid out and logged as Delta on Spark does (files written with pyarrow)."""
    rows = []
    adds = []
    for i, (value, folder, path) in enumerate(SPARK[:12]):
        (root / folder).mkdir(parents=True)
        pq.write_table(pa.table({"id": [i]}), root / folder / "part-0.parquet")
        adds.append({"add": {"path": path, "partitionValues": {"p": value},
                             "size": os.path.getsize(root / folder / "part-0.parquet"), "modificationTime": 1,
                             "dataChange": True}})
        rows.append({"id": i, "p": value})
    head = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}}, "schemaString": SCHEMA,
                          "partitionColumns": ["p"], "configuration": {}}}]
    (root / "_delta_log").mkdir()
    (root / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in head + adds))
    return rows


def test_removing_spark_files_is_seen_by_delta_rs(tmp_path: Path) -> None:
    rows = spark_layout_table(tmp_path / "t")
    dt_ = DeltaTable(str(tmp_path / "t"))
    assert sorted(dt_.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == rows
    store = LocalStore(tmp_path)
    snap = DeltaLog(store, "t").snapshot()
    assert sorted(f.path.split("/")[0] for f in snap.files.values()) == sorted(s[1] for s in SPARK[:12])
    commit(store, "t", 1, [f.remove() for f in snap.files.values()])
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().num_rows == 0
    assert DeltaLog(store, "t").snapshot().files == {}


def test_empty_partition_value_is_null_when_written_and_read(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT, p STRING", partition_by=["p"])
    adds = write_data_files(store, "t", snap, pa.table({"id": [1, 2], "p": ["", None]}))
    assert [a.partition_values for a in adds] == [{"p": None}] * 2
    assert all(a.path.startswith("p=__HIVE_DEFAULT_PARTITION__/") for a in adds)
    commit(store, "t", 1, adds)
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().column("p").to_pylist() == [None, None]
    # a log holding "" (as delta-rs writes it) reads as null
    legacy = [dataclasses.replace(a, partition_values={"p": ""}) for a in adds]
    got = read_data_files(store, "t", legacy, snap.schema, snap.partition_columns)
    assert got.column("p").to_pylist() == [None, None]
