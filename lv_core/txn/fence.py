"""Markers after a long silence: a transaction that may have looked dead re-asserts its markers
before it publishes anything.

Others free a transaction's markers once they saw no sign of life of it for a whole lease
(:class:`~lv_core.protocol.lease.LeaseObserver`): a client paused past its lease (a GC pause, a
laptop lid, a stopped VM) comes back to markers that may be gone. A lost marker of a written table
shows when its commit is written (the log version is taken); a lost *read-only* marker shows
nothing, yet whoever freed it committed without waiting for us, so our reads there may be stale.
So when the silence (:meth:`LeaseKeeper.silence`) was long, the owner renews its heartbeat and
rewrites each marker object with PUT-if-match on the etag it holds, before any part is published:

- success proves nobody freed it before (a free is a PUT-if-match on the same etag), and from the
  renewal on an observer needs another whole lease of silence to free it;
- a failure means it was lost: the caller claims a new marker past it and settles again, so the
  versions in between are conflict-checked against what the transaction read (redo, or
  ``exposed_read`` when a result the caller saw changed), written table or not.
"""

from __future__ import annotations

import functools
import time

from lv_core.errors import PreconditionFailed
from lv_core.protocol import clock, layout
from lv_core.protocol.lease import keeper, write_lease
from lv_core.protocol.markers import MarkerInfo, encode_marker, read_version, update_marker
from lv_core.storage.readback import Unanswered, write_or_read_back
from lv_core.txn.core import TxnCore

__all__ = ["reassert_markers", "silent_too_long"]

# A silence of at least ``Tuning.silence_share`` of the lease (0.5) makes the owner re-assert its
# markers before publishing (renewals come every third of it; the rest is the margin its publish
# needs to land before anyone who saw the last sign of life could free a marker).


def silent_too_long(core: TxnCore) -> bool:
    """Whether others may have seen no sign of life of the transaction for long enough to free a marker soon."""
    return keeper().silence(core.id) >= core.settings.lease_s * core.settings.tuning.silence_share


def reassert_markers(core: TxnCore, tables: list[str]) -> list[str]:
    """Renew the heartbeat, then rewrite each pending marker of ``tables`` (PUT-if-match on its etag);
    returns the tables whose marker was lost (freed or taken by someone else). Cost: 1 PUT + 1
    PUT-if-match per marker (only after a long silence)."""
    book = core.book
    sent = time.monotonic()
    book.lease_expires = write_lease(core.store, core.id, core.settings.lease_s)
    keeper().wrote(core.id, sent)
    info = MarkerInfo(txn=core.id, created=clock.wall(), lease_expires=book.lease_expires,
                      client=layout.client_label(), footprint=core.marker_info().footprint,
                      name=core.name or "")
    data = encode_marker(info)
    lost: list[str] = []
    for t in tables:
        ts = book.tables[t]
        if ts.marker_version is None or ts.marker_etag is None or t in book.published or t in book.freed:
            continue
        try:
            got = write_or_read_back(functools.partial(update_marker, core.store, t, ts.marker_version,
                                                       ts.marker_etag, data),
                                     functools.partial(read_version, core.store, t, ts.marker_version))
        except PreconditionFailed:
            lost.append(t)
            continue
        if not isinstance(got, Unanswered):
            ts.marker_etag = got
        elif got.found.pending and got.found.txn == core.id and not got.found.filled:
            ts.marker_etag = got.found.etag  # outcome unknown: what the version is now decides
        else:
            lost.append(t)
    if not lost:
        keeper().reassured(core.id, sent)
    return lost

