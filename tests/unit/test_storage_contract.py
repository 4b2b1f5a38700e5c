"""The storage contract every ObjectStore honours, run on the local folder and on S3 (moto).

Includes the races the protocol depends on: put-if-absent and compare-and-swap must have exactly
one winner among concurrent writers (threads here; processes for the local folder).
"""

from __future__ import annotations

import multiprocessing
import queue as queue_mod
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed, StorageError
from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectStore
from lv_core.storage.local import LocalStore

RACERS = 16
ROUNDS = 4


def keys_of(store: ObjectStore, prefix: str, start_after: str | None = None) -> list[str]:
    return [m.key for m in store.list(prefix, start_after=start_after)]


def race(n: int, attempt: Callable[[int], Any]) -> tuple[list[int], list[BaseException]]:
    """Run ``attempt(i)`` for i in range(n) on n threads released together; (winners, losses)."""
    barrier = threading.Barrier(n)
    wins: list[int] = []
    losses: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            attempt(i)
        except (AlreadyExists, PreconditionFailed) as e:
            with lock:
                losses.append(e)
            return
        with lock:
            wins.append(i)

    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(run, i) for i in range(n)]:
            f.result(timeout=60)
    return wins, losses


def payload(i: int, size: int = 64) -> bytes:
    return f"writer-{i:02d}|".encode() * (size // 10)


# -- basics ----------------------------------------------------------------------------------------


def test_put_get_head_roundtrip(store: ObjectStore) -> None:
    etag = store.put("t/obj.json", b'{"a": 1}')
    got = store.get("t/obj.json")
    meta = store.head("t/obj.json")
    assert got.data == b'{"a": 1}'
    assert got.etag == etag == meta.etag
    assert (meta.key, meta.size) == ("t/obj.json", 8)
    assert abs(meta.last_modified - time.time()) < 300
    assert store.exists("t/obj.json")


def test_missing_key_raises_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        store.get("nope")
    with pytest.raises(NotFound):
        store.get("nope", byte_range=(0, 4))
    with pytest.raises(NotFound):
        store.head("dir/nope")
    assert not store.exists("nope")


def test_empty_object(store: ObjectStore) -> None:
    etag = store.put("empty", b"")
    assert store.get("empty").data == b""
    assert store.head("empty").size == 0
    assert store.get("empty").etag == etag


def test_ranged_get(store: ObjectStore) -> None:
    data = bytes(range(256)) * 4
    etag = store.put("blob", data)
    assert store.get("blob", byte_range=(0, 10)).data == data[:10]
    assert store.get("blob", byte_range=(10, 20)).data == data[10:20]
    assert store.get("blob", byte_range=(1000, 1024)).data == data[1000:]
    tail = store.get("blob", byte_range=(1020, 5000))
    assert tail.data == data[1020:] and tail.etag == etag  # a range past the end is cut short
    assert store.get("blob", byte_range=(5, 5)).data == b""
    past = store.get("blob", byte_range=(4096, 4100))
    assert past.data == b"" and past.etag == etag


def test_etag_changes_on_every_write_of_new_content(store: ObjectStore) -> None:
    etags = [store.put("k", b"v0")]
    for i in range(1, 6):
        etags.append(store.put("k", f"v{i}".encode()))
    etags.append(store.put("k", b"v-cas", mode=IfMatch(etags[-1])))
    store.delete("k")
    etags.append(store.put("k", b"v-created", mode=CREATE))
    assert len(set(etags)) == len(etags)
    assert store.get("k").etag == store.head("k").etag == etags[-1]
    assert store.get("k").data == b"v-created"


def test_rewriting_identical_bytes(store: ObjectStore) -> None:
    """A folder gives every write a new etag; S3 etags are content hashes (MD5 for simple puts)."""
    first = store.put("same", b"identical")
    second = store.put("same", b"identical")
    if store.scheme == "s3":
        assert first == second
    else:
        assert first != second
        with pytest.raises(PreconditionFailed):
            store.put("same", b"x", mode=IfMatch(first))


def test_overwrite_replaces_content(store: ObjectStore) -> None:
    store.put("o", b"old content, longer")
    store.put("o", b"new")
    assert store.get("o").data == b"new"
    assert store.head("o").size == 3


# -- put modes -------------------------------------------------------------------------------------


def test_create_on_missing_key(store: ObjectStore) -> None:
    etag = store.put("_delta_log/00000000000000000000.json", b"v0", mode=CREATE)
    assert store.get("_delta_log/00000000000000000000.json") == GetResult(b"v0", etag)


def test_create_on_existing_key_raises_and_keeps_content(store: ObjectStore) -> None:
    etag = store.put("c", b"first", mode=CREATE)
    with pytest.raises(AlreadyExists):
        store.put("c", b"second", mode=CREATE)
    got = store.get("c")
    assert (got.data, got.etag) == (b"first", etag)


def test_create_after_delete_succeeds(store: ObjectStore) -> None:
    store.put("c", b"first", mode=CREATE)
    store.delete("c")
    store.put("c", b"again", mode=CREATE)
    assert store.get("c").data == b"again"


def test_if_match_current_etag_succeeds(store: ObjectStore) -> None:
    e1 = store.put("m", b"one")
    e2 = store.put("m", b"two", mode=IfMatch(e1))
    assert e2 != e1
    assert store.get("m").data == b"two"
    assert store.head("m").etag == e2
    e3 = store.put("m", b"three", mode=IfMatch(e2))
    assert store.get("m").etag == e3


def test_if_match_stale_etag_raises_and_keeps_content(store: ObjectStore) -> None:
    stale = store.put("m", b"one")
    current = store.put("m", b"two")
    with pytest.raises(PreconditionFailed):
        store.put("m", b"three", mode=IfMatch(stale))
    got = store.get("m")
    assert (got.data, got.etag) == (b"two", current)


def test_if_match_bogus_etag_raises(store: ObjectStore) -> None:
    store.put("m", b"one")
    with pytest.raises(PreconditionFailed):
        store.put("m", b"two", mode=IfMatch('"0123456789abcdef0123456789abcdef"'))
    assert store.get("m").data == b"one"


def test_if_match_on_missing_key_raises(store: ObjectStore) -> None:
    with pytest.raises(PreconditionFailed):
        store.put("never", b"x", mode=IfMatch('"abc"'))
    etag = store.put("gone", b"x")
    store.delete("gone")
    with pytest.raises(PreconditionFailed):
        store.put("gone", b"y", mode=IfMatch(etag))
    assert not store.exists("gone") and not store.exists("never")


def test_unknown_put_mode_is_rejected(store: ObjectStore) -> None:
    with pytest.raises(ValueError):
        store.put("k", b"x", mode="append")
    assert not store.exists("k")


def test_error_classes_are_storage_errors() -> None:
    assert issubclass(AlreadyExists, StorageError) and issubclass(PreconditionFailed, StorageError)
    assert issubclass(NotFound, StorageError)


# -- delete ----------------------------------------------------------------------------------------


def test_delete(store: ObjectStore) -> None:
    store.put("d/x", b"1")
    store.delete("d/x")
    with pytest.raises(NotFound):
        store.get("d/x")
    store.delete("d/x")  # deleting a missing key is fine
    store.delete("never/existed")
    assert keys_of(store, "d/") == []


# -- copy ------------------------------------------------------------------------------------------


def test_copy(store: ObjectStore) -> None:
    src_etag = store.put("stage/part-0.parquet", b"data file")
    etag = store.copy("stage/part-0.parquet", "t/p=1/part-0.parquet")  # the destination folders are made
    got = store.get("t/p=1/part-0.parquet")
    assert (got.data, got.etag) == (b"data file", etag)
    meta = store.head("t/p=1/part-0.parquet")
    assert (meta.size, meta.etag) == (9, etag)
    assert store.get("stage/part-0.parquet") == GetResult(b"data file", src_etag)  # the source stays
    assert keys_of(store, "") == ["stage/part-0.parquet", "t/p=1/part-0.parquet"]


def test_copy_replaces_the_destination_and_is_a_separate_object(store: ObjectStore) -> None:
    store.put("src", b"new bytes")
    old = store.put("dst", b"old content, longer")
    etag = store.copy("src", "dst")
    assert store.get("dst").data == b"new bytes" and store.head("dst").size == 9
    with pytest.raises(PreconditionFailed):
        store.put("dst", b"x", mode=IfMatch(old))
    store.put("dst", b"changed", mode=IfMatch(etag))  # the copy's etag is the destination's
    store.delete("src")
    assert store.get("dst").data == b"changed" and not store.exists("src")
    with pytest.raises(AlreadyExists):
        store.put("dst", b"y", mode=CREATE)


def test_copy_of_a_missing_key_raises_not_found(store: ObjectStore) -> None:
    store.put("folder/obj", b"x")
    for src in ("nope", "folder"):  # a folder is not an object
        with pytest.raises(NotFound):
            store.copy(src, "out/copy")
    assert keys_of(store, "") == ["folder/obj"]


def test_copy_of_an_empty_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    store.copy("empty", "e2")
    assert store.get("e2").data == b"" and store.head("e2").size == 0


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b"])
def test_copy_rejects_invalid_keys(store: ObjectStore, key: str) -> None:
    store.put("ok", b"x")
    with pytest.raises(StorageError):
        store.copy("ok", key)
    with pytest.raises(StorageError):
        store.copy(key, "ok2")
    assert keys_of(store, "") == ["ok"]


# -- list ------------------------------------------------------------------------------------------

LIST_KEYS = ["a-", "a/1", "a/10", "a/2", "a/b/x", "a/b/y/z", "ab", "b", "c/d"]


@pytest.fixture
def listed(store: ObjectStore) -> ObjectStore:
    for key in reversed(LIST_KEYS):
        store.put(key, key.encode())
    return store


def _folder_order(keys: list[str]) -> list[str]:
    """SeaweedFS (4.48) lists a folder's contents at the folder's name, so ``a/...`` comes before ``a-``
    (S3 and moto: ``a-`` first, ``-`` sorts below ``/``). LakeVilla only relies on the order inside one
    folder (a table's ``_delta_log/``, its marker folder), where both agree: README, "Stores"."""
    return sorted(keys, key=lambda k: k.split("/"))


def _in_order(request: pytest.FixtureRequest, keys: list[str]) -> list[str]:
    seaweed = getattr(request.node, "callspec", None) and request.node.callspec.params.get("store") == "s3-seaweedfs"
    return _folder_order(keys) if seaweed else keys


def test_list_all_in_key_order(listed: ObjectStore, request: pytest.FixtureRequest) -> None:
    assert sorted(LIST_KEYS) == LIST_KEYS
    assert keys_of(listed, "") == _in_order(request, LIST_KEYS)


def test_list_prefix_is_a_string_prefix(listed: ObjectStore, request: pytest.FixtureRequest) -> None:
    assert keys_of(listed, "a/") == ["a/1", "a/10", "a/2", "a/b/x", "a/b/y/z"]
    assert keys_of(listed, "a") == _in_order(request, ["a-", "a/1", "a/10", "a/2", "a/b/x", "a/b/y/z", "ab"])
    assert keys_of(listed, "a/1") == ["a/1", "a/10"]
    assert keys_of(listed, "a/b") == ["a/b/x", "a/b/y/z"]
    assert keys_of(listed, "a/b/y/") == ["a/b/y/z"]
    assert keys_of(listed, "zzz") == []
    assert keys_of(listed, "a/c/") == []


def test_list_start_after(listed: ObjectStore) -> None:
    assert keys_of(listed, "a/", start_after="a/10") == ["a/2", "a/b/x", "a/b/y/z"]
    assert keys_of(listed, "a/", start_after="a/1") == ["a/10", "a/2", "a/b/x", "a/b/y/z"]
    assert keys_of(listed, "a/", start_after="a/0") == ["a/1", "a/10", "a/2", "a/b/x", "a/b/y/z"]
    assert keys_of(listed, "a/", start_after="") == keys_of(listed, "a/")
    assert keys_of(listed, "a/", start_after="a/b/y/z") == []
    assert keys_of(listed, "b", start_after="a") == ["b"]
    assert keys_of(listed, "", start_after="ab") == ["b", "c/d"]
    assert keys_of(listed, "a/", start_after="zzz") == []


def test_list_metadata_matches_head(listed: ObjectStore) -> None:
    for meta in listed.list("a/b/"):
        head = listed.head(meta.key)
        assert (meta.size, meta.etag) == (head.size, head.etag) == (len(meta.key), head.etag)


def test_list_more_than_one_page(store: ObjectStore) -> None:
    keys = [f"p/{i:05d}" for i in range(1005)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put(k, b"."), keys))
    assert keys_of(store, "p/") == keys
    assert keys_of(store, "p/", start_after="p/00998") == keys[999:]


def test_nested_folders(store: ObjectStore) -> None:
    store.put("x/y/z/w.json", b"deep")
    assert store.get("x/y/z/w.json").data == b"deep"
    for folder in ("x", "x/y", "x/y/z"):  # folders are not objects
        with pytest.raises(NotFound):
            store.get(folder)
        assert not store.exists(folder)
    assert keys_of(store, "x/") == ["x/y/z/w.json"]
    store.delete("x/y/z/w.json")
    assert keys_of(store, "x/") == []


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a/.", ".."])
def test_invalid_keys_are_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(StorageError):
        store.put(key, b"x")
    assert keys_of(store, "") == []


# -- concurrency -----------------------------------------------------------------------------------


def test_readers_never_see_partial_content(store: ObjectStore) -> None:
    size = (1 << 20) if store.scheme == "file" else (256 << 10)
    versions = 30 if store.scheme == "file" else 12
    store.put("big", bytes([0]) * size)
    stop = threading.Event()
    seen: list[int] = []
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            data = store.get("big").data
            if len(data) != size or data.count(data[:1]) != size:
                bad.append(f"torn read: {len(data)} bytes, first {data[:1]!r}")
                return
            seen.append(data[0])

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for v in range(1, versions + 1):
            store.put("big", bytes([v]) * size)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not bad
    assert len(seen) > 0
    assert store.get("big").data == bytes([versions]) * size


def test_create_race_has_exactly_one_winner(store: ObjectStore) -> None:
    wins, losses = race(RACERS, lambda i: store.put("race/00000000000000000001.json", payload(i), mode=CREATE))
    assert len(wins) == 1, f"winners: {wins}"
    assert len(losses) == RACERS - 1 and all(isinstance(e, AlreadyExists) for e in losses)
    assert store.get("race/00000000000000000001.json").data == payload(wins[0])


def test_if_match_race_has_exactly_one_winner_per_etag(store: ObjectStore) -> None:
    etag = store.put("cas", b"start")
    for rnd in range(ROUNDS):
        results: dict[int, str] = {}

        def attempt(i: int, etag: str = etag, rnd: int = rnd, results: dict[int, str] = results) -> None:
            results[i] = store.put("cas", payload(100 * rnd + i), mode=IfMatch(etag))

        wins, losses = race(RACERS, attempt)
        assert len(wins) == 1, f"round {rnd}: winners {wins}"
        assert len(losses) == RACERS - 1 and all(isinstance(e, PreconditionFailed) for e in losses)
        got = store.get("cas")
        assert got.data == payload(100 * rnd + wins[0])
        assert got.etag == results[wins[0]] != etag
        etag = got.etag


# -- the same races across processes (local folder) -----------------------------------------------


def _process_racer(
    root: str, key: str, rounds: int, threads: int, pid: int, barrier: Any, out: Any
) -> None:
    """One process of the multi-process race: round 0 is put-if-absent, then if_match rounds."""
    store = LocalStore(root)
    for rnd in range(rounds + 1):
        etag = None if rnd == 0 else store.head(key).etag
        barrier.wait(timeout=60)

        def attempt(tid: int, rnd: int = rnd, etag: str | None = etag) -> None:
            ident = f"p{pid}-t{tid}-r{rnd}"
            data = ident.encode() * 50
            try:
                new = store.put(key, data, mode=CREATE if etag is None else IfMatch(etag))
                out.put((rnd, ident, new))
            except (AlreadyExists, PreconditionFailed) as e:
                out.put((rnd, ident, type(e).__name__))

        ts = [threading.Thread(target=attempt, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        barrier.wait(timeout=60)


def test_races_across_processes_local(tmp_path: Path) -> None:
    procs_n, threads_n, rounds = 8, RACERS // 8, 3
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs_n + 1)
    out = ctx.Queue()
    root, key = str(tmp_path / "wh"), "_delta_log/00000000000000000007.json"
    LocalStore(root)
    procs = [
        ctx.Process(target=_process_racer, args=(root, key, rounds, threads_n, p, barrier, out), daemon=True)
        for p in range(procs_n)
    ]
    for p in procs:
        p.start()
    store = LocalStore(root)
    try:
        for rnd in range(rounds + 1):
            barrier.wait(timeout=60)  # everyone has read the etag of this round
            barrier.wait(timeout=60)  # everyone has finished writing
            results = [out.get(timeout=30) for _ in range(procs_n * threads_n)]
            assert {r for r, _, _ in results} == {rnd}
            winners = [(ident, etag) for _, ident, etag in results
                       if etag not in ("AlreadyExists", "PreconditionFailed")]
            loser_kind = "AlreadyExists" if rnd == 0 else "PreconditionFailed"
            assert len(winners) == 1, f"round {rnd}: winners {winners}"
            assert sum(1 for _, _, e in results if e == loser_kind) == procs_n * threads_n - 1
            got = store.get(key)
            assert got.data == winners[0][0].encode() * 50
            assert got.etag == winners[0][1]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    with pytest.raises(queue_mod.Empty):
        out.get(timeout=0.1)


def test_local_writes_survive_folders_pruned_under_them(tmp_path: Path) -> None:
    """A delete prunes the folders it empties (an object store has no empty folders) while other
    threads write into them: every write lands (the folder chain is made again), none raises."""
    store = LocalStore(str(tmp_path / "wh"))
    errors: list[BaseException] = []
    written: list[str] = []

    def churn(n: int) -> None:
        try:
            for i in range(300):
                key = f"_lakevilla/txns/t{n}-{i}/lease.json"  # one folder each, pruned by its delete
                store.put(key, b"x", mode=CREATE if i % 2 else OVERWRITE)
                store.copy(key, f"_lakevilla/txns/c{n}-{i}/copy.json")
                written.append(key)
                store.delete(key)
                store.delete(f"_lakevilla/txns/c{n}-{i}/copy.json")
        except BaseException as e:  # reported below
            errors.append(e)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(churn, range(4)))
    assert errors == [] and len(written) == 1200
    assert list(store.list("")) == []


def test_local_create_falls_back_to_named_temp_files_where_unnamed_are_refused(tmp_path: Path, monkeypatch) -> None:
    """A file system without O_TMPFILE (simulated: this machine's file systems all have it, so the
    flag's open is made to fail as such a file system fails it) gets named temp files: every put-if-absent
    still lands once, the next ones go the named way at once, and no temp file is left."""
    import errno
    import os

    from lv_core.storage import local

    if not local._UNNAMED:
        pytest.skip("no unnamed temp files here: the named way is the only one")
    store = LocalStore(str(tmp_path / "wh"))
    store.put("t/_delta_log/0.json", b"v0", mode=CREATE)  # the folder exists: unnamed from now on
    real_open, refused = os.open, []

    def open_(path, flags, *args, **kwargs):
        if flags & local._UNNAMED == local._UNNAMED:
            refused.append(path)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(local.os, "open", open_)
    assert store.put("t/_delta_log/1.json", b"v1", mode=CREATE)
    assert store.put("t/_delta_log/2.json", b"v2", mode=CREATE)
    with pytest.raises(AlreadyExists):
        store.put("t/_delta_log/2.json", b"again", mode=CREATE)
    assert len(refused) == 1  # asked once, then remembered
    assert [store.get(f"t/_delta_log/{v}.json").data for v in range(3)] == [b"v0", b"v1", b"v2"]
    assert sorted(os.listdir(tmp_path / "wh" / "t" / "_delta_log")) == ["0.json", "1.json", "2.json"]


@pytest.mark.parametrize("unnamed", [True, False])
@pytest.mark.parametrize("mode", ["create", "overwrite"])
def test_local_full_disk_is_a_storage_error_and_writes_nothing(tmp_path: Path, monkeypatch, unnamed: bool,
                                                               mode: str) -> None:
    """A write the file system refuses (a full disk, simulated: the sync fails with ENOSPC as it does on
    one; no disk can be filled here) raises StorageError, the protocol's error for a request that did not
    land, not a bare OSError; the key keeps what it had and no temp file is left."""
    import errno
    import os

    from lv_core.storage import local

    store = LocalStore(str(tmp_path / "wh"), unnamed=unnamed)
    store.put("t/_delta_log/0.json", b"v0", mode=CREATE)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local.os, "fsync", full)
    key = "t/_delta_log/1.json" if mode == "create" else "t/_delta_log/0.json"
    with pytest.raises(StorageError, match="No space left"):
        store.put(key, b"new", mode=CREATE if mode == "create" else OVERWRITE)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "wh" / "t" / "_delta_log")) == ["0.json"]
    assert store.get("t/_delta_log/0.json").data == b"v0"
