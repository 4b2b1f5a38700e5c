"""LV[I]: a table the global version log does not know is enrolled in it before a transaction reads it.

A transaction reads every table at the version its one global-log head ``g`` names, so that its reads
are one state of the lakehouse: a prefix of the serial order of validated writers. A table ``g`` does not
name (every table right after CREATE TABLE, or one written only by other tools) has no such version.
Reading it at its own latest version instead mixes states: a reader saw ``ta`` before a writer W and
``tb`` after it, and validation could not tell (the black-box list-append checker found exactly that,
issue 34). So the first access enrolls it, under the validation key:

- Still unknown under the key: no validated writer ever wrote it (one would have published it), and no
  plan is being written (we hold the key). Its latest version ``v`` therefore holds only commits made
  outside the global log, which have no place in the serial order of validated writers yet: reading it
  at ``v`` is consistent with ``g``. A new global version names it at ``v``.
- Known by then (another transaction enrolled or wrote it after ``g``): the first global version after
  ``g`` that names it says where it entered. If that version wrote it (its commit there carries that
  global version), the state as of ``g`` is the version just below; otherwise (an enrollment or a
  catch-up of commits made outside the log) that version itself.

The transaction then reads the table at that version and treats it as named by its head: its head
becomes ``g`` plus the table at that version (the same global version number: nothing else changes).
Cost: one validation-key round (acquire, head, publish, release) the first time any transaction
meets a table; none after. A transaction waiting for the key meanwhile stops once a published global
version names the table (:class:`_Enrolled`) and reads it as in the second case, without the key.
"""

from __future__ import annotations

import dataclasses
import json

from lv_core.delta.log import DeltaLog
from lv_core.errors import LvError, NotFound
from lv_core.protocol.gvl import GlobalLog, GvlState
from lv_core.protocol.keywait import FreeAnswer
from lv_core.protocol.lockrecord import LockRecord
from lv_core.protocol.markers import KEY, read_version
from lv_core.txn import cleaner
from lv_core.txn.core import TxnCore

__all__ = ["enroll"]


def enroll(core: TxnCore, table: str, head: GvlState) -> int:
    """The version ``table`` (unknown to ``head``, the transaction's head) is read at, enrolling it in
    the global log when nobody has; updates the transaction's head to name it there."""
    glog, vlock = core.services.glog, core.services.vlock
    watch = _Enrolled(glog, table)
    held = vlock.acquire_or_join(core.id, watch, timeout_s=core.settings.timeout_s)
    if held is None:  # another transaction enrolled it while we waited for the key
        assert watch.state is not None
        version = _as_of(core, table, head, watch.state)
    else:
        with held:
            state = held.read_head(glog)
            if state.table_version(table) is None:
                latest = DeltaLog(core.store, table).latest_version_by_probe(core.services.logs.known_latest(table))
                held.commit([], state, additions={table: latest}, background=cleaner.background)
                version = latest
            else:
                held.release()
                version = _as_of(core, table, head, state)
    core.book.head = dataclasses.replace(head, tables={**head.tables, table: version})
    return version


class _Enrolled:
    """Waiting for the key to enroll ``table``: the wait is over once a published global version names it
    (issue 38: eight clients meeting a new table took the key one after another, each to find it enrolled;
    about a second before the first reads). Only published global versions are read (immutable), so this
    is the "known by then" case above with ``now`` read outside the key; enrolling still takes the key.

    The head is read when the key is seen held by a new holder or state, and when it is free after being
    seen held (1 GET each, usually): a key free at the first look is claimed as before, with no request more."""

    def __init__(self, glog: GlobalLog, table: str) -> None:
        self.glog, self.table = glog, table
        self.state: GvlState | None = None  # the head that names the table
        self._seen: tuple[str, str] | None = None  # the holder (txn, state) last looked past

    def busy(self) -> None:
        """(Nothing to queue.)"""

    def done(self, record: LockRecord | None) -> bool:
        if record is None:
            if self._seen is None:
                return False  # free at the first look: claim it (the head is read under the key)
        elif (record.txn, record.state) == self._seen:
            return False
        else:
            self._seen = (record.txn, record.state)
        state = self.glog.head()
        if state.table_version(self.table) is None:
            return False
        self.state = state
        return True

    def free(self, found: tuple[LockRecord, str]) -> FreeAnswer:
        return FreeAnswer.USUAL


def _as_of(core: TxnCore, table: str, head: GvlState, now: GvlState) -> int:
    """The version of ``table`` as of ``head`` (which does not name it), given that ``now`` does."""
    glog = core.services.glog
    for n in range(head.version + 1, now.version + 1):
        st = glog.at(n)
        v = st.table_version(table)
        if v is None:
            continue
        return v - 1 if _written_by_global_version(core, table, v, n) else v
    raise LvError(f"table {table!r} is in global version {now.version} but in none after {head.version}")


def _written_by_global_version(core: TxnCore, table: str, version: int, n: int) -> bool:
    """Whether ``table@version`` is a commit validated into global version ``n`` (its commitInfo says so)."""
    try:
        st = read_version(core.store, table, version)
    except NotFound:
        return False
    if st.kind != "commit":
        return False
    for line in st.raw.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        info = action.get("commitInfo") if isinstance(action, dict) else None
        if isinstance(info, dict) and isinstance(info.get(KEY), dict):
            return info[KEY].get("gvl") == n
    return False


