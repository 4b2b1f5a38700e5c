"""Pure log replay: no store involved."""

from __future__ import annotations

import pytest

from lv_core.delta.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile, Txn, UnknownAction
from lv_core.delta.snapshot import Snapshot, replay
from lv_core.errors import DeltaLogError

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
MD = Metadata("tid", SCHEMA, (), {})
P = Protocol(1, 2)


def add(path: str, size: int = 10, rows: int = 1) -> AddFile:
    return AddFile(path, {}, size, 0, True, f'{{"numRecords":{rows}}}')


def v0() -> tuple[int, list]:
    return 0, [CommitInfo({"operation": "CREATE TABLE"}), P, MD]


def test_create_then_add_remove() -> None:
    s = replay(None, [v0(), (1, [add("a"), add("b")]), (2, [add("a").remove(5), add("c")])], table="t")
    assert s.table == "t" and s.version == 2
    assert sorted(s.files) == ["b", "c"]
    assert list(s.tombstones) == ["a"] and s.tombstones["a"].deletion_timestamp == 5
    assert s.num_files == 2 and s.size_bytes == 20 and s.num_records == 2
    assert s.schema.names == ["id"] and s.partition_columns == ()
    assert s.commit_info is None  # commit 2 had no commitInfo
    assert s.commit_infos[0].operation == "CREATE TABLE"


def test_readd_clears_tombstone_and_last_add_wins() -> None:
    s = replay(None, [v0(), (1, [add("a", 1)]), (2, [add("a").remove(1)]), (3, [add("a", 3)])])
    assert s.files["a"].size == 3 and not s.tombstones


def test_empty_commits_change_nothing_but_the_version() -> None:
    base = replay(None, [v0(), (1, [add("a")])])
    marker = CommitInfo({"operation": "LAKEVILLA MARKER", "lakevilla": {"txn": "x", "preds": []}})
    s = replay(base, [(2, [marker]), (3, [CommitInfo({"operation": "LAKEVILLA ABORT"})])])
    assert s.version == 3 and s.files == base.files and s.metadata == base.metadata
    assert s.commit_infos[2].get("lakevilla") == {"txn": "x", "preds": []}
    assert s.commit_info is not None and s.commit_info.operation == "LAKEVILLA ABORT"


def test_base_is_not_modified() -> None:
    base = replay(None, [v0(), (1, [add("a")])])
    s = replay(base, [(2, [add("a").remove(), add("b")])])
    assert list(base.files) == ["a"] and list(s.files) == ["b"]
    with pytest.raises(TypeError):
        base.files["x"] = add("x")  # type: ignore[index]


def test_metadata_protocol_txn_latest_wins() -> None:
    md2 = Metadata("tid", SCHEMA, (), {"delta.appendOnly": "true"})
    s = replay(None, [v0(), (1, [Txn("app", 1, 10)]), (2, [md2, Protocol(1, 3), Txn("app", 2, 20), Txn("b", 1)])])
    assert s.metadata is md2 and s.configuration == {"delta.appendOnly": "true"}
    assert s.protocol == Protocol(1, 3)
    assert s.txns["app"].version == 2 and set(s.txns) == {"app", "b"}


def test_unknown_actions_are_ignored_for_state() -> None:
    s = replay(None, [v0(), (1, [UnknownAction("cdc", {"path": "x"}), add("a")])])
    assert list(s.files) == ["a"]


def test_gap_or_disorder_is_an_error() -> None:
    with pytest.raises(DeltaLogError, match="expected version 2, got 3"):
        replay(None, [v0(), (1, [add("a")]), (3, [add("b")])], table="t")
    base = replay(None, [v0()])
    with pytest.raises(DeltaLogError, match="expected version 1, got 0"):
        replay(base, [v0()])


def test_missing_protocol_or_metadata() -> None:
    with pytest.raises(DeltaLogError, match="no protocol and metaData"):
        replay(None, [(0, [CommitInfo({})])], table="t")
    with pytest.raises(DeltaLogError, match="no metaData"):
        replay(None, [(0, [P])])
    with pytest.raises(DeltaLogError, match="nothing to replay"):
        replay(None, [])


def test_no_commits_returns_base() -> None:
    base = replay(None, [v0()])
    assert replay(base, []) is base


def test_checkpoint_as_base() -> None:
    cp = replay(None, [(5, [P, MD, add("a"), RemoveFile("z", 1)])]).with_checkpoint_version(5)
    s = replay(cp, [(6, [add("b")])])
    assert s.version == 6 and s.checkpoint_version == 5 and sorted(s.files) == ["a", "b"]
    assert isinstance(s, Snapshot) and "z" in s.tombstones


def test_num_records_unknown_without_stats() -> None:
    s = replay(None, [v0(), (1, [AddFile("a", {}, 1, 0)])])
    assert s.num_records is None


@pytest.mark.parametrize("add_first", [True, False])
def test_replacing_a_deletion_vector_keeps_the_file_whatever_the_action_order(add_first: bool) -> None:
    """remove(path, dv1) + add(path, dv2) in one version is a new deletion vector for the same file."""
    dv1 = {"deletionVector": {"storageType": "i", "pathOrInlineDv": "one", "sizeInBytes": 1, "cardinality": 1}}
    dv2 = {"deletionVector": {"storageType": "i", "pathOrInlineDv": "two", "sizeInBytes": 1, "cardinality": 2}}
    old = AddFile("a", {}, 10, 0, True, None, extra=dv1)
    new = AddFile("a", {}, 10, 0, True, None, extra=dv2)
    swap = [new, old.remove(5)] if add_first else [old.remove(5), new]
    s = replay(None, [v0(), (1, [old]), (2, swap)], table="t")
    assert list(s.files) == ["a"] and s.files["a"].extra["deletionVector"]["pathOrInlineDv"] == "two"
