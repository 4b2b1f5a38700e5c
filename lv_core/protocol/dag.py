"""Module #3: the dependency DAG between transactions, built from what markers say (pure logic).

An edge ``src -> dst`` labelled ``table@version`` means: ``src`` holds a marker in ``table`` placed
after ``dst``'s marker at ``version``, so ``src`` waits for ``dst`` there (``dst`` precedes ``src``).
Every transaction exposes its outgoing edges (rule II: in its edges object, :mod:`lv_core.protocol.edges`)
and reads those of others (rule III). Adding an edge that closes a cycle would deadlock; a *marker shift*
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


def cycle_edges(edges: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (src, dst) pairs that lie on a directed cycle (edges inside a strongly connected component).

    A self-loop is a cycle too. Tarjan's algorithm, recursive: the graphs here are small.
    """
    pairs = list(edges)
    adj: dict[str, list[str]] = {}
    for s, d in pairs:
        adj.setdefault(s, []).append(d)
        adj.setdefault(d, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = [0, 0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in adj[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp[w] = counter[1]
                if w == v:
                    break
            counter[1] += 1

    for v in adj:
        if v not in index:
            strong(v)
    return {(s, d) for s, d in pairs if comp[s] == comp[d]}


def has_cycle(edges: Iterable[Edge]) -> bool:
    """True if the edge set contains a directed cycle."""
    return bool(cycle_edges((e.src, e.dst) for e in edges))


@dataclass
class DagEdge:
    """An edge of a :class:`DagView`: ``src`` waits behind ``dst``'s marker at ``table@version``,
    with what is known about that wait."""

    src: str
    dst: str
    table: str
    version: int
    status: str = "pending"  # "pending" | "waiting" | "resolved"
    outcome: str = ""  # how the wait ended: "committed", "freed", ...
    in_cycle: bool = False
    inverted: bool = False  # a cycle edge into the transaction that a marker shift inverted

    @property
    def label(self) -> str:
        return f"{self.table}@{self.version}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.src, self.dst, self.label)


@dataclass(frozen=True)
class Shift:
    """A marker shift: the markers moved (table, old version, new version) and why."""

    moves: tuple[tuple[str, int, int], ...]
    reason: str
    ts: float

    def to_json(self) -> dict:
        return {"tables": {t: [a, b] for t, a, b in self.moves}, "reason": self.reason, "ts": self.ts}


@dataclass
class DagView:
    """The DAG around one transaction, as data: what ``Transaction.dag()`` returns and what the
    transaction widget folds its events into."""

    txn: str
    nodes: dict[str, str] = field(default_factory=dict)  # txn -> state
    edges: list[DagEdge] = field(default_factory=list)
    cycles: list[tuple[tuple[str, str, str], ...]] = field(default_factory=list)  # (src, dst, label) per edge
    shifts: list[Shift] = field(default_factory=list)

    @classmethod
    def around(cls, txn: str, state: str, edges: Iterable[Edge], cycles: Iterable[Sequence[Edge]],
               shifts: Iterable[Mapping]) -> "DagView":
        """The view of a transaction in ``state`` with outgoing ``edges``, the ``cycles`` it found and
        its ``shifts`` (``{"tables": {table: [old, new]}, "reason": ..., "ts": ...}``)."""
        view = cls(txn, {txn: state})
        for e in edges:
            view.edge(e.src, e.dst, e.table, e.version)
        for c in cycles:
            view.cycles.append(tuple((e.src, e.dst, e.label) for e in c))
            for e in c:
                view.nodes.setdefault(e.src, "pending")
                view.nodes.setdefault(e.dst, "pending")
        view.shifts = [Shift(tuple((str(t), int(a), int(b)) for t, (a, b) in s["tables"].items()),
                             str(s["reason"]), float(s["ts"])) for s in shifts]
        return view

    def edge(self, src: str, dst: str, table: str, version: int) -> DagEdge:
        """The edge with this key (added, with its nodes, when new)."""
        label = f"{table}@{version}"
        for e in self.edges:
            if e.src == src and e.dst == dst and e.label == label:
                return e
        e = DagEdge(src, dst, table, version)
        self.edges.append(e)
        self.nodes.setdefault(src, "pending")
        self.nodes.setdefault(dst, "pending")
        return e

    def to_json(self) -> dict:
        """Plain data (stable order) for notebooks, caching and tests."""
        return {
            "txn": self.txn,
            "nodes": dict(sorted(self.nodes.items())),
            "edges": [{"src": e.src, "dst": e.dst, "label": e.label, "status": e.status, "outcome": e.outcome,
                       "in_cycle": e.in_cycle, "inverted": e.inverted} for e in self.edges],
            "cycles": [[{"src": s, "dst": d, "label": lbl} for s, d, lbl in c] for c in self.cycles],
            "shifts": [s.to_json() for s in self.shifts],
        }


def edges_from_json(src: str, preds: Iterable[Mapping]) -> list[Edge]:
    out = []
    for p in preds:
        try:
            out.append(Edge(src, str(p["txn"]), str(p["table"]), int(p["version"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out
