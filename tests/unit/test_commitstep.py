"""The serializable commit as a machine (lv_core.txn.commitstep): its transitions, without a store.

Each test feeds answers to the pure ``step`` function and checks the phase reached and the requests it
asks to send; the driver (lv_core.txn.isolation) is tested against stores in test_lv_i*.py,
test_group_commit.py and the schedule explorer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lv_core.txn.commitstep import _NEXT, Answer, Commit, Phase, Request, start, step

A = Answer


def run(c: Commit, *answers: Answer) -> tuple[Commit, list[Request]]:
    requests: list[Request] = []
    for a in answers:
        c, requests = step(c, a)
    return c, requests


def test_a_read_only_transaction_validates_without_the_key() -> None:
    c, reqs = start(writes=False)
    assert (c.phase, reqs) == (Phase.READ_ONLY, [Request.VALIDATE_READ_ONLY])
    assert step(c, A.COMPATIBLE)[0].phase is Phase.COMMITTED
    c, reqs = step(c, A.INCOMPATIBLE)
    assert (c.phase, reqs) == (Phase.CATCH_UP, [Request.PUBLISH_OTHERS])
    assert step(c, A.DONE)[0].phase is Phase.ABORTED


def test_the_fast_route_takes_the_free_key_with_the_plan() -> None:
    c, reqs = start(writes=True)
    assert (c.phase, reqs) == (Phase.FREE_KEY, [Request.FIND_FREE_KEY])
    c, reqs = run(c, A.FREE)
    assert reqs == [Request.VALIDATE_AT_FREE_HEAD]
    c, reqs = run(c, A.COMPATIBLE)
    assert (c.phase, reqs) == (Phase.CLAIM, [Request.CLAIM_WITH_PLAN])
    c, reqs = run(c, A.TAKEN)
    assert (c.phase, reqs) == (Phase.EXECUTE, [Request.EXECUTE_PLAN])
    c, reqs = run(c, A.PUBLISHED)
    assert (c.phase, reqs, c.last) == (Phase.COMMITTED, [], A.PUBLISHED)


@pytest.mark.parametrize("answers", [
    (A.BUSY,), (A.FREE, A.INCOMPATIBLE), (A.FREE, A.UNUSED_MARKER), (A.FREE, A.PART_MISSING),
    (A.FREE, A.COMPATIBLE, A.LOST), (A.FREE, A.COMPATIBLE, A.TAKEN, A.VOID)])
def test_whatever_the_fast_route_cannot_decide_waits_for_the_key(answers: tuple[Answer, ...]) -> None:
    c, reqs = run(start(writes=True)[0], *answers)
    assert (c.phase, reqs) == (Phase.WAIT, [Request.WAIT_FOR_KEY])


def test_a_refusal_on_the_fast_route_aborts_at_once() -> None:
    assert run(start(writes=True)[0], A.FREE, A.REFUSED)[0].phase is Phase.ABORTED


def test_the_wait_ends_held_decided_published_or_timed_out() -> None:
    waiting = run(start(writes=True)[0], A.BUSY)[0]
    c, reqs = step(waiting, A.HELD)
    assert (c.phase, reqs) == (Phase.HELD, [Request.READ_UNDER_KEY])
    assert step(waiting, A.DECIDED)[0].phase is Phase.JOINED
    assert step(waiting, A.PUBLISHED)[0].phase is Phase.COMMITTED
    assert step(waiting, A.TIMED_OUT)[0].phase is Phase.TIMED_OUT


def test_under_the_key() -> None:
    held = run(start(writes=True)[0], A.BUSY, A.HELD)[0]
    c, reqs = step(held, A.DECIDED)  # decided by the holder before: publish the group, then join
    assert (c.phase, reqs) == (Phase.PUBLISH_GROUP, [Request.PUBLISH_OTHERS])
    assert step(c, A.DONE)[0].phase is Phase.JOINED
    v, reqs = step(held, A.UNDECIDED)
    assert (v.phase, reqs) == (Phase.VALIDATE, [Request.VALIDATE_UNDER_KEY])
    assert step(v, A.COMPATIBLE)[1] == [Request.COMMIT_PLAN]
    assert step(v, A.UNUSED_MARKER)[1] == [Request.FILL_MARKERS, Request.COMMIT_PLAN]
    assert step(step(v, A.COMPATIBLE)[0], A.PUBLISHED)[0].phase is Phase.COMMITTED
    c, reqs = step(v, A.INCOMPATIBLE)  # the catch-ups and the group are published before the abort
    assert (c.phase, reqs) == (Phase.CATCH_UP, [Request.PUBLISH_OTHERS])
    assert step(c, A.DONE)[0].phase is Phase.ABORTED
    assert step(v, A.REFUSED)[0].phase is Phase.ABORTED
    assert step(v, A.PART_MISSING)[0].phase is Phase.ABORTED


def test_a_queued_try_of_the_free_key_goes_back_to_its_wait() -> None:
    c, reqs = start(writes=True, queued=True)
    assert (c.phase, reqs) == (Phase.FREE_KEY, [Request.FIND_FREE_KEY])
    assert step(c, A.DECIDED)[0].phase is Phase.JOINED  # a holder before decided it
    assert step(c, A.BUSY)[0].phase is Phase.BACK_IN_QUEUE
    c, reqs = run(c, A.FREE, A.COMPATIBLE, A.TAKEN)
    assert reqs == [Request.WITHDRAW_REQUEST, Request.EXECUTE_PLAN]  # its request must not be committed again
    lost = run(start(writes=True, queued=True)[0], A.FREE, A.COMPATIBLE, A.LOST)[0]
    assert (lost.phase, lost.last) == (Phase.BACK_IN_QUEUE, A.LOST)


def test_an_answer_that_does_not_fit_the_phase_is_refused() -> None:
    with pytest.raises(ValueError):
        step(start(writes=True)[0], A.PUBLISHED)
    with pytest.raises(ValueError):
        step(Commit(Phase.COMMITTED), A.DONE)


def test_every_phase_and_transition_is_in_the_architecture_diagram() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    diagram = re.search(r"```mermaid\n(stateDiagram-v2\n%% commitstep.*?)```", doc, re.S)
    assert diagram is not None, "the serializable commit's state diagram is missing"
    edges = set(re.findall(r"^\s*([A-Z_]+) --> ([A-Z_]+): ([A-Z_]+)\b", diagram.group(1), re.M))
    code = {(p.name, to.name, a.name) for (p, a), to in _NEXT.items()}
    assert code <= edges, code - edges
    assert edges <= code | {(p, "BACK_IN_QUEUE", a) for p, _, a in code}, edges - code
    words = set(re.findall(r"\b([A-Z][A-Z_]+)\b", diagram.group(1)))
    assert {p.name for p in Phase} <= words


def test_the_driver_performs_every_request() -> None:
    from lv_core.txn.isolation import _Run

    assert all(callable(getattr(_Run, r.name.lower(), None)) for r in Request)
