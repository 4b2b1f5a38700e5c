"""The validation lock's record (``_lakevilla/validation.lock``): "validating" or "committing" while held,
"free" once released (a missing key is free too), naming the newest global version at release (``head``)."""

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
        txn, client, acquired: the holder (or last holder), its host:pid, when it took (or released) the lock.
        gvl_base: the global version the plan builds on (informational while validating).
        plan, plan_txn, additions, group: committing only: the table commits, whose they are (while a taker
            rolls them forward, ``recovering`` names it too), tables to add, other transactions committed.
        invalid: a malformed "committing" record: never rolled forward, only taken over. Never encoded.
        head, queued, nonce: free only: the newest global version at release (None: unknown); whether
            requests were queued meanwhile (the releaser serves them first); unique bytes (S3 etags hash).
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
            body: dict[str, Any] = {"txn": self.txn, "state": FREE, "client": self.client, "released": self.acquired,
                                    "head": self.head, "queued": self.queued, "nonce": self.nonce}
        else:
            body = {"txn": self.txn, "state": self.state, "lease_s": self.lease_s, "lease_expires": self.lease_expires,
                    "client": self.client, "acquired": self.acquired, "gvl_base": self.gvl_base}
        if self.state == COMMITTING:
            body.update(plan=[e.to_json() for e in self.plan], plan_txn=self.plan_txn, additions=dict(self.additions))
            if self.group:
                body["group"] = {m: {"tables": list(g["tables"]), "validation": g.get("validation") or {},
                                     **({"at": dict(g["at"])} if g.get("at") else {})} for m, g in self.group.items()}
        if self.recovering:
            body["recovering"] = self.recovering
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "LockRecord":
        """Parse a lock object: an unreadable one reads as an expired "validating" lock, a malformed plan as
        ``invalid``. Memoised: a waiter polls the same record many times, and checking a plan decodes it."""
        return _decode(bytes(data))


def _version(v: object) -> int | None:
    """``v`` if it is a global version (an int >= -1, not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= -1 else None


@functools.lru_cache(maxsize=8)
def _decode(data: bytes) -> LockRecord:
    try:
        b = json.loads(data)
        state = str(b["state"])
        if state == FREE:
            return LockRecord(str(b.get("txn") or ""), FREE, 0.0, 0.0, str(b.get("client") or ""),
                              float(b.get("released") or 0.0), head=_version(b.get("head")),
                              nonce=str(b.get("nonce") or ""), queued=b.get("queued") is not False)
        if state not in (VALIDATING, COMMITTING):
            raise ValueError(state)
        rec = LockRecord(str(b["txn"]), state, float(b["lease_s"]), float(b["lease_expires"]),
                         str(b.get("client") or ""), float(b.get("acquired") or 0.0),
                         recovering=None if b.get("recovering") is None else str(b["recovering"]))
        if not (math.isfinite(rec.lease_s) and math.isfinite(rec.lease_expires)):
            raise ValueError("lease is not a finite number")  # NaN would never expire
        if state == VALIDATING:  # the gvl base is informational only: never executed
            return replace(rec, gvl_base=None if b.get("gvl_base") is None else int(b["gvl_base"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("unreadable %s: treating it as expired", LOCK_KEY)
        return LockRecord(txn="?", state=VALIDATING, lease_s=0.0, lease_expires=0.0)
    gvl_base, plan_txn = b.get("gvl_base"), b.get("plan_txn")
    rec = replace(rec, gvl_base=_version(gvl_base), plan_txn=plan_txn if isinstance(plan_txn, str) else None)
    try:
        if gvl_base is not None and rec.gvl_base is None:
            raise InvalidPlan(f"gvl_base must be an integer >= -1, not {gvl_base!r}")
        if plan_txn is not None and not (isinstance(plan_txn, str) and plan_txn):
            raise InvalidPlan(f"plan_txn must be a transaction id, not {plan_txn!r}")
        plan, additions = parse_plan(b.get("plan"), b.get("additions"))
        group = parse_group(b.get("group"), plan)
    except InvalidPlan as e:
        log.debug("%s of %s holds an invalid plan: %s", LOCK_KEY, rec.txn, e)
        return replace(rec, invalid=True, invalid_reason=str(e))
    # read-only views: decoded records are shared (memoised)
    return replace(rec, plan=plan, additions=MappingProxyType(additions), group=MappingProxyType(group))


@dataclass(frozen=True)
class FreeSlot:
    """A free record of the lock: its etag (to claim it with PUT-if-match) and the head it names."""

    etag: str
    head: int | None
    queued: bool = True  # requests were (or may have been) queued while it was held


def slot_of(found: tuple[LockRecord, str] | None) -> FreeSlot | None:
    """The free record found, if it names its head (so it can be claimed with a plan)."""
    if found is None or found[0].state != FREE or found[0].head is None:
        return None
    return FreeSlot(found[1], found[0].head, found[0].queued)


@dataclass(frozen=True)
class Takeover:
    """A lock taken over from a crashed holder. ``action``: "rolled-back", "rolled-forward",
    "plan-rolled-back" (its plan broke, see ``result``), "impossible-plan-rolled-back",
    "invalid-plan-rolled-back"."""

    previous_txn: str
    previous_state: str
    action: str
    result: PlanResult | None = None  # the roll forward's outcome


def holding(txn: str, lease_s: float, state: str = VALIDATING, **more: Any) -> LockRecord:
    """The record of a holder taking the lock now (``more``: a plan's fields, for state "committing")."""
    now = time.time()
    return LockRecord(txn, state, lease_s, now + lease_s, client_label(), now, **more)


def free_record(txn: str, head: int | None, queued: bool = True) -> LockRecord:
    """The record a holder leaves at release."""
    return LockRecord(txn, FREE, 0.0, 0.0, client_label(), time.time(), head=head, nonce=secrets.token_hex(8),
                      queued=queued)


__all__ = ["COMMITTING", "FREE", "LOCK_KEY", "VALIDATING", "FreeSlot", "LockRecord", "Takeover",
           "free_record", "holding", "slot_of"]
