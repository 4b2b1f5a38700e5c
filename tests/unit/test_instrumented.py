"""InstrumentedStore: request counts per kind and scope, latency injection, deterministic and random faults."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest

from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed, StorageError
from lv_core.storage.base import CREATE, GetResult, IfMatch, ObjectMeta, ObjectStore
from lv_core.storage.instrumented import KINDS, InstrumentedStore
from lv_core.storage.local import LocalStore


def expected(**counts: int) -> dict[str, int]:
    """All kinds at zero except the given ones (``PUT_create=1`` -> ``"PUT-create": 1``)."""
    out = dict.fromkeys(KINDS, 0)
    for name, n in counts.items():
        kind = name.replace("_", "-")
        assert kind in out
        out[kind] = n
    return out


@pytest.fixture
def inst(local_store: LocalStore) -> InstrumentedStore:
    return InstrumentedStore(local_store)


class ManyKeys(ObjectStore):
    """A store that only lists ``n`` keys (to count LIST pages without writing files)."""

    scheme = "mem"

    def __init__(self, n: int) -> None:
        self.n = n

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        return (ObjectMeta(f"{prefix}{i:06d}", 1, str(i), 0.0) for i in range(self.n))

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        raise NotFound(key)

    def put(self, key: str, data: bytes, *, mode: object = "overwrite") -> str:  # type: ignore[override]
        raise NotImplementedError

    def head(self, key: str) -> ObjectMeta:
        raise NotFound(key)

    def delete(self, key: str) -> None:
        pass

    def url(self, key: str = "") -> str:
        return f"mem:///{key}"


# -- counting --------------------------------------------------------------------------------------


def test_exact_counts_for_a_known_sequence(inst: InstrumentedStore) -> None:
    e0 = inst.put("t/_delta_log/0.json", b"v0", mode=CREATE)
    with pytest.raises(AlreadyExists):
        inst.put("t/_delta_log/0.json", b"v0", mode=CREATE)  # failed requests count too
    inst.put("t/ptr", b"p")
    e1 = inst.put("t/ptr", b"q", mode=IfMatch(inst.head("t/ptr").etag))
    inst.get("t/ptr")
    inst.get("t/_delta_log/0.json", byte_range=(0, 1))
    assert inst.exists("t/ptr") and not inst.exists("t/none")
    assert [m.key for m in inst.list("t/")] == ["t/_delta_log/0.json", "t/ptr"]
    inst.delete("t/ptr")
    assert e0 and e1
    assert inst.counts() == expected(PUT=1, PUT_create=2, PUT_if_match=1, GET=2, HEAD=3, LIST=1, DELETE=1)
    assert inst.total() == 11


def test_list_counts_one_request_per_page_of_1000() -> None:
    for n, pages in [(0, 1), (999, 1), (1000, 1), (1001, 2), (2500, 3), (3000, 3)]:
        store = InstrumentedStore(ManyKeys(n))
        assert len(list(store.list("p/"))) == n
        assert store.counts()["LIST"] == pages, n


def test_list_counts_only_the_pages_fetched() -> None:
    store = InstrumentedStore(ManyKeys(2500))
    it = store.list("p/")
    assert store.counts()["LIST"] == 1  # the first page is fetched by the call
    for _ in range(1000):
        next(it)
    assert store.counts()["LIST"] == 1
    next(it)
    assert store.counts()["LIST"] == 2


def test_scopes_nest_and_count_into_every_active_scope(inst: InstrumentedStore) -> None:
    inst.put("a", b"1")
    with inst.scope("txn-1"):
        inst.get("a")
        with inst.scope("commit"):
            inst.head("a")
            with inst.scope("txn-1"):  # re-entering a scope counts once
                inst.head("a")
        inst.delete("b")
    assert inst.counts("txn-1") == expected(GET=1, HEAD=2, DELETE=1)
    assert inst.counts("commit") == expected(HEAD=2)
    assert inst.counts() == expected(PUT=1, GET=1, HEAD=2, DELETE=1)
    assert inst.counts("never-used") == expected()
    inst.reset()
    assert inst.counts() == inst.counts("txn-1") == expected()


def test_scopes_are_per_thread(inst: InstrumentedStore) -> None:
    inst.put("a", b"1")
    started, release = threading.Event(), threading.Event()

    def other() -> None:
        with inst.scope("other"):
            started.set()
            release.wait(5)
            inst.get("a")
            inst.get("a")

    t = threading.Thread(target=other)
    t.start()
    started.wait(5)
    with inst.scope("mine"):
        inst.head("a")
        release.set()
        t.join()
    assert inst.counts("mine") == expected(HEAD=1)
    assert inst.counts("other") == expected(GET=2)


def test_counts_are_exact_under_threads(inst: InstrumentedStore) -> None:
    inst.put("k", b"x")

    def work(i: int) -> None:
        with inst.scope(f"w{i % 2}"):
            for _ in range(100):
                inst.head("k")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert inst.counts()["HEAD"] == 800
    assert inst.counts("w0")["HEAD"] == inst.counts("w1")["HEAD"] == 400


# -- latency ---------------------------------------------------------------------------------------


def test_latency_per_kind_is_measurable(local_store: LocalStore) -> None:
    local_store.put("k", b"x")
    store = InstrumentedStore(local_store, latency={"GET": 0.05})
    t0 = time.perf_counter()
    for _ in range(4):
        store.get("k")
    slow = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(4):
        store.head("k")
    fast = time.perf_counter() - t0
    assert slow >= 0.2
    assert fast < 0.1


def test_latency_single_float_applies_to_all_kinds_and_does_not_serialise(local_store: LocalStore) -> None:
    store = InstrumentedStore(local_store, latency=0.1)
    t0 = time.perf_counter()
    store.put("k", b"x")
    store.head("k")
    assert time.perf_counter() - t0 >= 0.2
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: store.get("k"), range(8)))
    assert time.perf_counter() - t0 < 0.6  # 8 x 0.1 s in parallel, not 0.8 s in a row
    store.set_latency(None)
    t0 = time.perf_counter()
    store.get("k")
    assert time.perf_counter() - t0 < 0.05


def test_unknown_kind_is_rejected(inst: InstrumentedStore) -> None:
    with pytest.raises(ValueError):
        inst.fail("POST")
    with pytest.raises(ValueError):
        inst.set_latency({"GETS": 1.0})
    with pytest.raises(ValueError):
        inst.fail("GET", times=0)


# -- deterministic faults --------------------------------------------------------------------------


def test_fault_before_raises_and_nothing_is_written(inst: InstrumentedStore) -> None:
    fault = inst.fail("PUT-create", key_contains="_delta_log")
    inst.put("data/part-0.parquet", b"d", mode=CREATE)  # does not match: unaffected
    with pytest.raises(StorageError, match="injected"):
        inst.put("t/_delta_log/1.json", b"commit", mode=CREATE)
    assert not inst.inner.exists("t/_delta_log/1.json")
    assert (fault.fired, fault.remaining) == (1, 0)
    inst.put("t/_delta_log/1.json", b"commit", mode=CREATE)  # times=1: the next one passes
    assert inst.inner.get("t/_delta_log/1.json").data == b"commit"
    assert inst.counts()["PUT-create"] == 3
    assert [(f.kind, f.key, f.after) for f in inst.injected] == [("PUT-create", "t/_delta_log/1.json", False)]


def test_fault_after_the_write_landed(store: ObjectStore) -> None:
    inst = InstrumentedStore(store)
    inst.fail("PUT-create", after=True)
    with pytest.raises(StorageError):
        inst.put("log/1.json", b"mine", mode=CREATE)
    assert store.get("log/1.json").data == b"mine"  # the write landed; only the answer was lost
    with pytest.raises(AlreadyExists):  # a naive retry now "loses" to itself
        inst.put("log/1.json", b"mine", mode=CREATE)
    etag = store.head("log/1.json").etag
    inst.fail("PUT-if-match", after=True)
    with pytest.raises(StorageError):
        inst.put("log/1.json", b"changed", mode=IfMatch(etag))
    assert store.get("log/1.json").data == b"changed"
    inst.fail("DELETE", after=True)
    with pytest.raises(StorageError):
        inst.delete("log/1.json")
    assert not store.exists("log/1.json")


def test_copy_is_counted_slowed_and_faulted_like_other_requests(local_store: LocalStore) -> None:
    inst = InstrumentedStore(local_store, latency={"COPY": 0.1})
    inst.put("stage/a", b"a")
    with inst.scope("move"):
        t0 = time.perf_counter()
        inst.copy("stage/a", "t/a")
        assert time.perf_counter() - t0 >= 0.1
    assert inst.counts("move") == expected(COPY=1)
    fault = inst.fail("COPY", key_contains="t/b")  # faults match the destination
    with pytest.raises(StorageError, match="injected"):
        inst.copy("stage/a", "t/b")
    assert not local_store.exists("t/b") and fault.fired == 1
    inst.fail("COPY", after=True)
    with pytest.raises(StorageError):
        inst.copy("stage/a", "t/c")
    assert local_store.get("t/c").data == b"a"  # the copy landed; only the answer was lost
    assert inst.counts()["COPY"] == 3
    assert [(f.kind, f.key, f.after) for f in inst.injected] == [("COPY", "t/b", False), ("COPY", "t/c", True)]


def test_fault_error_kinds_and_times(inst: InstrumentedStore) -> None:
    inst.put("k", b"x")
    inst.fail("GET", times=2, error=PreconditionFailed)
    for _ in range(2):
        with pytest.raises(PreconditionFailed):
            inst.get("k")
    assert inst.get("k").data == b"x"
    inst.fail("HEAD", error=TimeoutError("socket timed out"))
    with pytest.raises(TimeoutError, match="socket timed out"):
        inst.head("k")
    inst.fail("*", error=lambda kind, key: ConnectionResetError(f"{kind} {key}"))
    with pytest.raises(ConnectionResetError, match="DELETE k"):
        inst.delete("k")
    assert inst.inner.exists("k")
    inst.fail("LIST", key_contains="logs/")
    assert list(inst.list("data/")) == []
    with pytest.raises(StorageError):
        inst.list("logs/")
    inst.fail("GET")
    inst.clear_faults()
    assert inst.get("k").data == b"x"


def test_fault_times_are_exact_across_threads(inst: InstrumentedStore) -> None:
    inst.put("k", b"x")
    fault = inst.fail("GET", times=50)
    failures = []

    def work(_: int) -> None:
        for _ in range(25):
            try:
                inst.get("k")
            except StorageError:
                failures.append(1)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert len(failures) == 50 == fault.fired
    assert inst.counts()["GET"] == 200


# -- chaos -----------------------------------------------------------------------------------------


def _pattern(store: InstrumentedStore, n: int) -> list[bool]:
    out = []
    for _ in range(n):
        try:
            store.head("k")
            out.append(True)
        except StorageError:
            out.append(False)
    return out


def test_fault_rate_is_seeded_and_roughly_right(local_store: LocalStore) -> None:
    local_store.put("k", b"x")
    a = _pattern(InstrumentedStore(local_store, fault_rate=0.25, seed=7), 400)
    b = _pattern(InstrumentedStore(local_store, fault_rate=0.25, seed=7), 400)
    c = _pattern(InstrumentedStore(local_store, fault_rate=0.25, seed=8), 400)
    assert a == b != c
    assert 60 <= a.count(False) <= 140


def test_fault_rate_limited_to_kinds_and_after(local_store: LocalStore) -> None:
    store = InstrumentedStore(local_store, fault_rate=1.0, fault_kinds=["PUT"], fault_after_rate=1.0, seed=1)
    for i in range(5):
        with pytest.raises(StorageError):
            store.put(f"k{i}", b"landed")
        assert store.get(f"k{i}").data == b"landed"  # GET is not a chaos kind; the put landed
    assert all(f.after for f in store.injected) and len(store.injected) == 5
    store.set_fault_rate(0.0)
    store.put("k9", b"fine")


# -- delegation ------------------------------------------------------------------------------------


def test_delegates_url_scheme_options_and_close(local_store: LocalStore) -> None:
    inst = InstrumentedStore(local_store)
    assert inst.scheme == "file"
    assert inst.url("a/b") == local_store.url("a/b")
    assert inst.url() == local_store.url()
    assert inst.storage_options_for_deltalake() == {}
    inst.close()
    assert "LocalStore" in repr(inst)
    assert inst.total() == 0  # none of these are requests
