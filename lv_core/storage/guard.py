"""No silent writes on a store that cannot put-if-absent.

Every guarantee LakeVilla gives rests on the store refusing a second create of a key (``If-None-Match:
*``) and a write on a stale ETag (``If-Match``). A store that ignores those headers accepts both, so a
second ``create_table`` or a lost commit race overwrites data without a word. Before its first write a
store checks that it does not (once per store identity and process: the verdict is kept in memory
and on the store, ``_lakevilla/doctor/conditional-writes/<id>.json``, so a client that finds it
there pays one small GET), and refuses every write with :class:`~lv_core.errors.UnsafeStore` naming the
failed check and ``lv doctor`` when it failed. Reads stay allowed. ``lv doctor`` runs the full checks
and records a new verdict (after a server upgrade, say).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from lv_core.errors import NotFound, StorageError, UnsafeStore
from lv_core.storage.base import ObjectStore

__all__ = ["VERDICT_PREFIX", "Verdict", "WriteGuard", "forget_verdicts", "verdict_key"]

VERDICT_PREFIX = "_lakevilla/doctor/conditional-writes/"

_KNOWN: dict[str, "Verdict"] = {}
_KNOWN_LOCK = threading.Lock()


@dataclass(frozen=True)
class Verdict:
    """Whether the conditional-write checks passed on a store, and which failed."""

    ok: bool
    failed: tuple[str, ...] = ()
    details: tuple[str, ...] = ()

    def to_json(self, identity: str) -> bytes:
        return json.dumps({"ok": self.ok, "failed": list(self.failed), "details": list(self.details),
                           "store": identity, "checked": time.time()}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Verdict":
        body = json.loads(data)
        return cls(bool(body["ok"]), tuple(body.get("failed") or ()), tuple(body.get("details") or ()))


def forget_verdicts() -> None:
    """Forget the verdicts this process learnt (as a new process starts; tests)."""
    with _KNOWN_LOCK:
        _KNOWN.clear()


def verdict_key(identity: str) -> str:
    return f"{VERDICT_PREFIX}{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


class WriteGuard:
    """Checks once that ``raw`` (the store's unguarded requests) honours conditional writes.

    ``identity`` names the store as reached (endpoint, bucket, prefix; never credentials): a proxy in
    front of the same bucket is another identity with a verdict of its own."""

    def __init__(self, raw: ObjectStore, identity: str, *, trusted: bool = False) -> None:
        """``trusted``: skip the check (the caller vouches for the store, e.g. ``lv doctor`` passed it)."""
        self.raw = raw
        self.identity = identity
        self._ok = trusted
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Return when writes are allowed; raise UnsafeStore when the store failed the check."""
        if self._ok:
            return
        with self._lock:
            verdict = self._verdict()
        if not verdict.ok:
            raise UnsafeStore(
                f"LakeVilla refuses to write to {self.raw.url('')}: it failed the conditional-write check "
                f"({'; '.join(verdict.details) or ', '.join(verdict.failed)}). On such a store a second writer "
                "silently overwrites the first (lost commits, no isolation). Help: run `lv doctor "
                f"{self.raw.url('')}` for every check; use a store that honours If-None-Match and If-Match "
                "(AWS S3, recent MinIO, R2, SeaweedFS >= 4.0). Reads still work.")
        self._ok = True

    def record(self, verdict: Verdict) -> None:
        """Remember a verdict (``lv doctor`` ran the checks) here and on the store."""
        with _KNOWN_LOCK:
            _KNOWN[self.identity] = verdict
        self._ok = verdict.ok
        try:
            self.raw.put(verdict_key(self.identity), verdict.to_json(self.identity))
        except StorageError:
            pass  # checked again by the next client

    def record_checks(self, report: Any) -> None:
        """Record the verdict of ``lv doctor``'s checks (a :class:`~lv_core.doctor.checks.DoctorReport`)."""
        self.record(_verdict_of(report))

    def _verdict(self) -> Verdict:
        with _KNOWN_LOCK:
            known = _KNOWN.get(self.identity)
        if known is not None:
            return known
        try:
            verdict = Verdict.from_json(self.raw.get(verdict_key(self.identity)).data)
        except (NotFound, ValueError, KeyError, TypeError):  # no verdict yet, or an unreadable one: check now
            verdict = self._check()
            self.record(verdict)  # remembered here and on the store
            return verdict
        with _KNOWN_LOCK:
            _KNOWN[self.identity] = verdict
        return verdict

    def _check(self) -> Verdict:
        from lv_core.doctor.checks import CONDITIONAL, run_checks

        return _verdict_of(run_checks(self.raw, only=CONDITIONAL))


def _verdict_of(report: Any) -> Verdict:
    """The conditional-write verdict of a doctor report (its failed conditional checks)."""
    from lv_core.doctor.checks import CONDITIONAL, Status

    failed = [c for c in report.checks if c.name in CONDITIONAL and c.status is Status.FAIL]
    return Verdict(not failed, tuple(c.name for c in failed), tuple(c.detail for c in failed))
