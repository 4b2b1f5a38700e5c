"""Module #3: the dependency DAG between transactions, built from what markers say (pure logic).

An edge ``src -> dst`` labelled ``table@version`` means: ``src`` holds a marker in ``table`` placed
after ``dst``'s marker at ``version``, so ``src`` waits for ``dst`` there (``dst`` precedes ``src``).
Every transaction exposes its outgoing edges in all of its markers (rule II) and reads the markers of
others to learn theirs (rule III). Adding an edge that closes a cycle would deadlock; a *marker shift*
breaks it: the transaction frees its markers in the tables where the cycle enters it and claims new
ones at later versions, which inverts those incoming edges (paper Lemma 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Edge:
    src: str  # waits ...
    dst: str  # ... for this transaction
    table: str
    version: int  # dst's marker version in ``table``

    @property
    def label(self) -> str:
        return f"{self.table}@{self.version}"

    def to_json(self) -> dict:
        return {"txn": self.dst, "table": self.table, "version": self.version}


def find_path(start: str, target: str, out_edges: Callable[[str, Edge | None], Sequence[Edge]],
              *, max_depth: int = 8, via: Edge | None = None) -> list[Edge] | None:
    """A path of edges from ``start`` to ``target`` (breadth first), or None.

    ``out_edges(node, via)`` returns a node's outgoing edges (``via`` is the edge we reached it by, so
    an implementation can look the node up where that edge points: its marker at ``via.label``);
    ``via`` is that edge for ``start``.
    """
    frontier: list[tuple[str, Edge | None, list[Edge]]] = [(start, via, [])]
    seen = {start}
    for _depth in range(max_depth):
        nxt: list[tuple[str, Edge | None, list[Edge]]] = []
        for node, node_via, path in frontier:
            edges = out_edges(node, node_via)
            for e in edges:
                if e.dst == target:
                    return [*path, e]
                if e.dst not in seen:
                    seen.add(e.dst)
                    nxt.append((e.dst, e, [*path, e]))
        if not nxt:
            return None
        frontier = nxt
    return None


def closes_cycle(txn: str, new_edges: Iterable[Edge],
                 out_edges: Callable[[str, Edge | None], Sequence[Edge]], *, max_depth: int = 8) -> list[Edge] | None:
    """If adding ``new_edges`` (all from ``txn``) closes a cycle, the cycle as a list of edges.

    The cycle starts with the new edge and ends with an edge into ``txn``; that last edge's table is
    where ``txn`` must shift its marker.
    """
    for e in new_edges:
        path = find_path(e.dst, txn, out_edges, max_depth=max_depth, via=e)
        if path is not None:
            return [e, *path]
    return None


def shift_tables(txn: str, cycle: Sequence[Edge]) -> set[str]:
    """Tables whose marker ``txn`` frees and re-claims to break ``cycle``: where the cycle enters it."""
    return {e.table for e in cycle if e.dst == txn}


def invert(txn: str, edges: Iterable[Edge], tables: set[str]) -> list[Edge]:
    """The edges after ``txn`` shifted its markers in ``tables``: incoming edges there flip direction."""
    out = []
    for e in edges:
        if e.dst == txn and e.table in tables:
            out.append(Edge(txn, e.src, e.table, -1))  # the new marker is after src's; version unknown yet
        else:
            out.append(e)
    return out


def has_cycle(edges: Iterable[Edge]) -> bool:
    """True if the edge set contains a directed cycle."""
    adj: dict[str, list[str]] = {}
    for e in edges:
        adj.setdefault(e.src, []).append(e.dst)
    state: dict[str, int] = {}

    def visit(n: str) -> bool:
        state[n] = 1
        for m in adj.get(n, ()):
            s = state.get(m, 0)
            if s == 1 or (s == 0 and visit(m)):
                return True
        state[n] = 2
        return False

    return any(state.get(n, 0) == 0 and visit(n) for n in list(adj))


@dataclass
class DagView:
    """The DAG around one transaction, as data for widgets."""

    txn: str
    nodes: dict[str, str] = field(default_factory=dict)  # txn -> state
    edges: list[Edge] = field(default_factory=list)
    cycles: list[list[Edge]] = field(default_factory=list)
    shifts: list[dict] = field(default_factory=list)  # {"tables": [...], "reason": ..., "ts": ...}

    def to_json(self) -> dict:
        return {
            "txn": self.txn,
            "nodes": dict(self.nodes),
            "edges": [{"src": e.src, "dst": e.dst, "label": e.label} for e in self.edges],
            "cycles": [[{"src": e.src, "dst": e.dst, "label": e.label} for e in c] for c in self.cycles],
            "shifts": list(self.shifts),
        }


def edges_from_json(src: str, preds: Iterable[Mapping]) -> list[Edge]:
    out = []
    for p in preds:
        try:
            out.append(Edge(src, str(p["txn"]), str(p["table"]), int(p["version"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out
