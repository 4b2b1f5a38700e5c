"""A made-up global version that decodes (bad input by another client) is refused by readers too.

Content alone tells one no holder wrote (no transaction, dropping or going back on a table of the version
before) at no request; a version naming a table version past the table's log is told only when that read
fails (:meth:`GlobalLog.refuse_missing`), and `lv recover`'s :meth:`GlobalLog.check_head` looks it up.
"""

from __future__ import annotations

import re

import pytest

from lv_core.delta.errors import VersionNotFound
from lv_core.protocol.gvl import EMPTY, GVL_LATEST_KEY, ForeignGlobalVersion, GlobalLog, GvlState, gvl_key, move_out
from lv_core.protocol.layout import commit_key
from lv_core.protocol.vlock import ValidationLock
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore


def _base(store: LocalStore) -> GvlState:
    """Global versions 0 and 1 over tables a (log versions 0..2) and b (log version 0); 1 names a@1, b@0."""
    for t, versions in (("a", range(3)), ("b", range(1))):
        for v in versions:
            store.put(commit_key(t, v), b"{}")
    glog = GlobalLog(store)
    return glog.publish(glog.publish(EMPTY, {"a": 0, "b": 0}, "t-0"), {"a": 1}, "t-1")


MADE_UP = [
    ("no-txn", lambda n: GvlState(n, {"a": 2, "b": 0}), "it names no transaction"),
    ("drops-a-table", lambda n: GvlState(n, {"a": 2}, "t-9"), "it drops table(s) 'b' that global version 1 names"),
    ("goes-back", lambda n: GvlState(n, {"a": 0, "b": 0}, "t-9"),
     "it names table 'a' at version 0, older than version 1 of global version 1"),
]


@pytest.mark.parametrize("label,made_up,fragment", MADE_UP, ids=[c[0] for c in MADE_UP])
def test_a_reader_refuses_a_head_its_content_shows_no_holder_wrote(local_store: LocalStore, label: str, made_up,
                                                                   fragment: str) -> None:
    """head() of a new instance and of one that saw the version before refuses it, naming the object and what to
    do, and does not remember it; once it is moved out, both read the head as before."""
    base = _base(local_store)
    warm = GlobalLog(local_store)
    assert warm.head() == base
    local_store.put(gvl_key(2), made_up(2).encode())
    for glog in (GlobalLog(local_store), warm):
        with pytest.raises(ForeignGlobalVersion, match=re.escape(fragment)) as info:
            glog.head()
        assert info.value.key == gvl_key(2) and move_out(gvl_key(2)) in str(info.value)
        assert glog.known() <= base.version  # not remembered
    local_store.delete(gvl_key(2))
    assert warm.head() == base and GlobalLog(local_store).head() == base


def test_time_travel_judges_by_what_is_at_hand(local_store: LocalStore) -> None:
    """at(n): what the object says of itself, and the version before when this instance has it (no request more)."""
    _base(local_store)
    local_store.put(gvl_key(2), GvlState(2, {"a": 0, "b": 0}, "t-9").encode())  # goes back on a
    assert GlobalLog(local_store).at(2).table_version("a") == 0  # version 1 not at hand: cannot tell
    glog = GlobalLog(local_store)
    glog.at(1)
    with pytest.raises(ForeignGlobalVersion, match="older than version 1 of global version 1"):
        glog.at(2)
    local_store.put(gvl_key(2), GvlState(2, {"a": 2, "b": 0}).encode())
    with pytest.raises(ForeignGlobalVersion, match="it names no transaction"):
        GlobalLog(local_store).at(2)


def test_a_bad_hint_does_not_condemn_a_real_version(local_store: LocalStore) -> None:
    """A hint is overwritten by anyone: a problem found against the hint's copy of the version below is judged
    again against that version's own object (1 GET, only then)."""
    base = _base(local_store)
    real = GlobalLog(local_store).publish(base, {"a": 2}, "t-2")
    local_store.put(GVL_LATEST_KEY, GvlState(1, {"a": 1, "b": 0, "zz": 5}, "t-x").encode())  # names a table 2 lacks
    inst = InstrumentedStore(local_store)
    assert GlobalLog(inst).head() == real
    assert inst.counts()["GET"] == 4  # hint, version 2, version 1 (the check again), version 3 (missing)
    local_store.put(GVL_LATEST_KEY, GvlState(1, {"a": 1, "b": 0}).encode())  # names no transaction: ignored
    assert GlobalLog(local_store).head() == real


def test_refuse_missing_tells_made_up_from_cleaned_up(local_store: LocalStore) -> None:
    """A read of a table at the version a head names that its log lacks: past the log's latest version it was made
    up (ForeignGlobalVersion, and the instance forgets the head); at or below it, cleaned up (the error itself)."""
    base = _base(local_store)
    local_store.put(gvl_key(2), GvlState(2, {"a": 999, "b": 0}, "t-9").encode())
    glog = GlobalLog(local_store)
    made_up = glog.head()  # content alone cannot tell: no request more on the normal path
    assert made_up.version == 2 and glog.known() == 2
    err = glog.refuse_missing(made_up, VersionNotFound("a", 999, latest=2))
    assert isinstance(err, ForeignGlobalVersion) and err.key == gvl_key(2)
    assert "names table 'a' at version 999, but the table's log has no version 999 (its latest is 2)" in str(err)
    assert move_out(gvl_key(2)) in str(err)
    assert glog.known() < made_up.version  # forgotten: the next head() reads the log again
    local_store.delete(gvl_key(2))  # moved out
    assert glog.head() == base
    inst = InstrumentedStore(local_store)
    glog = GlobalLog(inst)
    err = glog.refuse_missing(made_up, VersionNotFound("a", 999))  # the latest not known: found (this path only)
    assert isinstance(err, ForeignGlobalVersion) and inst.total() > 0
    cleaned = VersionNotFound("a", 1, "its commits were cleaned up", latest=2)
    assert glog.refuse_missing(base, cleaned) is cleaned
    other = VersionNotFound("a", 5, latest=2)  # not the version the head names
    assert glog.refuse_missing(base, other) is other


def test_check_head_looks_up_the_logs(local_store: LocalStore) -> None:
    """`lv recover`: a head naming a table version past its log's latest is foreign; one the log cleaned up is not."""
    base = _base(local_store)
    local_store.put(gvl_key(2), GvlState(2, {"a": 999, "b": 0}, "t-9").encode())
    with pytest.raises(ForeignGlobalVersion, match=re.escape("no version 999 (its latest is 2). Help:")):
        GlobalLog(local_store).check_head()
    local_store.delete(gvl_key(2))
    head = GlobalLog(local_store).publish(base, {"a": 2}, "t-2")
    local_store.delete(commit_key("a", 2))  # cleaned up (as if): a later version is in the log
    local_store.put(commit_key("a", 3), b"{}")
    assert GlobalLog(local_store).check_head() == head


def test_a_holder_vouches_only_for_a_head_the_free_record_did_not_name(local_store: LocalStore) -> None:
    """HeldLock.read_head: the head the claimed free record named costs what head() costs (the usual path); a newer
    one (nobody released the key naming it) is vouched for, and a made-up one refused with the key released
    naming no head, so that the next holder vouches again instead of taking the fast route on it."""
    base = _base(local_store)
    inst = InstrumentedStore(local_store)
    lock = ValidationLock(inst, lease_s=30)
    with lock.acquire("t-2", timeout_s=1) as held:  # no key yet: knows no head
        assert held.read_head(GlobalLog(local_store)) == base and held.head == base.version
    glog = GlobalLog(inst)
    glog.head()
    with lock.acquire("t-3", timeout_s=1) as held:  # claims the record naming base: no vouching
        inst.reset()
        assert held.read_head(glog) == base and inst.total() == 1  # the probe of the next version
    local_store.put(gvl_key(2), GvlState(2, {"a": 999, "b": 0}, "t-9").encode())
    with pytest.raises(ForeignGlobalVersion, match="no version 999 .its latest is 2."):
        with lock.acquire("t-4", timeout_s=1) as held:
            held.read_head(glog)
    assert glog.known() < 2 and lock.look() is not None and lock.look()[0].head is None
