"""lv_core.storage.readback: after a lost response a write is judged by reading it back (real local
store; the lost responses are injected by InstrumentedStore)."""

from __future__ import annotations

import pytest

from lv_core.errors import AlreadyExists, PreconditionFailed, StorageError
from lv_core.storage.base import CREATE, IfMatch
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.local import LocalStore
from lv_core.storage.readback import Unanswered, etag_if_holds, put_or_confirm, write_or_read_back


@pytest.fixture
def inst(local_store: LocalStore) -> InstrumentedStore:
    return InstrumentedStore(local_store)


def test_a_write_that_landed_is_confirmed_by_its_bytes(inst: InstrumentedStore) -> None:
    inst.fail("PUT-create", after=True)
    etag = put_or_confirm(inst, "d/1.json", b"mine", mode=CREATE)
    assert etag == inst.head("d/1.json").etag
    assert (inst.counts()["PUT-create"], inst.counts()["GET"]) == (1, 1)
    inst.fail("PUT", after=True)
    assert put_or_confirm(inst, "d/1.json", b"next") == inst.head("d/1.json").etag


def test_a_write_that_did_not_land_raises_its_own_error(inst: InstrumentedStore) -> None:
    inst.fail("PUT-create")  # before: nothing landed
    with pytest.raises(StorageError, match="injected"):
        put_or_confirm(inst, "d/1.json", b"mine", mode=CREATE)
    inst.put("d/2.json", b"theirs")
    inst.fail("PUT")
    with pytest.raises(StorageError, match="injected"):  # other bytes there: not ours
        put_or_confirm(inst, "d/2.json", b"mine")
    inst.fail("PUT")
    inst.fail("GET")  # and nothing can be learnt: the write's error, not the read's
    with pytest.raises(StorageError, match="PUT"):
        put_or_confirm(inst, "d/2.json", b"mine")


def test_a_refused_condition_is_an_answer_not_a_lost_response(inst: InstrumentedStore) -> None:
    inst.put("d/1.json", b"x", mode=CREATE)
    with pytest.raises(AlreadyExists):
        put_or_confirm(inst, "d/1.json", b"x", mode=CREATE)
    with pytest.raises(PreconditionFailed):
        write_or_read_back(lambda: inst.put("d/1.json", b"y", mode=IfMatch("nope")),
                           lambda: pytest.fail("no read back after a refused condition"))
    assert inst.counts()["GET"] == 0


def test_write_or_read_back_hands_what_was_found_to_the_caller(inst: InstrumentedStore) -> None:
    inst.fail("PUT", after=True)
    got = write_or_read_back(lambda: inst.put("k", b"v"), lambda: inst.get("k").data)
    assert isinstance(got, Unanswered) and got.found == b"v" and isinstance(got.error, StorageError)
    assert write_or_read_back(lambda: "etag", lambda: b"unused") == "etag"
    assert etag_if_holds(inst, "missing", b"v") is None
    assert etag_if_holds(inst, "k", b"other") is None
