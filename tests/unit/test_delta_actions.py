"""Delta actions: JSON round trips, path encoding, verbatim preservation, malformed commits."""

from __future__ import annotations

import json

import pytest

from lv_core.delta.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
    UnknownAction,
    action_from_json,
    decode_commit,
    decode_path,
    encode_commit,
    encode_path,
    is_empty_commit,
    json_lines,
)
from lv_core.errors import DeltaLogError

# A commit as delta-rs 1.6 writes it (trimmed), with a partition value needing escapes.
DELTA_RS_COMMIT = (
    '{"commitInfo":{"timestamp":1,"operation":"WRITE","operationParameters":{"mode":"Append"},'
    '"engineInfo":"delta-rs:py-1.6.6","operationMetrics":{"num_added_files":1}}}\n'
    '{"add":{"path":"p=c%252Fd/part-1.snappy.parquet","partitionValues":{"p":"c/d"},"size":1111,'
    '"modificationTime":2,"dataChange":true,"stats":"{\\"numRecords\\":1}","tags":null,"baseRowId":null,'
    '"defaultRowCommitVersion":null,"clusteringProvider":null}}'
).encode()


def test_decode_delta_rs_commit_decodes_paths() -> None:
    ci, add = decode_commit(DELTA_RS_COMMIT, version=3)
    assert isinstance(ci, CommitInfo) and ci.operation == "WRITE"
    assert ci.get("operationMetrics") == {"num_added_files": 1}
    assert isinstance(add, AddFile)
    assert add.path == "p=c%2Fd/part-1.snappy.parquet"  # the folder is literally named p=c%2Fd
    assert add.partition_values == {"p": "c/d"}
    assert add.size == 1111 and add.num_records == 1
    assert add.extra == {}  # null extras dropped


def test_encode_path_matches_delta_rs() -> None:
    assert encode_path("p=c%2Fd/part-1.snappy.parquet") == "p=c%252Fd/part-1.snappy.parquet"
    assert encode_path("p=a%20b/x.parquet") == "p=a%2520b/x.parquet"
    assert encode_path("plain/part-0.parquet") == "plain/part-0.parquet"
    assert encode_path("a b/ü.parquet") == "a%20b/ü.parquet"  # java.net.URI keeps non-ASCII letters
    assert encode_path("s3://bucket/t/a b.parquet") == "s3://bucket/t/a%20b.parquet"
    for p in ("p=c%2Fd/x", "a b/ü", "s3://b/k=1/%/x"):
        assert decode_path(encode_path(p)) == p


@pytest.mark.parametrize("action", [
    Protocol(1, 2),
    Protocol(3, 7, ("timestampNtz",), ("timestampNtz", "appendOnly")),
    Metadata("id-1", '{"type":"struct","fields":[]}', ("p",), {"delta.appendOnly": "true"},
             name="n", description="d", created_time=5),
    AddFile("p=1/f.parquet", {"p": "1"}, 10, 20, True, '{"numRecords":3}', {"k": "v"}),
    AddFile("f.parquet", {}, 10, 20, False, None),
    RemoveFile("p=1/f.parquet", 30, True, True, {"p": "1"}, 10, None),
    RemoveFile("f.parquet"),
    Txn("app", 7, 99),
    CommitInfo({"timestamp": 1, "operation": "X", "lakevilla": {"txn": "t1", "preds": ["t0"]}}),
    AddCDCFile("_change_data/x", {}, 1),
    AddCDCFile("_change_data/p=1/c.parquet", {"p": "1"}, 7, tags={"k": "v"}, extra={"future": 1}),
    UnknownAction("domainMetadata", {"domain": "d", "configuration": "{}", "removed": False}),
])
def test_round_trip(action: object) -> None:
    line = encode_commit([action])  # type: ignore[list-item]
    (back,) = decode_commit(line)
    assert back == action
    assert json.loads(encode_commit([back])) == json.loads(line)


def test_unknown_fields_are_kept_verbatim() -> None:
    obj = {"add": {"path": "f.parquet", "partitionValues": {}, "size": 1, "modificationTime": 2,
                   "dataChange": True, "stats": None, "baseRowId": 4, "clusteringProvider": "liquid"}}
    a = action_from_json(obj)
    assert a.extra == {"baseRowId": 4, "clusteringProvider": "liquid"}  # type: ignore[union-attr]
    assert a.to_json()["add"]["baseRowId"] == 4
    md = action_from_json({"metaData": {"id": "x", "schemaString": "{}", "partitionColumns": [],
                                        "format": {"provider": "parquet"}, "configuration": {}, "future": [1]}})
    assert md.to_json()["metaData"]["future"] == [1]


def test_commit_info_payload_is_preserved_exactly() -> None:
    payload = {"timestamp": 1, "operation": "LAKEVILLA MARKER", "nested": {"a": [1, 2, {"b": None}]}, "u": "é"}
    data = encode_commit([CommitInfo(payload)])
    (ci,) = decode_commit(data)
    assert ci.payload == payload  # type: ignore[union-attr]
    assert "é" in data.decode()  # UTF-8, not \\u escapes


def test_one_action_per_line_camel_case() -> None:
    data = encode_commit([CommitInfo.create("WRITE", {"mode": "Append"}), Protocol(1, 2), Txn("a", 1)])
    lines = data.decode().split("\n")
    assert len(lines) == 3
    assert list(json.loads(lines[1])) == ["protocol"]
    assert json.loads(lines[1])["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert json.loads(lines[2])["txn"] == {"appId": "a", "version": 1}
    ci = json.loads(lines[0])["commitInfo"]
    assert ci["operation"] == "WRITE" and isinstance(ci["timestamp"], int) and ci["engineInfo"]


def test_blank_lines_are_ignored() -> None:
    assert len(decode_commit(b'\n{"txn":{"appId":"a","version":1}}\n\n')) == 1


def test_only_newlines_end_lines() -> None:
    """JSON strings may hold U+0085, U+2028 and U+2029 unescaped (encode_commit writes them so)."""
    actions = [CommitInfo({"operation": "a\u2028b\x85c\u2029d"}), Txn("a", 1)]
    assert decode_commit(encode_commit(actions)) == actions
    data = '\n{"x":1}\r\n\n{"y":"\u2028"}\n'.encode()
    assert list(json_lines(data)) == [(2, {"x": 1}), (4, {"y": "\u2028"})]


@pytest.mark.parametrize("data, where", [
    (b'{"txn":{"appId":"a","version":1}}\n{not json', "line 2: invalid JSON"),
    (b'{"add":{"path":"x"}}', "line 1: bad 'add' action: missing field 'size'"),
    (b'{"a":1,"b":2}', "line 1: an action must be a JSON object with exactly one key"),
    (b'[1]', "line 1"),
    (b'\xff\xfe', "not UTF-8"),
])
def test_malformed_commit_names_version_and_line(data: bytes, where: str) -> None:
    with pytest.raises(DeltaLogError) as e:
        decode_commit(data, version=12, table="bank_x")
    assert "commit 12 of table 'bank_x'" in str(e.value)
    assert where in str(e.value)


def test_is_empty_commit() -> None:
    assert is_empty_commit([CommitInfo({"operation": "MARKER"})])
    assert is_empty_commit([])
    assert not is_empty_commit([CommitInfo({}), Txn("a", 1)])


def test_add_to_remove_keeps_extended_metadata() -> None:
    add = AddFile("p=1/f.parquet", {"p": "1"}, 10, 20, True, '{"numRecords":3}')
    rm = add.remove(123)
    assert rm == RemoveFile("p=1/f.parquet", 123, True, True, {"p": "1"}, 10, '{"numRecords":3}')


def test_colon_in_relative_path_is_encoded() -> None:
    assert encode_path("ab:c/f.parquet") == "ab%3Ac/f.parquet"
    assert encode_path("file:///tmp/t/a b.parquet") == "file:///tmp/t/a%20b.parquet"
