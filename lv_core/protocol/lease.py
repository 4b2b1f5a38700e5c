"""Leases: a live client keeps one heartbeat object per transaction fresh.

Markers name their transaction; whether a marker is still alive is decided by the transaction's
heartbeat object (``_lakevilla/txns/<txn>/lease.json``), falling back to the expiry written in
the marker itself (and in its sublog entries, for `lv recover`) when no heartbeat exists. The
heartbeat is written only once a transaction lives long enough to need a renewal (``lease_s / 3``
after it began): a short transaction never writes (nor deletes) one, its markers carry its expiry.
One background thread per process renews the leases of all of its open transactions (one PUT per
transaction per ``lease_s / 3``, not one per request).
"""

from __future__ import annotations

import json
import math
import threading
import time
import weakref
from typing import Any

from lv_core.errors import LvError, NotFound
from lv_core.protocol import clock
from lv_core.protocol.layout import client_label, lease_key
from lv_core.protocol.markers import MarkerInfo
from lv_core.storage.base import ObjectStore


def write_lease(store: ObjectStore, txn: str, lease_s: float, state: str = "active") -> float:
    """Write (or renew) the heartbeat of ``txn``; returns the new expiry time."""
    now = clock.wall()
    expires = now + lease_s
    body = {"txn": txn, "client": client_label(), "renewed": now, "expires": expires, "state": state}
    store.put(lease_key(txn), json.dumps(body).encode())
    return expires


def _expiry(value: Any) -> float:
    """A heartbeat's ``expires`` as a float; missing or malformed (text, null, NaN) reads as 0 (expired)."""
    if isinstance(value, bool):
        return 0.0
    try:
        expires = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return 0.0 if math.isnan(expires) else expires


def read_lease(store: ObjectStore, txn: str) -> dict[str, Any] | None:
    """The heartbeat of ``txn`` or None if it has none (finished, or never wrote one).

    ``expires`` is always a float in the result: an unreadable heartbeat, or one whose ``expires``
    is missing or not a number, reads as expired (0.0).
    """
    try:
        body = json.loads(store.get(lease_key(txn)).data)
    except NotFound:
        return None
    except ValueError:
        return {"expires": 0.0}  # unreadable heartbeat: treat as expired
    if not isinstance(body, dict):
        return {"expires": 0.0}
    return {**body, "expires": _expiry(body.get("expires"))}


def lease_expired(store: ObjectStore, txn: str, marker: MarkerInfo | None, now: float | None = None) -> bool:
    """True when ``txn``'s lease ran out (its markers may then be freed by anyone)."""
    now = time.time() if now is None else now
    lease = read_lease(store, txn)
    if lease is not None:
        return lease["expires"] < now
    return marker is None or marker.lease_expires < now


class LeaseObserver:
    """Decides that a transaction is gone without trusting its machine's clock.

    A live owner changes what others can see of it at least every ``lease_s / 3``: its heartbeat
    object (renewed), or, before its first renewal, its marker. An observer therefore calls a
    transaction expired once the same state (heartbeat etag, else marker etag) has been seen unchanged
    for the owner's lease period, measured on the observer's own monotonic clock. Only a record that
    expired more than ``skew_s`` ago by the observer's wall clock counts as expired at once (a
    transaction that died long ago). Thread-safe; one per lakehouse (shared by its transactions).
    """

    def __init__(self, skew_s: float = 600.0) -> None:
        self.skew_s = skew_s
        self._lock = threading.Lock()
        #: (txn, what was looked at) -> (state, first seen, monotonic)
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}

    def expired(self, store: ObjectStore, txn: str, marker: MarkerInfo, marker_etag: str, where: str) -> bool:
        """Is the owner ``txn`` of the marker at ``where`` (``table@version``; its bookkeeping
        ``marker``, object etag ``marker_etag``) gone? Cost: 1 GET (its heartbeat object)."""
        try:
            res = store.get(lease_key(txn))
        except NotFound:
            res = None
        if res is not None:
            try:
                body = json.loads(res.data)
            except ValueError:
                body = None
            body = body if isinstance(body, dict) else {}
            expires = _expiry(body.get("expires"))
            renewed = _expiry(body.get("renewed"))
            key, state, period = (txn, "lease"), res.etag, expires - renewed
        else:
            expires = marker.lease_expires
            key, state, period = (txn, where), marker_etag, marker.lease_expires - marker.created
        if expires + self.skew_s < clock.wall():
            return True
        period = period if 0.0 < period < 86_400.0 else 30.0  # garbage: a sane default
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or seen[0] != state:
                self._seen[key] = (state, now)
                if len(self._seen) > 10_000:  # forget the oldest observations
                    for k in sorted(self._seen, key=lambda k: self._seen[k][1])[:5_000]:
                        del self._seen[k]
                return False
            return now - seen[1] > period


class LeaseKeeper:
    """One daemon thread per process renewing the leases of registered transactions."""

    _instances: "weakref.WeakValueDictionary[int, LeaseKeeper]" = weakref.WeakValueDictionary()

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._txns: dict[str, tuple[ObjectStore, float, float]] = {}  # txn -> (store, lease_s, next_due)
        self._written: set[str] = set()  # registered transactions whose heartbeat object exists
        self._writing: set[str] = set()  # heartbeats being written right now
        #: txn -> (monotonic time its last confirmed sign of life was sent, longest silence so far)
        self._confirmed: dict[str, tuple[float, float]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    def register(self, store: ObjectStore, txn: str, lease_s: float) -> float:
        """Keep ``txn``'s lease: returns its first expiry (now + ``lease_s``), which its markers carry.
        No request now: the heartbeat object is first written when the first renewal is due."""
        expires = clock.wall() + lease_s
        with self._lock:
            now = time.monotonic()
            self._txns[txn] = (store, lease_s, now + lease_s / 3)
            self._confirmed[txn] = (now, 0.0)  # its markers carry ``expires``: a sign of life sent now
            if self._thread is None or not self._thread.is_alive():
                # One daemon thread for the process's whole life, not a pool task: it sleeps until the
                # next renewal is due, and must never queue behind other work (a late renewal frees markers).
                self._thread = threading.Thread(target=self._run, name="lv-lease-keeper", daemon=True)
                self._thread.start()
        self._wake.set()
        return expires

    def unregister(self, txn: str) -> bool:
        """Stop renewing (waits for a renewal of ``txn`` in flight); True if its heartbeat object was
        ever written (the owner deletes it at the end)."""
        with self._lock:
            self._txns.pop(txn, None)
            self._confirmed.pop(txn, None)
            self._lock.wait_for(lambda: txn not in self._writing)
            written = txn in self._written
            self._written.discard(txn)
            return written

    def wrote(self, txn: str, sent: float | None = None) -> None:
        """The owner wrote ``txn``'s heartbeat itself (the write was sent at monotonic time ``sent``)."""
        with self._lock:
            self._written.add(txn)
            if sent is not None:
                self._confirm(txn, sent)

    def _confirm(self, txn: str, sent: float) -> None:
        """A sign of life sent at ``sent`` has landed (call with the lock held)."""
        last, longest = self._confirmed.get(txn, (sent, 0.0))
        self._confirmed[txn] = (max(last, sent), max(longest, time.monotonic() - last))

    def silence(self, txn: str) -> float:
        """The longest time others may have seen no sign of life of ``txn`` (seconds, on this
        process's monotonic clock): the longest gap between a sign of life being sent and the next one
        landing, or since the last one was sent. An observer frees a transaction's markers only after
        seeing no change for a whole lease period (:class:`LeaseObserver`), so a silence clearly
        shorter than the lease proves nobody could have (up to the observers' skew rule). 0 for a
        transaction not kept here (it placed no marker yet)."""
        with self._lock:
            got = self._confirmed.get(txn)
        if got is None:
            return 0.0
        last, longest = got
        return max(longest, time.monotonic() - last)

    def reassured(self, txn: str, sent: float) -> None:
        """Every marker of ``txn`` was re-asserted after a sign of life sent at ``sent``: silences
        before it no longer matter (anyone who freed a marker of ours before would have made the
        re-assertion fail)."""
        with self._lock:
            if txn in self._confirmed:
                self._confirmed[txn] = (sent, 0.0)

    def pause(self, txn: str) -> None:
        """Stop renewing, as a hung client does (tests): its silence keeps growing."""
        with self._lock:
            self._txns.pop(txn, None)
            self._lock.wait_for(lambda: txn not in self._writing)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._txns:
                    self._thread = None
                    return
                now = time.monotonic()
                due = [(t, s, ls) for t, (s, ls, nd) in self._txns.items() if nd <= now]
                next_due = min(nd for (_, _, nd) in self._txns.values())
                self._writing.update(t for t, _s, _ls in due)
            for txn, store, lease_s in due:
                sent = time.monotonic()
                try:
                    write_lease(store, txn, lease_s)
                    self.renewals += 1
                    ok = True
                except LvError:
                    ok = False  # retried next round; the owner notices lost markers at commit
                with self._lock:
                    self._writing.discard(txn)
                    if txn in self._txns:
                        if ok:
                            self._written.add(txn)
                            self._confirm(txn, sent)
                        self._txns[txn] = (store, lease_s, time.monotonic() + lease_s / 3)
                    elif ok:  # unregistered while writing: unregister (waiting for us) reports it
                        self._written.add(txn)
                    self._lock.notify_all()
            if not due:
                self._wake.wait(timeout=max(0.01, next_due - time.monotonic()))
                self._wake.clear()


_keeper = LeaseKeeper()


def keeper() -> LeaseKeeper:
    """The process-wide lease keeper."""
    return _keeper
