"""A wrapper around any :class:`ObjectStore` that counts requests and injects latency and faults.

Request kinds (as an S3 bill counts them): ``GET``, ``PUT`` (overwrite), ``PUT-create``,
``PUT-if-match``, ``HEAD``, ``DELETE``, ``LIST`` (one per page of up to 1000 keys) and ``COPY``
(a server-side copy; faults match its destination key). Every attempted request is counted,
including the ones a fault makes fail.

Counts go to a global total and to every scope active in the calling thread::

    store = InstrumentedStore(LocalStore(path), latency={"GET": 0.02})
    with store.scope("txn-1"):
        store.get("k")
    store.counts("txn-1")["GET"]   # -> 1

Faults: :meth:`InstrumentedStore.fail` arms deterministic faults for the next matching requests;
``fault_rate``/``seed`` inject random ones (chaos tests). A fault with ``after=True`` performs the
request first and then raises: the write landed but the caller never heard (a lost response).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

from lv_core.errors import StorageError
from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode

#: Every request kind, in a fixed order.
KINDS: tuple[str, ...] = ("GET", "PUT", "PUT-create", "PUT-if-match", "HEAD", "DELETE", "LIST", "COPY")
#: The kinds that change the store (where ``after=True`` means "the write landed").
WRITE_KINDS = frozenset({"PUT", "PUT-create", "PUT-if-match", "DELETE", "COPY"})
#: Keys per LIST page (S3 ``ListObjectsV2`` default and maximum).
LIST_PAGE_SIZE = 1000

#: What a fault raises: an exception class (called with a message), an instance, or a
#: callable ``(kind, key) -> BaseException``.
ErrorSpec = Union[type[BaseException], BaseException, Callable[[str, str], BaseException]]
T = TypeVar("T")


def put_kind(mode: PutMode) -> str:
    """The request kind of a put in ``mode``."""
    if mode == CREATE:
        return "PUT-create"
    if isinstance(mode, IfMatch):
        return "PUT-if-match"
    if mode == OVERWRITE:
        return "PUT"
    raise ValueError(f"unknown put mode {mode!r}")


def _check_kind(kind: str) -> str:
    if kind != "*" and kind not in KINDS:
        raise ValueError(f"unknown request kind {kind!r}; expected one of {', '.join(KINDS)} or '*'")
    return kind


@dataclass
class Fault:
    """An armed fault: the next ``remaining`` requests of ``kind`` whose key contains ``key_contains``."""

    kind: str
    key_contains: str | None
    remaining: int
    error: ErrorSpec
    after: bool
    fired: int = 0
    skip: int = 0  # matching requests still let through before the fault fires

    def matches(self, kind: str, key: str) -> bool:
        return (
            self.remaining > 0
            and self.kind in ("*", kind)
            and (self.key_contains is None or self.key_contains in key)
        )


@dataclass(frozen=True)
class InjectedFault:
    """A record of one fault that fired."""

    kind: str
    key: str
    after: bool


def _make_error(spec: ErrorSpec, kind: str, key: str, after: bool) -> BaseException:
    if isinstance(spec, BaseException):
        return spec
    if isinstance(spec, type):
        when = "after the request was applied" if after else "before the request was sent"
        return spec(f"injected fault: {kind} {key!r} ({when})")
    return spec(kind, key)


#: Called (no arguments) before counts are reset: wait for background requests of earlier operations.
QUIESCE: list[Callable[[], Any]] = []


class InstrumentedStore(ObjectStore):
    """Counts requests per kind and scope; injects latency and faults. Thread-safe.

    Args:
        inner: the store to wrap.
        latency: seconds to sleep before each request, one float for all kinds or per kind.
        fault_rate: probability that a request fails (chaos mode; 0 disables it).
        seed: seed of the chaos random generator (reproducible runs).
        fault_kinds: kinds chaos may hit (default: all).
        fault_after_rate: probability that a chaos fault on a write happens after the write landed.
        fault_error: what chaos faults raise (default :class:`StorageError`).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        latency: float | Mapping[str, float] | None = None,
        fault_rate: float = 0.0,
        seed: int | None = None,
        fault_kinds: Iterable[str] | None = None,
        fault_after_rate: float = 0.0,
        fault_error: ErrorSpec = StorageError,
    ) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._local = threading.local()
        self._total: Counter[str] = Counter()
        self._scoped: dict[str, Counter[str]] = {}
        self._faults: list[Fault] = []
        self.injected: list[InjectedFault] = []
        self._latency: dict[str, float] = {}
        self.set_latency(latency)
        self._rng = random.Random(seed)
        self._chaos_rate = 0.0
        self._chaos_kinds: frozenset[str] = frozenset(KINDS)
        self._chaos_after = 0.0
        self._chaos_error: ErrorSpec = StorageError
        self.set_fault_rate(fault_rate, kinds=fault_kinds, after_rate=fault_after_rate, error=fault_error)

    def __repr__(self) -> str:
        return f"InstrumentedStore({self.inner!r})"

    # -- configuration -------------------------------------------------------------------------

    @property
    def scheme(self) -> str:  # type: ignore[override]
        return self.inner.scheme

    def set_latency(self, latency: float | Mapping[str, float] | None) -> None:
        """Replace the injected latency (seconds; one float for all kinds, or per kind)."""
        if latency is None:
            table = {}
        elif isinstance(latency, Mapping):
            table = {_check_kind(k): float(v) for k, v in latency.items()}
            if "*" in table:
                star = table.pop("*")
                table = {k: table.get(k, star) for k in KINDS}
        else:
            table = {k: float(latency) for k in KINDS}
        if any(v < 0 for v in table.values()):
            raise ValueError("latency must be >= 0")
        with self._lock:
            self._latency = table

    def set_fault_rate(
        self,
        rate: float,
        *,
        kinds: Iterable[str] | None = None,
        after_rate: float = 0.0,
        error: ErrorSpec = StorageError,
        seed: int | None = None,
    ) -> None:
        """Configure chaos mode: each request of ``kinds`` fails with probability ``rate``."""
        if not (0.0 <= rate <= 1.0 and 0.0 <= after_rate <= 1.0):
            raise ValueError("fault rates must be within [0, 1]")
        chosen = frozenset(_check_kind(k) for k in kinds) if kinds is not None else frozenset(KINDS)
        with self._lock:
            self._chaos_rate = rate
            self._chaos_kinds = frozenset(KINDS) if "*" in chosen else chosen
            self._chaos_after = after_rate
            self._chaos_error = error
            if seed is not None:
                self._rng.seed(seed)

    def fail(
        self,
        kind: str,
        *,
        key_contains: str | None = None,
        times: int = 1,
        error: ErrorSpec = StorageError,
        after: bool = False,
        skip: int = 0,
    ) -> Fault:
        """Make the next ``times`` requests of ``kind`` (``"*"``: any) whose key contains ``key_contains``
        raise, after letting the first ``skip`` of them through.

        With ``after=True`` the request is performed first (a write lands, a read is served) and
        the error is raised afterwards, modelling a lost response. Returns the armed :class:`Fault`
        (its ``fired`` and ``remaining`` show what happened).
        """
        if times < 1:
            raise ValueError("times must be >= 1")
        if skip < 0:
            raise ValueError("skip must be >= 0")
        fault = Fault(_check_kind(kind), key_contains, times, error, after, skip=skip)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Disarm every deterministic fault and turn chaos mode off."""
        with self._lock:
            self._faults.clear()
            self._chaos_rate = 0.0

    # -- counting ------------------------------------------------------------------------------

    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Count the requests this thread makes inside the block under ``name`` (nestable)."""
        stack = self._stack()
        stack.append(name)
        try:
            yield
        finally:
            stack.pop()

    def counts(self, scope: str | None = None) -> dict[str, int]:
        """Requests per kind (every kind present, zeros included): global, or of one scope."""
        with self._lock:
            source = self._total if scope is None else self._scoped.get(scope, Counter())
            return {k: source[k] for k in KINDS}

    def total(self, scope: str | None = None) -> int:
        """All requests, global or of one scope."""
        return sum(self.counts(scope).values())

    def reset(self) -> None:
        """Zero all counts (global and every scope) and forget injected-fault records, once the
        background work of earlier operations (e.g. a finished transaction's clean-up, see
        :data:`QUIESCE`) has run, so that it is not counted against what comes next."""
        for hook in QUIESCE:
            hook()
        with self._lock:
            self._total.clear()
            self._scoped.clear()
            self.injected.clear()

    def _count(self, kind: str) -> None:
        scopes = set(self._stack())
        with self._lock:
            self._total[kind] += 1
            for name in scopes:
                self._scoped.setdefault(name, Counter())[kind] += 1

    # -- the request pipeline ------------------------------------------------------------------

    def _decide(self, kind: str, key: str) -> tuple[ErrorSpec, bool] | None:
        """Pick the fault (error, after) for this request, if any."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(kind, key):
                    if fault.skip > 0:
                        fault.skip -= 1
                        continue
                    fault.remaining -= 1
                    fault.fired += 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault.error, fault.after
            if self._chaos_rate and kind in self._chaos_kinds and self._rng.random() < self._chaos_rate:
                after = kind in WRITE_KINDS and self._rng.random() < self._chaos_after
                return self._chaos_error, after
        return None

    def _request(self, kind: str, key: str, call: Callable[[], T]) -> T:
        self._count(kind)
        delay = self._latency.get(kind, 0.0)
        if delay:
            time.sleep(delay)
        decision = self._decide(kind, key)
        if decision is None:
            return call()
        spec, after = decision
        if after:
            call()  # the request happens (and may itself fail); its response is lost
        with self._lock:
            self.injected.append(InjectedFault(kind, key, after))
        raise _make_error(spec, kind, key, after)

    # -- ObjectStore ---------------------------------------------------------------------------

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        return self._request("GET", key, lambda: self.inner.get(key, byte_range=byte_range))

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        return self._request(put_kind(mode), key, lambda: self.inner.put(key, data, mode=mode))

    def head(self, key: str) -> ObjectMeta:
        return self._request("HEAD", key, lambda: self.inner.head(key))

    def copy(self, src: str, dst: str) -> str:
        return self._request("COPY", dst, lambda: self.inner.copy(src, dst))

    def delete(self, key: str) -> None:
        self._request("DELETE", key, lambda: self.inner.delete(key))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Counts one LIST now (the first page) and one more per further page of 1000 keys.

        The first page is fetched eagerly, so latency and faults hit the call itself.
        """

        def first_page() -> tuple[list[ObjectMeta], Iterator[ObjectMeta]]:
            it = iter(self.inner.list(prefix, start_after=start_after))
            page = [m for _, m in zip(range(LIST_PAGE_SIZE), it, strict=False)]
            return page, it

        page, rest = self._request("LIST", prefix, first_page)
        return self._pages(prefix, page, rest)

    # (Sequence, not list: in the class body ``list`` names the method above)
    def _pages(self, prefix: str, page: Sequence[ObjectMeta], rest: Iterator[ObjectMeta]) -> Iterator[ObjectMeta]:
        yield from page
        if len(page) < LIST_PAGE_SIZE:
            return
        while True:
            try:
                first = next(rest)
            except StopIteration:
                return

            def next_page(first: ObjectMeta = first) -> list[ObjectMeta]:
                return [first, *(m for _, m in zip(range(LIST_PAGE_SIZE - 1), rest, strict=False))]

            page = self._request("LIST", prefix, next_page)
            yield from page
            if len(page) < LIST_PAGE_SIZE:
                return

    def url(self, key: str = "") -> str:
        return self.inner.url(key)

    def storage_options_for_deltalake(self) -> dict[str, str]:
        return self.inner.storage_options_for_deltalake()

    def close(self) -> None:
        self.inner.close()
