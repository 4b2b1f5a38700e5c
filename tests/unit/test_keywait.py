"""The wait for the validation key as a machine (lv_core.protocol.keywait): its transitions, without a store.

Each test feeds answers to the pure ``step`` function and checks the phase reached and the requests it
asks to send; the driver (ValidationLock.acquire_or_join) is tested against real stores in test_vlock.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lv_core.protocol import keywait as kw
from lv_core.protocol.keywait import Phase
from lv_core.protocol.lockrecord import COMMITTING, FREE, VALIDATING, LockRecord

T0 = kw.Clock(1000.0, 50.0)


def held(txn: str = "h", state: str = VALIDATING, lease_s: float = 30.0, expires: float = 1020.0) -> LockRecord:
    return LockRecord(txn, state, lease_s, expires)


def free(head: int = 3) -> LockRecord:
    return LockRecord("r", FREE, 0.0, 0.0, head=head)


def waiting(queued: bool = False, deadline: float = 60.0) -> kw.Wait:
    """A wait that looks first (no free record of its own), in phase LOOK."""
    w, _ = kw.start(queued=queued, deadline=deadline, skew_s=30.0, free_etag=None, seen=None, contended=False)
    return w


def test_a_process_that_released_the_key_last_claims_its_free_record_at_once() -> None:
    w, reqs = kw.start(queued=False, deadline=60.0, skew_s=30.0, free_etag="e1", seen=None, contended=False)
    assert w.phase is Phase.CLAIM and reqs == [kw.Claim("e1")]
    w, reqs = kw.step(w, kw.Claimed(True))
    assert w.phase is Phase.HELD and reqs == []


def test_a_lost_claim_looks_at_the_key() -> None:
    w, _ = kw.start(queued=False, deadline=60.0, skew_s=30.0, free_etag="e1", seen=None, contended=False)
    w, reqs = kw.step(w, kw.Claimed(False))
    assert w.phase is Phase.LOOK and reqs == [kw.Get()]


def test_without_a_free_record_of_its_own_it_looks_first_and_a_contended_queued_waiter_queues_beside() -> None:
    w, reqs = kw.start(queued=False, deadline=60.0, skew_s=30.0, free_etag=None, seen=None, contended=True)
    assert w.phase is Phase.LOOK and reqs == [kw.Get()]
    w, reqs = kw.start(queued=True, deadline=60.0, skew_s=30.0, free_etag=None, seen=None, contended=True)
    assert w.phase is Phase.LOOK and w.tried and reqs == [kw.Act.ENQUEUE_BESIDE, kw.Get()]
    seen = kw.KeyLook(None)
    w, reqs = kw.start(queued=False, deadline=60.0, skew_s=30.0, free_etag="e1", seen=seen, contended=False)
    assert w.phase is Phase.LOOK and reqs == [kw.Get(seen)]  # read just before: no second GET


def test_a_free_or_missing_key_is_claimed_on_its_etag_or_created() -> None:
    w, reqs = kw.step(waiting(), kw.Looked((free(), "f1"), T0))
    assert w.phase is Phase.CLAIM and reqs == [kw.Claim("f1")]
    w, reqs = kw.step(waiting(), kw.Looked(None, T0))
    assert w.phase is Phase.CLAIM and reqs == [kw.Claim(None)]


def test_a_held_key_notes_contention_once_and_waits_one_step() -> None:
    w, reqs = kw.step(waiting(), kw.Looked((held(), "h1"), T0))
    assert w.phase is Phase.LOOK and w.tried
    assert reqs == [kw.Act.NOTE_CONTENTION, kw.Notify(held()), kw.Act.SLEEP, kw.Get()]
    w, reqs = kw.step(w, kw.Looked((held(), "h2"), T0._replace(mono=51.0)))  # renewed: same holder and state
    assert w.phase is Phase.LOOK and reqs == [kw.Act.SLEEP, kw.Get()]
    w, reqs = kw.step(w, kw.Looked((held(state=COMMITTING), "h3"), T0))
    assert reqs == [kw.Notify(held(state=COMMITTING)), kw.Act.SLEEP, kw.Get()]  # its state changed: a new notice


@pytest.mark.parametrize("clock, expired", [
    (kw.Clock(1020.0 + 30.0 + 0.1, 50.0), True),  # lease_expires more than skew_s in the past
    (kw.Clock(1020.0 + 29.9, 50.0), False),
])
def test_expiry_by_the_records_lease(clock: kw.Clock, expired: bool) -> None:
    w, reqs = kw.step(waiting(), kw.Looked((held(), "h1"), clock))
    assert (w.phase is Phase.TAKE_OVER) == expired
    if expired:
        assert reqs[-1] == kw.TakeOver(held(), "h1")


def test_expiry_by_observation_needs_the_same_etag_for_a_lease() -> None:
    """No synchronised clocks: an etag unchanged for lease_s by our clock proves the holder gone."""
    rec = held(lease_s=2.0, expires=1e12)  # a holder clock far ahead: its lease never looks past
    w, _ = kw.step(waiting(deadline=1e9), kw.Looked((rec, "h1"), kw.Clock(0.0, 10.0)))
    w, _ = kw.step(w, kw.Looked((rec, "h2"), kw.Clock(0.0, 11.5)))  # renewed
    w, reqs = kw.step(w, kw.Looked((rec, "h2"), kw.Clock(0.0, 13.0)))
    assert w.phase is Phase.LOOK and reqs[-2:] == [kw.Act.SLEEP, kw.Get()]  # h2 seen for 1.5 s only
    w, reqs = kw.step(w, kw.Looked((rec, "h2"), kw.Clock(0.0, 13.6)))
    assert w.phase is Phase.TAKE_OVER and reqs == [kw.TakeOver(rec, "h2")]
    w2, reqs = kw.step(w, kw.Claimed(False))  # someone changed it first
    assert w2.phase is Phase.LOOK and reqs == [kw.Get()]
    assert kw.step(w, kw.Claimed(True))[0].phase is Phase.HELD


def test_the_deadline_ends_the_wait_after_the_last_notice() -> None:
    w, reqs = kw.step(waiting(deadline=50.0), kw.Looked((held(), "h1"), T0))
    assert w.phase is Phase.TIMED_OUT and w.phase.final and reqs == [kw.Act.NOTE_CONTENTION, kw.Notify(held())]
    assert w.found == (held(), "h1")


def test_a_queued_waiter_queues_once_and_asks_the_queue_before_judging() -> None:
    w, reqs = kw.step(waiting(queued=True), kw.Looked((held(), "h1"), T0))
    assert w.phase is Phase.ASK and reqs == [kw.Act.NOTE_CONTENTION, kw.Act.ENQUEUE, kw.AskDone(held())]
    assert kw.step(w, kw.Done(True, T0))[0].phase is Phase.DECIDED
    w, reqs = kw.step(w, kw.Done(False, T0))
    assert w.phase is Phase.LOOK and reqs == [kw.Notify(held()), kw.Act.SLEEP, kw.Get()]
    w, reqs = kw.step(w, kw.Looked((held(), "h1"), T0))
    assert reqs == [kw.AskDone(held())]  # queued already: no second request


@pytest.mark.parametrize("answer, phase, sent", [
    (kw.FreeAnswer.DECIDED, Phase.DECIDED, []),
    (kw.FreeAnswer.TAKEN, Phase.LOOK, [kw.Get()]),
    (kw.FreeAnswer.USUAL, Phase.CLAIM, [kw.Claim("f1")]),
])
def test_a_queued_waiter_that_finds_the_key_free(answer: kw.FreeAnswer, phase: Phase, sent: list) -> None:
    w, reqs = kw.step(waiting(queued=True), kw.Looked((free(), "f1"), T0))
    assert w.phase is Phase.ASK_FREE and reqs == [kw.AskDone(None)]
    assert kw.step(w, kw.Done(True, T0))[0].phase is Phase.DECIDED
    w, reqs = kw.step(w, kw.Done(False, T0))
    assert w.phase is Phase.FREE_KEY and reqs == [kw.AskFree((free(), "f1"))]
    w, reqs = kw.step(w, answer)
    assert w.phase is phase and reqs == sent


def test_a_queued_waiter_that_finds_no_key_creates_it_unless_decided() -> None:
    w, _ = kw.step(waiting(queued=True), kw.Looked(None, T0))
    w, reqs = kw.step(w, kw.Done(False, T0))
    assert w.phase is Phase.CLAIM and reqs == [kw.Claim(None)]


def test_an_answer_that_does_not_fit_the_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="no transition from CLAIM"):
        kw.step(kw.start(queued=False, deadline=1.0, skew_s=1.0, free_etag="e", seen=None, contended=False)[0],
                kw.Done(True, T0))


def test_every_phase_is_in_the_architecture_diagram() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    diagram = re.search(r"```mermaid\n(stateDiagram-v2\n%% keywait.*?)```", doc, re.S)
    assert diagram is not None, "the validation key's state diagram is missing"
    states = set(re.findall(r"\b([A-Z][A-Z_]+)\b", diagram.group(1)))
    assert {p.name for p in Phase} <= states, {p.name for p in Phase} - states


def test_every_state_of_a_held_key_is_in_its_diagram() -> None:
    from lv_core.protocol.heldlock import Hold

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    diagram = re.search(r"```mermaid\n(stateDiagram-v2\n%% heldlock.*?)```", doc, re.S)
    assert diagram is not None, "the held key's state diagram is missing"
    assert {h.name for h in Hold} <= set(re.findall(r"\b([A-Z]+)\b", diagram.group(1)))
