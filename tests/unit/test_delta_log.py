"""DeltaLog: latest version by LIST and by probing, snapshots, exact request counts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lv_core.delta import (
    CommitInfo,
    DeltaLog,
    Snapshot,
    VersionNotFound,
    commit,
    create_table,
    write_checkpoint,
)
from lv_core.delta.writer import write_data_files
from lv_core.errors import DeltaLogError, NotFound, TableNotFound
from lv_core.storage.base import GetResult, ObjectStore
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore


def append(store: ObjectStore, table: str, snap: Snapshot, ids: list[int]) -> Snapshot:
    adds = write_data_files(store, table, snap, pa.table({"id": pa.array(ids, pa.int64())}))
    actions = [CommitInfo.create("WRITE", {"mode": "Append"}), *adds]
    commit(store, table, snap.version + 1, actions)
    from lv_core.delta import replay
    return replay(snap, [(snap.version + 1, actions)])


def ten_commit_table(store: ObjectStore, table: str = "t") -> Snapshot:
    """Versions 0 (CREATE TABLE) .. 9 (nine appends of one file each)."""
    snap = create_table(store, table, "id BIGINT")
    for i in range(1, 10):
        snap = append(store, table, snap, [i])
    return snap


def used(store: InstrumentedStore) -> dict[str, int]:
    return {k: v for k, v in store.counts().items() if v}


@pytest.fixture()
def istore(tmp_path: Path) -> InstrumentedStore:
    return InstrumentedStore(LocalStore(tmp_path))


def test_request_counts_latest_snapshot_of_10_commits(istore: InstrumentedStore) -> None:
    """Loading the latest snapshot of a 10-commit table (versions 0..9, no checkpoint).

    LIST path: 1 GET of ``_last_checkpoint`` (absent: it is only a hint, but the GET is still a
    request), 1 LIST of ``_delta_log/`` (10 keys, one page), then 10 GETs, one per commit file.
    -> GET 11, LIST 1.

    Probe path: the same GET of ``_last_checkpoint``, the GET of version 0 (it exists), 1 LIST
    from it (finds 9 as the latest), then GETs of versions 1..9. -> GET 11, LIST 1.
    """
    expected = ten_commit_table(istore)
    log = DeltaLog(istore, "t")
    istore.reset()
    by_list = log.snapshot(method="list")
    assert used(istore) == {"GET": 11, "LIST": 1}
    istore.reset()
    by_probe = log.snapshot(method="probe")
    assert used(istore) == {"GET": 11, "LIST": 1}
    for s in (by_list, by_probe):
        assert s.version == 9 and s.files == expected.files and s.metadata == expected.metadata


def test_request_counts_latest_version(istore: InstrumentedStore) -> None:
    """Latest version only. LIST: 1 GET (``_last_checkpoint``) + 1 LIST. Probe without hint: 1 GET
    + HEAD of version 0 + 1 LIST from it. Probe with hint 7: HEAD of 8 + 1 LIST. Up to date: 1 HEAD."""
    ten_commit_table(istore)
    log = DeltaLog(istore, "t")
    istore.reset()
    assert log.latest_version_by_list() == 9
    assert used(istore) == {"GET": 1, "LIST": 1}
    istore.reset()
    assert log.latest_version_by_probe() == 9
    assert used(istore) == {"GET": 1, "HEAD": 1, "LIST": 1}
    istore.reset()
    assert log.latest_version_by_probe(hint=7) == 9
    assert used(istore) == {"HEAD": 1, "LIST": 1}
    istore.reset()
    assert log.latest_version_by_probe(hint=9) == 9
    assert used(istore) == {"HEAD": 1}


def test_request_counts_with_checkpoint(istore: InstrumentedStore) -> None:
    """Checkpoint at 5 of versions 0..9. LIST path: GET ``_last_checkpoint`` + LIST (from the
    checkpoint on) + GET checkpoint + GETs of 6..9 = GET 6, LIST 1. Probe: GET ``_last_checkpoint``
    + GET checkpoint + GETs of 6..9 + the missing 10 = GET 7. Probe from hint 5: HEADs 6..10."""
    snap = create_table(istore, "t", "id BIGINT")
    for i in range(1, 10):
        snap = append(istore, "t", snap, [i])
        if snap.version == 5:
            write_checkpoint(istore, "t", snap)
    log = DeltaLog(istore, "t")
    istore.reset()
    s = log.snapshot(method="list")
    assert used(istore) == {"GET": 6, "LIST": 1}
    assert s.version == 9 and s.checkpoint_version == 5 and s.files == snap.files
    istore.reset()
    s = log.snapshot(method="probe")
    assert used(istore) == {"GET": 6, "LIST": 1}
    assert s.version == 9 and s.checkpoint_version == 5 and s.files == snap.files
    istore.reset()
    assert log.latest_version_by_probe() == 9
    assert used(istore) == {"GET": 1, "HEAD": 1, "LIST": 1}


def test_request_counts_update(istore: InstrumentedStore) -> None:
    """Advancing a known snapshot: GET per new commit + 1 LIST finding the latest; up to date: 1 GET."""
    snap = ten_commit_table(istore)
    log = DeltaLog(istore, "t")
    old = log.snapshot(7)
    istore.reset()
    new = log.update(old)
    assert used(istore) == {"GET": 2, "LIST": 1}
    assert new.version == 9 and new.files == snap.files
    istore.reset()
    assert log.update(new) is new
    assert used(istore) == {"GET": 1}


def test_snapshot_at_older_versions(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snaps = [create_table(store, "t", "id BIGINT")]
    for i in range(1, 8):
        snaps.append(append(store, "t", snaps[-1], [i]))
        if i == 5:
            write_checkpoint(store, "t", snaps[-1])
    log = DeltaLog(store, "t")
    for v in (0, 3, 5, 6, 7):
        for method in ("list", "probe"):
            s = log.snapshot(v, method=method)
            assert s.version == v and s.files == snaps[v].files, (v, method)
    assert log.snapshot(3, method="list").checkpoint_version is None
    assert log.snapshot(6, method="probe").checkpoint_version == 5
    assert log.update(log.snapshot(2), 4).files == snaps[4].files


def test_missing_table_and_versions(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    log = DeltaLog(store, "nope")
    for call in (log.latest_version_by_list, log.latest_version_by_probe, lambda: log.snapshot(),
                 lambda: log.snapshot(method="probe")):
        with pytest.raises(TableNotFound, match="'nope' does not exist"):
            call()
    create_table(store, "t", "id BIGINT")
    log = DeltaLog(store, "t")
    for method in ("list", "probe"):
        with pytest.raises(VersionNotFound) as e:
            log.snapshot(3, method=method)
        assert isinstance(e.value, NotFound) and isinstance(e.value, DeltaLogError) and e.value.version == 3
    with pytest.raises(VersionNotFound):
        log.read_commit(1)
    with pytest.raises(ValueError):
        log.snapshot(method="scan")


def test_read_commit_returns_etag(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    create_table(store, "t", "id BIGINT")
    actions, etag = DeltaLog(store, "t").read_commit(0)
    assert etag == store.head("t/_delta_log/00000000000000000000.json").etag
    assert [type(a).__name__ for a in actions] == ["CommitInfo", "Protocol", "Metadata"]
    assert DeltaLog(store, "t").commit_key(12) == "t/_delta_log/00000000000000000012.json"


def test_gap_in_log_is_reported_by_list(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    ten_commit_table(store)
    store.delete("t/_delta_log/00000000000000000004.json")
    with pytest.raises(DeltaLogError, match=r"missing for versions \[4\]"):
        DeltaLog(store, "t").snapshot()


def test_malformed_commit_is_reported(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    create_table(store, "t", "id BIGINT")
    store.put("t/_delta_log/00000000000000000001.json", b'{"commitInfo":{}}\n{"add":')
    with pytest.raises(DeltaLogError, match="commit 1 of table 't', line 2"):
        DeltaLog(store, "t").snapshot()


def test_other_files_in_log_are_ignored(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = ten_commit_table(store)
    store.put("t/_delta_log/00000000000000000009.crc", b"{}")
    store.put("t/_delta_log/00000000000000000002.00000000000000000004.compacted.json", b"garbage")
    store.put("t/_delta_log/00000000000000000010.checkpoint.0000000001.0000000002.parquet", b"partial")
    store.put("t/_delta_log/_commits/00000000000000000010.abc.json", b"unbackfilled")
    s = DeltaLog(store, "t").snapshot()
    assert s.version == 9 and s.files == snap.files


def test_multi_part_checkpoint(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = ten_commit_table(store)
    info = write_checkpoint(store, "t", snap, parts=3)
    assert info["parts"] == 3
    names = sorted(m.key.rsplit("/", 1)[1] for m in store.list("t/_delta_log/00000000000000000009.checkpoint"))
    assert names == [f"00000000000000000009.checkpoint.000000000{i}.0000000003.parquet" for i in (1, 2, 3)]
    for method in ("list", "probe"):
        s = DeltaLog(store, "t").snapshot(method=method)
        assert s.checkpoint_version == 9 and s.files == snap.files and s.metadata == snap.metadata


def test_stale_or_broken_last_checkpoint(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT")
    for i in range(1, 8):
        snap = append(store, "t", snap, [i])
        if i in (3, 6):
            write_checkpoint(store, "t", snap)
    log = DeltaLog(store, "t")
    # stale hint: the LIST from checkpoint 3 on finds the newer checkpoint 6
    store.put("t/_delta_log/_last_checkpoint", b'{"version":3,"size":5}')
    assert log.snapshot().checkpoint_version == 6
    assert log.snapshot(method="probe").checkpoint_version == 3
    # hint to a checkpoint that does not exist: both paths still find the right state
    store.put("t/_delta_log/_last_checkpoint", b'{"version":5,"size":5}')
    for method in ("list", "probe"):
        s = log.snapshot(method=method)
        assert s.version == 7 and s.files == snap.files
    # unreadable hint: ignored
    store.put("t/_delta_log/_last_checkpoint", b"not json")
    assert log.snapshot().files == snap.files and log.read_last_checkpoint() is None


def thousand_commit_table(store: ObjectStore, table: str = "t") -> Snapshot:
    """Versions 0 (CREATE TABLE) .. 999 (one added file each, no checkpoint)."""
    from lv_core.delta import AddFile

    snap = create_table(store, table, "id BIGINT")
    for v in range(1, 1000):
        add = AddFile(path=f"part-{v:05d}.parquet", partition_values={}, size=1, modification_time=0)
        commit(store, table, v, [CommitInfo.create("WRITE", {"mode": "Append"}), add])
    return snap


def test_latest_version_of_1000_commits_costs_o1_requests(tmp_path: Path) -> None:
    """Cold ``Lakehouse.version()`` and probing from far behind LIST the log instead of one HEAD per
    version: at most 5 requests for a 1,000-commit table without checkpoint (here 2 or 3)."""
    from lv_core import Lakehouse

    istore = InstrumentedStore(LocalStore(tmp_path))
    thousand_commit_table(istore)
    lh = Lakehouse(istore)
    istore.reset()
    assert lh.version("t") == 999
    assert used(istore) == {"GET": 1, "LIST": 1}  # _last_checkpoint (absent) + one page of 1,000 keys
    log = DeltaLog(istore, "t")
    istore.reset()
    assert log.latest_version_by_probe() == 999
    assert used(istore) == {"GET": 1, "HEAD": 1, "LIST": 1}
    istore.reset()
    assert log.latest_version_by_probe(hint=3) == 999
    assert used(istore) == {"HEAD": 1, "LIST": 1}
    istore.reset()
    assert log.latest_version_by_probe(hint=999) == 999
    assert used(istore) == {"HEAD": 1}
    lh.close()


class _Rendezvous(LocalStore):
    """Holds the GETs of commits 1..n until all ``n`` are in flight together (they time out with
    BrokenBarrierError when the reads are sequential)."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        import threading

        self.barrier = threading.Barrier(n, timeout=20)
        self.held = {f"t/_delta_log/{v:020d}.json" for v in range(1, n + 1)}

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        if key in self.held:
            self.barrier.wait()
        return super().get(key, byte_range=byte_range)


@pytest.mark.parametrize("method", ["list", "probe"])
def test_snapshot_reads_commits_in_parallel(tmp_path: Path, method: str) -> None:
    """8 commit GETs meet at a barrier: only a parallel read gets past it. Same files as delta-rs."""
    import deltalake

    thousand_commit_table(LocalStore(tmp_path))
    log = DeltaLog(_Rendezvous(tmp_path, 8), "t")
    snap = log.snapshot(method=method)
    assert snap.version == 999
    theirs = {u.rsplit("/", 1)[1] for u in deltalake.DeltaTable(str(tmp_path / "t")).file_uris()}
    assert set(snap.files) == theirs and len(theirs) == 999
