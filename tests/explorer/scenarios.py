"""The explorer's scenarios: two or three small list-append transactions over one or two tables."""

from __future__ import annotations

from lv_core.blackbox.history import MicroOp
from tests.explorer.run import Actor, Scenario

__all__ = ["READ_SKEW", "SAME_TABLE", "SAME_TABLE_GROUP", "SAME_TABLE_GROUP_READER", "THREE", "WRITE_SKEW_AFTER_PAUSE"]

r, a = MicroOp.read, MicroOp.append

#: Issue 34, violation 1: serializable read skew on tables new to the global version log. R1 reads
#: both tables, W2 appends to both; right after CREATE TABLE (nothing validated yet touched them).
READ_SKEW = Scenario("read-skew-new-tables", ("ta", "tb"), (
    Actor("R1", "serializable", (r("ta/0", None), r("tb/0", None))),
    Actor("W2", "serializable", (a("ta/0", 1), a("tb/0", 2))),
))

#: Issue 34, violation 2: repeatable_read write skew after a paused client lost its read-only
#: marker. P1 reads tb and appends to ta; P2 reads ta and appends to tb; P1 may be paused past its
#: lease at any request (its markers may then be freed by P2).
WRITE_SKEW_AFTER_PAUSE = Scenario("write-skew-after-pause", ("ta", "tb"), (
    Actor("P1", "repeatable_read", (r("tb/0", None), a("ta/0", 1))),
    Actor("P2", "repeatable_read", (r("ta/0", None), a("tb/0", 2))),
), pausable=frozenset({"P1"}))

#: Three serializable transactions: a reader of both tables and two writers of one table each that
#: also read the other (write skew if both commit without seeing each other).
THREE = Scenario("three", ("ta", "tb"), (
    Actor("R1", "serializable", (r("ta/0", None), r("tb/0", None))),
    Actor("W2", "serializable", (r("tb/0", None), a("ta/0", 1))),
    Actor("W3", "serializable", (r("ta/0", None), a("tb/0", 2))),
))

#: Issue 38: three serializable writers of one table (YCSB's contention in small): W1 and W2 update
#: different lists (files), W3 reads both and appends to W2's. Markers order them; a writer that finds
#: the validation key held queues its commit request behind the holder and waits for the key (or for
#: the global version naming it), reading ahead the global versions it will need.
SAME_TABLE = Scenario("same-table-writers", ("ta",), (
    Actor("W1", "serializable", (r("ta/0", None), a("ta/0", 1))),
    Actor("W2", "serializable", (r("ta/1", None), a("ta/1", 2))),
    Actor("W3", "serializable", (r("ta/0", None), r("ta/1", None), a("ta/1", 3))),
), keys=2)

#: Issue 38, same-table group commit: three serializable writers of one table whose reads and appends
#: declare their key's predicate (as YCSB does), so a holder may certify a writer queued behind it and
#: commit it in its own global version. W2 and W3 also read W1's list: behind W1 they conflict with W1's
#: commit and must be left to their owners (a redo), never committed on what they read before (two such
#: readers, so that random seeds meet the conflict often, not once in forty).
SAME_TABLE_GROUP = Scenario("same-table-group", ("ta",), (
    Actor("W1", "serializable", (r("ta/0", None), a("ta/0", 1)), keyed=True),
    Actor("W2", "serializable", (r("ta/0", None), r("ta/1", None), a("ta/1", 2)), keyed=True),
    Actor("W3", "serializable", (r("ta/0", None), r("ta/2", None), a("ta/2", 3)), keyed=True),
), keys=3)

#: Issue 38, a reader beside a same-table group: W1 and W2 write one table (keyed, so a holder may commit
#: the other in its global version, the table commits written one after another before it is published);
#: R3 reads both lists. A reader validating at the global version before such a plan does not count the
#: plan's commits (they name the global version that publishes them, after the reader's): every schedule
#: must still pass the checker (R3 never sees W1's append without W2's when W2 committed first, ...).
SAME_TABLE_GROUP_READER = Scenario("same-table-group-reader", ("ta",), (
    Actor("W1", "serializable", (r("ta/0", None), a("ta/0", 1)), keyed=True),
    Actor("W2", "serializable", (r("ta/1", None), a("ta/1", 2)), keyed=True),
    Actor("R3", "serializable", (r("ta/0", None), r("ta/1", None)), keyed=True),
), keys=2)
