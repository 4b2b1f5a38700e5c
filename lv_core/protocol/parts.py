"""Whole multi-table commits in every global version.

A multi-table commit made outside the global version log (LV[CT] without LV[I], e.g. the
``repeatable_read`` preset) writes one part per table, each at its own Delta version, and records
all of them in its commitInfo (``lakevilla.at``). A global version that names one table at or past
such a part must name every other part's table at or past that part too, or readers at that global
version would see half of the commit. :func:`close_parts` extends the table versions a new global
version is about to name until that holds (call it under the validation lock).

Tables the log does not know yet are not extended (reads of them are not isolated until they are
added; docs/PROTOCOL.md).
"""

from __future__ import annotations

from typing import Mapping

from lv_core.errors import LvError, NotFound
from lv_core.protocol.gvl import GvlState
from lv_core.protocol.markers import VersionState, read_version
from lv_core.storage.base import ObjectStore


class PartMissing(LvError):
    """A part of a multi-table commit cannot be included yet (its table has a pending marker below it)."""

    def __init__(self, table: str, version: int, sibling: str, sibling_version: int, blocker: int) -> None:
        super().__init__(f"{table}@{version} is part of a multi-table commit whose part {sibling}@{sibling_version} "
                         f"cannot be published yet ({sibling}@{blocker} is still pending)")
        self.table, self.version = table, version
        self.sibling, self.sibling_version, self.blocker = sibling, sibling_version, blocker


def close_parts(store: ObjectStore, state: GvlState, versions: Mapping[str, int], *,
                own_txn: str | None = None, fixed: frozenset[str] = frozenset(), limit: int = 64) -> dict[str, int]:
    """The extra tables (and versions) the next global version must name so that every multi-table
    commit it newly includes is included whole.

    ``versions``: table -> the version the next global version names. Each version above the
    current global version of a table is read once (1 GET each), except the versions ``fixed``
    tables name (the new global version's own commits): uncontended, this costs nothing.

    Raises :class:`PartMissing` when a part's table has a pending marker at or below the part (it
    cannot be included yet), or when a table in ``fixed`` (written by the new global version's own
    commit, at the version given) would have to move.
    """
    result = dict(versions)
    scanned: dict[str, int] = {}
    seen: dict[tuple[str, int], VersionState] = {}

    def state_of(table: str, version: int) -> VersionState:
        if (table, version) not in seen:
            seen[(table, version)] = read_version(store, table, version)
        return seen[(table, version)]

    todo = [t for t in versions if state.table_version(t) is not None]
    steps = 0
    while todo:
        t = todo.pop()
        known = state.table_version(t)
        lo = max(-1 if known is None else known, scanned.get(t, -1))
        hi = result[t]
        scanned[t] = max(hi, scanned.get(t, -1))
        for v in range(lo + 1, hi + 1):
            if t in fixed and v == versions[t]:
                continue  # the new global version's own commit there: nothing to read
            steps += 1
            if steps > limit * 16:
                raise LvError("too many multi-table commits to include in one global version")
            try:
                st = state_of(t, v)
            except NotFound:
                break
            if not st.parts or (own_txn is not None and st.txn == own_txn):
                continue
            for u, vu in st.parts:
                cur = result.get(u, state.table_version(u))
                if u == t or cur is None or cur >= vu:
                    continue  # the same table, a table the log does not know, or already included
                if u in fixed:
                    raise PartMissing(t, v, u, vu, cur + 1)
                for x in range(cur + 1, vu + 1):
                    try:
                        if state_of(u, x).pending:
                            raise PartMissing(t, v, u, vu, x)
                    except NotFound:
                        raise PartMissing(t, v, u, vu, x) from None
                result[u] = vu
                scanned[u] = max(scanned.get(u, -1), cur)
                todo.append(u)
    return {t: v for t, v in result.items() if v != versions.get(t)}


__all__ = ["PartMissing", "close_parts"]
