"""Will LakeVilla work on this store? Checks of the object-store behaviour the protocol rests on.

Every LakeVilla guarantee rests on the store's conditional writes: put-if-absent (S3
``If-None-Match: *``) decides which writer gets a Delta version, marker or global version, and
PUT-if-match (``If-Match: <etag>``) makes the validation key and marker updates compare-and-swap.
Many S3-compatible servers ignored those headers for years (a second writer then silently overwrites
the first), some still get them wrong under concurrency. :func:`run_checks` tries each behaviour on a
scratch prefix of the warehouse (and removes it afterwards) and says, for every failed check, what
LakeVilla cannot promise on that store.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, TypeVar

from lv_core.errors import AlreadyExists, LvError, NotFound, PreconditionFailed
from lv_core.storage.base import CREATE, OVERWRITE, IfMatch, ObjectStore

__all__ = ["CONDITIONAL", "CheckResult", "DoctorReport", "Status", "doctor", "run_checks", "scratch_prefix",
           "unguarded"]

T = TypeVar("T")

#: the checks every write path needs (the write guard runs these)
CONDITIONAL = ("put-if-absent", "if-match-stale")
#: a skew between the store's clock and this client's above this many seconds is reported
SKEW_WARN_S = 5.0


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check: its outcome, what was seen, and (when it failed) what LakeVilla cannot promise."""

    name: str
    status: Status
    detail: str
    means: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail, "means": self.means}


@dataclass(frozen=True)
class DoctorReport:
    """Every check's result and the median latency of each request kind (milliseconds)."""

    store: str
    checks: tuple[CheckResult, ...]
    latency_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status is Status.FAIL)

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "ok": self.ok, "checks": [c.to_json() for c in self.checks],
                "latency_ms": dict(self.latency_ms)}

    def to_text(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [f"lv doctor: {self.store}"]
        for c in self.checks:
            lines.append(f"  {c.status.value.upper():4}  {c.name:{width}}  {c.detail}")
            if c.status is not Status.PASS and c.means:
                lines.append(f"        {'':{width}}  -> {c.means}")
        if self.latency_ms:
            lat = ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.latency_ms.items()))
            lines.append(f"  latency (median ms): {lat}")
        if self.failed:
            lines.append(f"  {len(self.failed)} check(s) failed: {', '.join(c.name for c in self.failed)}. "
                         "LakeVilla refuses to write to this store.")
        else:
            lines.append("  every check passed: LakeVilla's guarantees hold on this store.")
        return "\n".join(lines)

    def to_html(self) -> str:
        import html

        color = {Status.PASS: "#1a7f37", Status.WARN: "#9a6700", Status.FAIL: "#cf222e"}
        rows = "".join(
            f"<tr><td style='color:{color[c.status]};font-weight:bold'>{c.status.value}</td>"
            f"<td><code>{html.escape(c.name)}</code></td><td>{html.escape(c.detail)}</td>"
            f"<td>{html.escape(c.means if c.status is not Status.PASS else '')}</td></tr>" for c in self.checks)
        lat = ", ".join(f"{html.escape(k)} {v:.1f} ms" for k, v in sorted(self.latency_ms.items()))
        verdict = ("every check passed" if self.ok else
                   f"{len(self.failed)} check(s) failed: LakeVilla refuses to write to this store")
        return (f"<div><b>lv doctor</b> <code>{html.escape(self.store)}</code>: {verdict}"
                "<table><tr><th>result</th><th>check</th><th>seen</th><th>what it means</th></tr>"
                f"{rows}</table><small>latency (median): {lat}</small></div>")


class _Timer:
    """Times store requests by kind."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, kind: str, fn: Callable[[], T]) -> T:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            with self._lock:
                self.samples[kind].append((time.perf_counter() - t0) * 1000)

    def medians(self) -> dict[str, float]:
        return {k: round(statistics.median(v), 2) for k, v in self.samples.items() if v}


def scratch_prefix() -> str:
    """A fresh scratch prefix under the warehouse's LakeVilla folder."""
    return f"_lakevilla/doctor/{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}/"


def _put_if_absent(store: ObjectStore, base: str, t: _Timer) -> CheckResult:
    key = base + "pia"
    t("PUT-create", lambda: store.put(key, b"first", mode=CREATE))
    try:
        t("PUT-create", lambda: store.put(key, b"second", mode=CREATE))
    except AlreadyExists:
        got = t("GET", lambda: store.get(key)).data
        if got != b"first":
            return CheckResult("put-if-absent", Status.FAIL, f"the refused second create changed the object to {got!r}",
                               "a losing writer overwrites the winner")
        return CheckResult("put-if-absent", Status.PASS, "a second create of the same key is refused")
    return CheckResult("put-if-absent", Status.FAIL,
                       "a second create of an existing key succeeded: the store ignores If-None-Match",
                       "two writers can both 'win' a Delta version, marker or global version: commits are lost "
                       "silently and no isolation or atomicity holds")


def _put_if_absent_concurrent(store: ObjectStore, base: str, t: _Timer, writers: int, rounds: int) -> CheckResult:
    for r in range(rounds):
        key = f"{base}race-{r}"
        start = threading.Barrier(writers)
        wins: list[int] = []
        errors: list[str] = []

        def create(i: int, key: str = key, start: threading.Barrier = start,
                   wins: list[int] = wins, errors: list[str] = errors) -> None:
            start.wait()
            try:
                t("PUT-create", lambda: store.put(key, f"writer {i}".encode(), mode=CREATE))
                wins.append(i)
            except AlreadyExists:
                pass
            except LvError as e:
                errors.append(str(e))

        threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            return CheckResult("put-if-absent-concurrent", Status.FAIL, f"round {r + 1}: {errors[0]}",
                               "concurrent commits fail with store errors")
        got = t("GET", lambda key=key: store.get(key)).data  # type: ignore[misc]
        if len(wins) != 1 or got != f"writer {wins[0]}".encode():
            return CheckResult("put-if-absent-concurrent", Status.FAIL,
                               f"round {r + 1} of {rounds}: {len(wins)} of {writers} concurrent creators won",
                               "under contention two writers can both take a version: commits are lost silently")
    return CheckResult("put-if-absent-concurrent", Status.PASS,
                       f"{rounds} rounds of {writers} concurrent creators of one key: one winner each")


def _if_match(store: ObjectStore, base: str, t: _Timer) -> list[CheckResult]:
    key = base + "cas"
    old = t("PUT", lambda: store.put(key, b"v1", mode=OVERWRITE))
    new = t("PUT", lambda: store.put(key, b"v2", mode=OVERWRITE))
    out = []
    try:
        t("PUT-if-match", lambda: store.put(key, b"stale", mode=IfMatch(old)))
        out.append(CheckResult("if-match-stale", Status.FAIL,
                               "a write conditioned on a stale ETag succeeded: the store ignores If-Match",
                               "marker and validation-key updates are not compare-and-swap: a client can free a "
                               "marker its owner just committed, two validators can hold the key"))
    except PreconditionFailed:
        out.append(CheckResult("if-match-stale", Status.PASS, "a write conditioned on a stale ETag is refused"))
    try:
        t("PUT-if-match", lambda: store.put(key, b"v3", mode=IfMatch(new)))
        got = t("GET", lambda: store.get(key)).data
        status = Status.PASS if got == b"v3" else Status.FAIL
        out.append(CheckResult("if-match-current", status, "a write conditioned on the current ETag succeeds"
                               if status is Status.PASS else f"it succeeded but the object reads {got!r}",
                               "compare-and-swap loses updates"))
    except PreconditionFailed:
        out.append(CheckResult("if-match-current", Status.FAIL,
                               "a write conditioned on the current ETag was refused (the ETag a PUT returns is not "
                               "the one If-Match compares)", "every marker update and key release fails"))
    try:
        t("PUT-if-match", lambda: store.put(base + "missing", b"x", mode=IfMatch(new)))
        out.append(CheckResult("if-match-missing", Status.FAIL, "a write conditioned on an ETag created a missing key",
                               "a freed-and-removed object can be brought back"))
    except (PreconditionFailed, NotFound):
        out.append(CheckResult("if-match-missing", Status.PASS,
                               "a write conditioned on an ETag of a missing key is refused"))
    return out


def _read_after_write(store: ObjectStore, base: str, t: _Timer) -> CheckResult:
    key = base + "raw"
    for i in range(5):
        data = f"value {i} {uuid.uuid4().hex}".encode()
        etag = t("PUT", lambda data=data: store.put(key, data))  # type: ignore[misc]
        got = t("GET", lambda: store.get(key))
        meta = t("HEAD", lambda: store.head(key))
        if got.data != data or meta.size != len(data):
            return CheckResult("read-after-write", Status.FAIL,
                               f"write {i + 1}: a read right after it returned older bytes",
                               "readers can miss commits that just landed (stale snapshots, missed markers)")
        if got.etag != etag or meta.etag != etag:
            return CheckResult("read-after-write", Status.WARN, "GET/HEAD report another ETag than the PUT returned",
                               "conditional writes on ETags read back may fail needlessly")
    return CheckResult("read-after-write", Status.PASS, "5 overwrites, each read back at once (GET and HEAD)")


def _list_after_write(store: ObjectStore, base: str, t: _Timer) -> CheckResult:
    keys = [f"{base}list/{i:03d}" for i in range(5)]
    for k in keys:
        t("PUT", lambda k=k: store.put(k, b"x"))  # type: ignore[misc]
    listed = t("LIST", lambda: [m.key for m in store.list(base + "list/")])
    if listed != keys:
        return CheckResult("list-after-write", Status.FAIL, f"LIST right after 5 writes showed {len(listed)} of them "
                           "(or out of order)", "recovery and read-forward can miss markers")
    t("DELETE", lambda: store.delete(keys[0]))
    listed = t("LIST", lambda: [m.key for m in store.list(base + "list/")])
    if keys[0] in listed:
        return CheckResult("list-after-write", Status.FAIL, "LIST right after a DELETE still showed the object",
                           "recovery can act on objects already gone")
    return CheckResult("list-after-write", Status.PASS, "LIST shows 5 new objects in key order, and not a deleted one")


def _delete(store: ObjectStore, base: str, t: _Timer) -> CheckResult:
    key = base + "del"
    t("PUT", lambda: store.put(key, b"x"))
    t("DELETE", lambda: store.delete(key))
    try:
        t("GET", lambda: store.get(key))
        return CheckResult("delete", Status.FAIL, "a deleted object can still be read",
                           "clean-up and VACUUM are unreliable")
    except NotFound:
        pass
    try:
        t("DELETE", lambda: store.delete(key))
    except NotFound:
        return CheckResult("delete", Status.WARN, "deleting a missing key is an error",
                           "repeated clean-ups report needless errors")
    try:
        t("PUT-create", lambda: store.put(key, b"again", mode=CREATE))
    except AlreadyExists:
        return CheckResult("delete", Status.FAIL, "a deleted key cannot be created again",
                           "a withdrawn marker blocks its version for ever")
    return CheckResult("delete", Status.PASS, "a deleted key reads as missing, deletes twice, and can be created again")


def _clock(store: ObjectStore, base: str, t: _Timer) -> CheckResult:
    key = base + "clock"
    before = time.time()
    t("PUT", lambda: store.put(key, b"x"))
    after = time.time()
    stamp = t("HEAD", lambda: store.head(key)).last_modified
    if not stamp:
        return CheckResult("clock", Status.WARN, "the store reports no modification time", "")
    # S3 stamps whole seconds: allow one second of rounding on either side
    skew = 0.0 if before - 1.0 <= stamp <= after + 1.0 else (stamp - after if stamp > after else stamp - before)
    detail = f"the store's clock is {abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} this client's"
    if abs(skew) > SKEW_WARN_S:
        return CheckResult("clock", Status.WARN, detail,
                           f"give `lv recover --grace` more than {abs(skew):.0f} s (waiting transactions do not "
                           "trust clocks; recover and the inspector's 'expired' label do)")
    agrees = "the store's clock agrees with this client's (within 1 s)"
    return CheckResult("clock", Status.PASS, detail if skew else agrees)


def _clean(store: ObjectStore, base: str) -> None:
    for meta in list(store.list(base)):
        try:
            store.delete(meta.key)
        except LvError:
            pass


def run_checks(store: ObjectStore, *, writers: int = 8, rounds: int = 10, only: tuple[str, ...] | None = None,
               prefix: str | None = None) -> DoctorReport:
    """Run the checks (``only``: just those names, e.g. :data:`CONDITIONAL`) on a scratch prefix of
    ``store``, then remove it. A check that raises a store error fails with that error."""
    base = prefix or scratch_prefix()
    t = _Timer()
    steps: list[tuple[tuple[str, ...], Callable[[], list[CheckResult]]]] = [
        (("put-if-absent",), lambda: [_put_if_absent(store, base, t)]),
        (("put-if-absent-concurrent",), lambda: [_put_if_absent_concurrent(store, base, t, writers, rounds)]),
        (("if-match-stale", "if-match-current", "if-match-missing"), lambda: _if_match(store, base, t)),
        (("read-after-write",), lambda: [_read_after_write(store, base, t)]),
        (("list-after-write",), lambda: [_list_after_write(store, base, t)]),
        (("delete",), lambda: [_delete(store, base, t)]),
        (("clock",), lambda: [_clock(store, base, t)]),
    ]
    results: list[CheckResult] = []
    try:
        for names, step in steps:
            if only is not None and not set(names) & set(only):
                continue
            try:
                results += [r for r in step() if only is None or r.name in only]
            except LvError as e:
                results += [CheckResult(n, Status.FAIL, f"the store failed: {e}", "requests of this kind fail")
                            for n in names if only is None or n in only]
    finally:
        _clean(store, base)
    return DoctorReport(store.url(""), tuple(results), t.medians())


def unguarded(store: ObjectStore) -> ObjectStore:
    """The store's requests without its write guard (the checks must reach a store the guard refuses)."""
    guard = getattr(store, "guard", None)
    raw = getattr(guard, "raw", None)
    return raw if isinstance(raw, ObjectStore) else store


def doctor(store: ObjectStore, **kwargs: Any) -> DoctorReport:
    """Run every check on ``store`` and record the conditional-write verdict its write guard keeps
    (so a store fixed since, or one that failed since, is judged anew)."""
    report = run_checks(unguarded(store), **kwargs)
    guard = getattr(store, "guard", None)
    if guard is not None and hasattr(guard, "record_checks"):
        guard.record_checks(report)
    return report
