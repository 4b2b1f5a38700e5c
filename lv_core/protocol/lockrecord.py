"""The validation lock's record (``_lakevilla/validation.lock``): its states and how it is read.

A record is "validating" or "committing" while a transaction holds the lock, and "free" once it was
released (older clients deleted the key instead: a missing key is free too). A free record names the
newest global version at its release (``head``): a holder that takes the lock with PUT-if-match on the
etag of the free record it wrote itself knows, from that one request, that nobody held the lock since,
so the global log's head is still the one it published (see :mod:`lv_core.protocol.vlock`).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import secrets
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from lv_core.protocol.commitplan import InvalidPlan, PlannedCommit, PlanResult, parse_group, parse_plan
from lv_core.protocol.layout import LV_ROOT, client_label

log = logging.getLogger(__name__)

LOCK_KEY = f"{LV_ROOT}/validation.lock"
VALIDATING = "validating"
COMMITTING = "committing"
FREE = "free"


@dataclass(frozen=True)
class LockRecord:
    """The content of the lock object.

    Attributes:
        txn: the holder.
        state: "validating", "committing", or "free" (released: nobody holds the lock).
        lease_s, lease_expires: the holder's lease (expiry by the holder's clock).
        client: host:pid of the holder (for humans).
        acquired: when the holder took it.
        gvl_base: the global version the plan builds on (informational while validating).
        plan: the table commits to write (committing only).
        plan_txn: whose commit the plan is (differs from ``txn`` while a taker rolls it forward).
        additions: read-only tables the global log did not know -> version to add them at.
        recovering: the crashed holder whose plan a taker is rolling forward.
        group: other transactions whose commits the plan holds (group commit) -> ``{"tables": [...],
            "validation": {...}}`` (their tables, and their validation outcome for their widgets).
        invalid: the record was "committing" but its plan (or additions, gvl base, plan txn) is
            malformed: ``plan`` and ``additions`` are then empty and it must never be rolled forward
            (only taken over after its lease, and rolled back). Never encoded.
        invalid_reason: why (for logs).
        head: in a "free" record, the newest global version when it was released (None: unknown).
        queued: in a "free" record, whether commit requests were queued (group commit) while it was held:
            the releaser then does not take it again without serving them (no starving the queue).
        nonce: makes every free record's bytes unique (S3 etags are content hashes).
    """

    txn: str
    state: str
    lease_s: float
    lease_expires: float
    client: str = ""
    acquired: float = 0.0
    gvl_base: int | None = None
    plan: tuple[PlannedCommit, ...] = ()
    plan_txn: str | None = None
    additions: Mapping[str, int] = field(default_factory=dict)
    recovering: str | None = None
    group: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    invalid: bool = False
    invalid_reason: str = ""
    head: int | None = None
    nonce: str = ""
    queued: bool = False

    def encode(self) -> bytes:
        if self.invalid:
            raise ValueError("an invalid lock record (malformed plan) must not be written back")
        if self.state == FREE:
            return json.dumps({"txn": self.txn, "state": FREE, "client": self.client, "released": self.acquired,
                               "head": self.head, "queued": self.queued, "nonce": self.nonce},
                              separators=(",", ":")).encode()
        body: dict[str, Any] = {
            "txn": self.txn, "state": self.state, "lease_s": self.lease_s, "lease_expires": self.lease_expires,
            "client": self.client, "acquired": self.acquired, "gvl_base": self.gvl_base,
        }
        if self.state == COMMITTING:
            body.update(plan=[e.to_json() for e in self.plan], plan_txn=self.plan_txn,
                        additions=dict(self.additions))
            if self.group:
                body["group"] = {m: {"tables": list(g["tables"]), "validation": g.get("validation") or {}}
                                 for m, g in self.group.items()}
        if self.recovering:
            body["recovering"] = self.recovering
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "LockRecord":
        """Parse a lock object.

        An unreadable one reads as an expired "validating" lock (safe to take). A "committing" one
        whose plan fails :func:`~lv_core.protocol.commitplan.parse_plan` (or whose ``gvl_base`` /
        ``plan_txn`` is malformed) reads with its lease, ``invalid=True``, an empty plan and no
        additions: nobody may roll it forward; it is taken over (rolled back) once its lease expired.

        Checking a plan decodes every commit it holds, so results are memoised by content (a waiter
        polls the same record many times; records are immutable).
        """
        if cls is LockRecord:
            return _decode_cached(bytes(data))
        return cls._parse(data)

    @classmethod
    def _parse(cls, data: bytes) -> "LockRecord":
        try:
            b = json.loads(data)
            state = str(b["state"])
            if state == FREE:
                head = b.get("head")
                return cls(txn=str(b.get("txn") or ""), state=FREE, lease_s=0.0, lease_expires=0.0,
                           client=str(b.get("client") or ""), acquired=float(b.get("released") or 0.0),
                           head=head if isinstance(head, int) and not isinstance(head, bool) and head >= -1 else None,
                           nonce=str(b.get("nonce") or ""), queued=b.get("queued") is not False)
            if state not in (VALIDATING, COMMITTING):
                raise ValueError(state)
            head = cls(
                txn=str(b["txn"]), state=state, lease_s=float(b["lease_s"]), lease_expires=float(b["lease_expires"]),
                client=str(b.get("client") or ""), acquired=float(b.get("acquired") or 0.0),
                recovering=None if b.get("recovering") is None else str(b["recovering"]),
            )
            if not (math.isfinite(head.lease_s) and math.isfinite(head.lease_expires)):
                raise ValueError("lease is not a finite number")  # NaN would never expire
            if state == VALIDATING:  # the gvl base is informational only: never executed
                return replace(head, gvl_base=None if b.get("gvl_base") is None else int(b["gvl_base"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            log.warning("unreadable %s: treating it as expired", LOCK_KEY)
            return cls(txn="?", state=VALIDATING, lease_s=0.0, lease_expires=0.0)
        gvl_base, plan_txn = b.get("gvl_base"), b.get("plan_txn")
        try:
            if gvl_base is not None and (isinstance(gvl_base, bool) or not isinstance(gvl_base, int) or gvl_base < -1):
                raise InvalidPlan(f"gvl_base must be an integer >= -1, not {gvl_base!r}")
            if plan_txn is not None and not (isinstance(plan_txn, str) and plan_txn):
                raise InvalidPlan(f"plan_txn must be a transaction id, not {plan_txn!r}")
            plan, additions = parse_plan(b.get("plan"), b.get("additions"))
            group = parse_group(b.get("group"), plan)
        except InvalidPlan as e:
            log.debug("%s of %s holds an invalid plan: %s", LOCK_KEY, head.txn, e)
            return replace(head, gvl_base=gvl_base if isinstance(gvl_base, int) and not isinstance(gvl_base, bool)
                           else None, plan_txn=plan_txn if isinstance(plan_txn, str) else None,
                           invalid=True, invalid_reason=str(e))
        # read-only view: decoded records are shared (memoised)
        return replace(head, gvl_base=gvl_base, plan=plan, plan_txn=plan_txn, additions=MappingProxyType(additions),
                       group=MappingProxyType(group))


@functools.lru_cache(maxsize=8)
def _decode_cached(data: bytes) -> LockRecord:
    return LockRecord._parse(data)


@dataclass(frozen=True)
class FreeSlot:
    """A free record of the lock: its etag (to claim it with PUT-if-match) and the head it names."""

    etag: str
    head: int | None
    queued: bool = True  # requests were (or may have been) queued while it was held


def slot_of(found: tuple[LockRecord, str] | None) -> FreeSlot | None:
    """The free record :meth:`ValidationLock.look` found, if it can be claimed with a plan (it names its
    head); None for a held lock, no key, or a free record of an older release without head."""
    if found is None or found[0].state != FREE or found[0].head is None:
        return None
    return FreeSlot(found[1], found[0].head, found[0].queued)


@dataclass(frozen=True)
class Takeover:
    """A lock taken over from a crashed holder.

    Attributes:
        previous_txn, previous_state: the record found expired.
        action: "rolled-back" (was validating: nothing to do), "rolled-forward" (its plan is now
            committed and published), "plan-rolled-back" (its plan broke, see ``result``),
            "invalid-plan-rolled-back" (was committing a malformed plan: it was not executed).
        result: the roll forward's outcome (None for "rolled-back" and "invalid-plan-rolled-back").
    """

    previous_txn: str
    previous_state: str
    action: str
    result: PlanResult | None = None


def free_record(txn: str, head: int | None, queued: bool = True) -> LockRecord:
    """The record a holder leaves when it releases the lock (``head``: the newest global version it knows;
    ``queued``: requests were (or may have been) queued meanwhile)."""
    return LockRecord(txn, FREE, 0.0, 0.0, client_label(), time.time(), head=head, nonce=secrets.token_hex(8),
                      queued=queued)


__all__ = ["COMMITTING", "FREE", "LOCK_KEY", "VALIDATING", "FreeSlot", "LockRecord", "Takeover",
           "free_record", "slot_of"]
