"""What filled a CAB transaction's metadata phase (:mod:`benchmarks.cab`), from its event stream: its
own protocol work, waiting for other transactions, statements redone inside the commit."""

from __future__ import annotations

from typing import Any

__all__ = ["commit_split", "timeline", "waited_on"]


def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``spans`` (tables wait in parallel: overlapping waits count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def commit_split(events: list[Any], start: float, end: float) -> dict[str, float]:
    """Where ``commit()`` (wall clock ``start``..``end``) spent its time, from the transaction's events
    (Figure 11 counts all of it as metadata; the split says how much is LakeVilla's own work):

    - ``wait_s``: waiting for the markers of other transactions below ours to resolve (``Waiting`` ..
      ``WaitEnded`` per table, overlaps counted once): the order LV[CT] keeps among a table's users;
    - ``key_wait_s``: from the first ``Waiting`` on the validation key (LV[I]) to the ``Validated``
      outcome: other transactions' validations ahead of ours;
    - ``redo_s``: from each ``Redo`` to the transaction's next event (a redo re-runs the invalidated
      statements on the newer state and emits nothing itself): data work done inside the commit;
    - ``protocol_s``: the rest (reading predecessors, conflict checks, validation, publishing)."""
    from lv_core import events as ev

    waits: list[tuple[float, float]] = []
    opened: dict[tuple[str, int], float] = {}
    key: list[float] = []
    redos: list[tuple[float, float]] = []
    redo_from: float | None = None
    for e in events:
        if e.ts < start or isinstance(e, ev.Progress):
            continue
        if redo_from is not None:  # the redo ran until now
            redos.append((redo_from, e.ts))
            redo_from = None
        if isinstance(e, ev.Waiting) and e.table == ev.VALIDATION_KEY:
            key = key or [e.ts]
        elif isinstance(e, ev.Waiting):
            opened.setdefault((e.table, e.version), e.ts)
        elif isinstance(e, ev.WaitEnded) and (e.table, e.version) in opened:
            waits.append((opened.pop((e.table, e.version)), e.ts))
        elif isinstance(e, ev.Validated) and len(key) == 1:
            key.append(e.ts)
        elif isinstance(e, ev.Redo):
            redo_from = e.ts
    waits += [(a, end) for a in opened.values()]  # (a wait cut short by an abort or a shift)
    redos += [(redo_from, end)] if redo_from is not None else []
    keys = [(key[0], key[1] if len(key) > 1 else end)] if key else []
    return {"wait_s": _union(waits), "key_wait_s": _union(keys), "redo_s": _union(redos),
            "protocol_s": max(0.0, (end - start) - _union(waits + keys + redos))}


def timeline(events: list[Any], start: float) -> list[list[Any]]:
    """The transaction's events (Progress aside) as [kind, ms after ``commit()`` began (negative: before),
    what]: what filled a long commit, kept in the results file."""
    from lv_core import events as ev

    def what(e: Any) -> str:
        if isinstance(e, (ev.Waiting, ev.WaitEnded)):
            return f"{e.table}@{e.version} {e.on_txn}" + (f" {e.outcome}" if isinstance(e, ev.WaitEnded) else "")
        if isinstance(e, (ev.MarkerPlaced, ev.MarkerFreed, ev.ConflictFound)):
            return f"{e.table}@{e.version}"
        if isinstance(e, ev.Validated):
            return f"gvl {e.gvl_version} {e.failed_rule or 'ok'}"
        return ""

    return [[e.kind, round(1000 * (e.ts - start), 1), what(e)] for e in events
            if not isinstance(e, (ev.Progress, ev.Requests))]


def waited_on(events: list[Any]) -> list[str]:
    """Who the transaction waited for, as ``table@version txn`` (the waits of :func:`commit_split`)."""
    from lv_core import events as ev

    return sorted({f"{e.table}@{e.version} {e.on_txn}" for e in events if isinstance(e, ev.Waiting)})
