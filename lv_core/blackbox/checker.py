"""A black-box isolation checker for list-append histories, after Jepsen's Elle.

Every append writes a unique element, so a list read names the exact version it saw and who wrote
each of its elements. From the values alone the checker recovers each key's version order (all
observed lists must be prefixes of one list), infers ww/wr/rw dependencies between committed
transactions (Adya's direct serialisation graph) and reports cycles, plus anomalies visible in single
values. It never asks the system under test for version numbers, so it cannot be misled by them.

Which transactions count as committed: OK ones; INFO ones (outcome unknown) iff another transaction
or the final read observed one of their elements; FAIL ones never.

``internal`` flags only what no interleaving explains (a txn's read missing or misordering its own
appends, not extending its earlier read, or holding an element the txn appends later). Reads that
additionally see other transactions' appends between a txn's own operations are fine per statement
but not per transaction; they show up as cycles (G-single, G1c or G0), which weak levels allow.

When a cycle through some rw edge has a ww/wr-only way back, G-single is reported and a G2-item
through the same edge is not searched for (every level forbidding G2-item forbids G-single).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from types import MappingProxyType
from typing import Any

from lv_core.blackbox.history import HistoryError, OpKind, Outcome, Txn, fmt_list

__all__ = ["ALWAYS_FORBIDDEN", "KINDS", "LEVELS", "Anomaly", "Edge", "Report", "check"]

ALWAYS_FORBIDDEN = frozenset({"incompatible-order", "duplicate", "garbage", "lost", "internal"})
_G1 = frozenset({"G0", "G1a", "G1b", "G1c"})
_SERIAL = _G1 | {"G-single", "G2-item"}

#: Anomaly kinds each isolation level forbids (Adya; Elle's consistency models). Always includes
#: :data:`ALWAYS_FORBIDDEN`. "snapshot" allows G2-item (write skew); "read_committed" allows
#: G-single and G2-item (read skew, lost update, write skew); "delta" (every statement commits on
#: its own) promises nothing across statements. "write_serializable" is held to full
#: serializability here, also for read-only transactions.
LEVELS: Mapping[str, frozenset[str]] = MappingProxyType({
    "serializable": ALWAYS_FORBIDDEN | _SERIAL,
    "write_serializable": ALWAYS_FORBIDDEN | _SERIAL,
    "repeatable_read": ALWAYS_FORBIDDEN | _SERIAL,
    "snapshot": ALWAYS_FORBIDDEN | _G1 | {"G-single"},
    "read_committed": ALWAYS_FORBIDDEN | _G1,
    "delta": ALWAYS_FORBIDDEN,
})

#: Every kind the checker reports, with a one-line meaning (in report order).
KINDS: Mapping[str, str] = MappingProxyType({
    "incompatible-order": "two reads of a key are not prefixes of one list (no single version order)",
    "duplicate": "an element occurs twice in one list",
    "garbage": "a list holds an element no transaction appended",
    "lost": "an element a committed transaction appended is missing from the final list",
    "internal": "a transaction's read contradicts its own earlier reads or appends",
    "G1a": "aborted read: a committed read holds an element of a failed transaction",
    "G1b": "intermediate read: a read ends with an element its writer later followed with another",
    "G0": "write cycle: ww edges only",
    "G1c": "circular information flow: a cycle of ww/wr edges with at least one wr",
    "G-single": "a cycle with exactly one rw edge (read skew, lost update)",
    "G2-item": "a cycle with two or more rw edges (write skew)",
})
_CYCLE_KINDS = ("G0", "G1c", "G-single", "G2-item")
_EDGE_KINDS = ("ww", "wr", "rw")
_FINAL = ""  # the source name of the final read (txn ids are never empty)


def _who(source: str) -> str:
    return source or "the final read"


@dataclass(frozen=True)
class Edge:
    """A dependency ``src -> dst`` on ``key`` with the values that justify it.

    ``read`` is the list read (wr: by dst; rw: by src). ``written``: ww (src's element, dst's next
    one); wr (src's element, the read's last); rw (dst's element, the one after the read's last).
    """

    kind: str
    src: str
    dst: str
    key: str
    read: tuple[int, ...] | None = None
    written: tuple[int, ...] = ()

    def label(self) -> str:
        """``rw t0/3: read [1, 2], T2 appended 3``: the reason for the edge."""
        if self.kind == "ww":
            return f"ww {self.key}: appended {self.written[0]}, {self.dst} appended {self.written[1]} next"
        shown = fmt_list(self.read or ())
        if self.kind == "wr":
            return f"wr {self.key}: appended {self.written[0]}, {self.dst} read {shown}"
        return f"rw {self.key}: read {shown}, {self.dst} appended {self.written[0]}"

    def __str__(self) -> str:
        return f"{self.src} -[{self.label()}]-> {self.dst}"

    def to_obj(self) -> dict[str, Any]:
        return {"kind": self.kind, "src": self.src, "dst": self.dst, "key": self.key,
                "read": None if self.read is None else list(self.read), "written": list(self.written)}


@dataclass(frozen=True)
class Anomaly:
    """One witness: the transactions involved, the cycle's edges (empty for value anomalies), a why."""

    kind: str
    txns: tuple[str, ...]
    steps: tuple[Edge, ...] = ()
    detail: str = ""

    def to_obj(self) -> dict[str, Any]:
        return {"kind": self.kind, "txns": list(self.txns), "steps": [e.to_obj() for e in self.steps],
                "detail": self.detail}


def _level(level: str) -> frozenset[str]:
    try:
        return LEVELS[level.strip().lower()]
    except KeyError:
        raise HistoryError(f"unknown level {level!r}; choose one of: {', '.join(LEVELS)}") from None


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class Report:
    """What :func:`check` found. ``anomalies`` keeps at most ``max_witnesses`` per kind; ``totals``
    counts all instances found (for cycle kinds: the witnesses found). ``txns`` holds the transactions
    the anomalies name, so the report explains itself without the history. ``truncated``: the cycle
    search hit its work budget, so some cycle kinds may be reported under a weaker name or missed."""

    anomalies: Mapping[str, tuple[Anomaly, ...]]
    totals: Mapping[str, int]
    committed: int
    failed: int
    info: int
    info_committed: int
    per_preset: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    txns: Mapping[str, Txn] = field(default_factory=dict)
    truncated: bool = False

    @property
    def kinds(self) -> frozenset[str]:
        """The anomaly kinds found."""
        return frozenset(k for k, found in self.anomalies.items() if found)

    def violations(self, level: str) -> set[str]:
        """The kinds found that ``level`` (a key of :data:`LEVELS`) forbids."""
        return set(self.kinds & _level(level))

    def ok(self, level: str) -> bool:
        """True when the history is consistent with ``level``."""
        return not self.violations(level)

    def summary(self) -> str:
        ok = self.committed - self.info_committed
        found = ", ".join(k for k in KINDS if k in self.kinds) or "none"
        cut = " (cycle search truncated)" if self.truncated else ""
        return (f"{self.committed} committed ({ok} ok, {self.info_committed} of {self.info} unknown observed), "
                f"{self.failed} failed; anomalies: {found}{cut}")

    def to_obj(self) -> dict[str, Any]:
        return {"kinds": [k for k in KINDS if k in self.kinds], "totals": dict(self.totals),
                "committed": self.committed, "failed": self.failed, "info": self.info,
                "info_committed": self.info_committed,
                "per_preset": {p: dict(c) for p, c in self.per_preset.items()},
                "anomalies": {k: [a.to_obj() for a in found] for k, found in self.anomalies.items() if found},
                "txns": {i: t.to_obj() for i, t in self.txns.items()}, "truncated": self.truncated}

    def to_json(self) -> str:
        return json.dumps(self.to_obj())

    def explain(self, max_per_kind: int = 1) -> str:
        """Human-readable text: per kind, its witnesses' edges and each involved txn's operations."""
        lines = [self.summary()]
        for kind in KINDS:
            found = self.anomalies.get(kind, ())
            if not found:
                continue
            lines.append(f"\n{kind}: {KINDS[kind]} ({self.totals.get(kind, len(found))} found)")
            for a in found[:max_per_kind]:
                if a.detail:
                    lines.append(f"  {a.detail}")
                lines += [f"    {e}" for e in a.steps]
                lines += [f"    {self.txns[t].describe()}" for t in a.txns if t in self.txns]
        return "\n".join(lines)

    def cycle_dot(self, anomaly: Anomaly) -> str:
        """Graphviz DOT of one witness: txns (with their ops) as boxes, edges labelled kind + key."""
        name = anomaly.kind.replace("-", "_")
        lines = [f"digraph {name} {{", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
        for tid in anomaly.txns:
            t = self.txns.get(tid)
            text = tid if t is None else "\n".join([f"{tid} (process {t.process}, {t.outcome.value})",
                                                   *map(str, t.ops)])
            lines.append(f"  {_dot_str(tid)} [label={_dot_str(text)}];")
        style = {"ww": "color=blue", "wr": "color=darkgreen", "rw": "color=red, style=dashed"}
        for e in anomaly.steps:
            lines.append(f"  {_dot_str(e.src)} -> {_dot_str(e.dst)} "
                         f"[label={_dot_str(f'{e.kind} {e.key}')}, tooltip={_dot_str(e.label())}, {style[e.kind]}];")
        lines.append("}")
        return "\n".join(lines)


def check(history: Sequence[Txn], final: Mapping[str, Sequence[int]] | None = None, *,
          max_witnesses: int = 3, search_budget: int = 2_000_000) -> Report:
    """Check a list-append history; ``final`` is each key's list read afterwards by an independent
    reader (keys absent: not read). At most ``max_witnesses`` anomalies are kept per kind; the
    cycle search visits at most about ``search_budget`` nodes (then :attr:`Report.truncated`)."""
    return _Check(history, final, max_witnesses, search_budget).run()


class _Check:
    """One run of the checker; the state shared by its passes."""

    def __init__(self, history: Sequence[Txn], final: Mapping[str, Sequence[int]] | None,
                 limit: int, budget: int) -> None:
        self.limit, self.budget, self.visits, self.truncated = max(1, limit), budget, 0, False
        self.txns: dict[str, Txn] = {}
        for t in history:
            if t.id in self.txns:
                raise HistoryError(f"txn id {t.id!r} occurs twice")
            self.txns[t.id] = t
        self.final = {k: tuple(v) for k, v in (final or {}).items()}
        self.found: dict[str, list[Anomaly]] = {k: [] for k in KINDS}
        self.seen: set[tuple[str, Any]] = set()
        self.totals: Counter[str] = Counter()
        self.writer: dict[tuple[str, int], str] = {}  # (key, element) -> txn id
        self.appends: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.reads: list[tuple[str, int, str, tuple[int, ...]]] = []  # OK/INFO reads: (txn, op index, key, list)
        for t in self.txns.values():
            for i, op in enumerate(t.ops):
                if op.kind is OpKind.APPEND:
                    if (op.key, op.appended) in self.writer:
                        raise HistoryError(f"element {op.appended} appended to {op.key} by both "
                                           f"{self.writer[(op.key, op.appended)]} and {t.id}: elements must be unique")
                    self.writer[(op.key, op.appended)] = t.id
                    self.appends[t.id][op.key].append(op.appended)
                elif t.outcome is not Outcome.FAIL and op.observed is not None:
                    self.reads.append((t.id, i, op.key, op.observed))

    def add(self, kind: str, txns: tuple[str, ...], detail: str, steps: tuple[Edge, ...] = (),
            dedupe: Any = None) -> None:
        if dedupe is not None:
            if (kind, dedupe) in self.seen:
                return
            self.seen.add((kind, dedupe))
        self.totals[kind] += 1
        if len(self.found[kind]) < self.limit:
            self.found[kind].append(Anomaly(kind, txns, steps, detail))

    def run(self) -> Report:
        self._observe()
        self._orders()
        self._internal()
        self._reads_and_edges()
        self._lost()
        self._cycles()
        named = {t for found in self.found.values() for a in found for t in a.txns}
        per_preset: dict[str, Counter[str]] = defaultdict(Counter)
        for t in self.txns.values():
            c = per_preset[t.preset]
            c[t.outcome.value] += 1
            c["committed"] += t.id in self.committed
            c["info_committed"] += t.outcome is Outcome.INFO and t.id in self.committed
        return Report(
            anomalies=MappingProxyType({k: tuple(v) for k, v in self.found.items() if v}),
            totals=MappingProxyType(dict(self.totals)), committed=len(self.committed),
            failed=sum(c["fail"] for c in per_preset.values()), info=sum(c["info"] for c in per_preset.values()),
            info_committed=sum(c["info_committed"] for c in per_preset.values()),
            per_preset=MappingProxyType({p: MappingProxyType(dict(c)) for p, c in per_preset.items()}),
            txns=MappingProxyType({t: self.txns[t] for t in self.txns if t in named}), truncated=self.truncated)

    def _observe(self) -> None:
        """Which INFO transactions some other party saw (so committed), and the distinct lists per key.

        A read by an INFO transaction that did not count is left out of the lists when it shows the
        transaction's own appends: those may have been buffered writes that never committed.
        """
        observed: dict[str, set[int]] = defaultdict(set)  # by anyone but the element's own writer
        ok_lists: dict[str, set[tuple[int, ...]]] = defaultdict(set)
        for tid, _i, key, values in self.reads:
            if self.txns[tid].outcome is Outcome.INFO:
                observed[key].update(set(values) - set(self.appends[tid].get(key, ())))
            else:
                ok_lists[key].add(values)
        for key, lists in ok_lists.items():
            observed[key].update(*lists)
        for key, values in self.final.items():
            observed[key].update(values)
        self.observed = observed
        self.committed = {t.id for t in self.txns.values() if t.outcome is Outcome.OK}
        for t in self.txns.values():
            if t.outcome is Outcome.INFO and any(e in observed[k] for k, es in self.appends[t.id].items() for e in es):
                self.committed.add(t.id)
        self.lists: dict[str, dict[tuple[int, ...], str]] = defaultdict(dict)  # key -> list -> first reader
        for tid, _i, key, values in self.reads:
            if tid in self.committed or not set(values) & set(self.appends[tid].get(key, ())):
                self.lists[key].setdefault(values, tid)
        for key, values in self.final.items():
            self.lists[key].setdefault(values, _FINAL)

    def _orders(self) -> None:
        """Each key's version order (the final list, else the longest read) and the value checks."""
        self.order: dict[str, tuple[int, ...]] = {}
        self.pos: dict[str, dict[int, int]] = {}
        self.unordered: dict[str, set[tuple[int, ...]]] = defaultdict(set)  # lists not a prefix of the order
        written: dict[str, set[int]] = defaultdict(set)
        for key, e in self.writer:
            written[key].add(e)
        for key, lists in self.lists.items():
            ref = self.final[key] if key in self.final else max(lists, key=len)
            ref_src = _FINAL if key in self.final else lists[ref]
            self.order[key] = ref
            pos: dict[int, int] = {}
            for i, e in enumerate(ref):
                pos.setdefault(e, i)
            self.pos[key] = pos
            clean = len(pos) == len(ref) and not set(pos) - written[key]  # then so is every prefix of it
            for values, src in lists.items():
                txns = tuple(dict.fromkeys(s for s in (src, ref_src) if s))
                prefix = ref[:len(values)] == values
                if not prefix:
                    self.unordered[key].add(values)
                    at = next((i for i, (x, y) in enumerate(zip(values, ref, strict=False)) if x != y), len(ref))
                    self.add("incompatible-order", txns,
                             f"{key}: {_who(src)} read {fmt_list(values)}, {_who(ref_src)} read {fmt_list(ref)}; "
                             f"not a prefix (they differ at position {at})")
                if prefix and clean:
                    continue
                if len(set(values)) != len(values):
                    dup = next(e for e, n in Counter(values).items() if n > 1)
                    self.add("duplicate", tuple(dict.fromkeys(s for s in (src, self.writer.get((key, dup), "")) if s)),
                             f"{key}: {_who(src)} read {fmt_list(values)}, in which {dup} occurs twice")
                for e in sorted(set(values) - written[key]):
                    self.add("garbage", (src,) if src else (),
                             f"{key}: {_who(src)} read {e}, which no transaction appended", dedupe=(key, e))

    def _internal(self) -> None:
        """Each txn's reads against its own earlier reads and appends (see the module docstring)."""
        for t in self.txns.values():
            if t.outcome is Outcome.FAIL:
                continue
            later = {(op.key, op.appended): i for i, op in enumerate(t.ops) if op.kind is OpKind.APPEND}
            last: dict[str, tuple[int, ...]] = {}
            mine: dict[str, list[int]] = defaultdict(list)
            for i, op in enumerate(t.ops):
                if op.kind is OpKind.APPEND:
                    mine[op.key].append(op.appended)
                    continue
                values = op.observed
                if values is None:
                    continue
                prev = last.get(op.key)
                why = ""
                if prev is not None and values[:len(prev)] != prev:
                    why = f"does not extend its earlier read {fmt_list(prev)}"
                elif not _in_order(mine[op.key], values):
                    why = f"lacks its own appends {fmt_list(tuple(mine[op.key]))} in order"
                else:
                    future = [e for (k, e), j in later.items() if k == op.key and j > i and e in values]
                    if future:
                        why = f"holds {fmt_list(tuple(future))}, which the transaction appends only later"
                if why:
                    self.add("internal", (t.id,), f"{t.id} read {op.key} = {fmt_list(values)}, which {why}")
                last[op.key] = values

    def _reads_and_edges(self) -> None:
        """G1a, G1b and the dependency graph's edges (ww from the orders, wr/rw from committed reads)."""
        self.node = {t: n for n, t in enumerate(t for t in self.txns if t in self.committed)}
        self.edges: dict[tuple[int, int, str], Edge] = {}
        for key, ref in self.order.items():
            for x, y in pairwise(ref):
                self._edge("ww", self.writer.get((key, x), ""), self.writer.get((key, y), ""), key, None, (x, y))
        failed: dict[str, set[int]] = defaultdict(set)  # failed txns' elements that some list holds
        for (key, e), w in self.writer.items():
            if self.txns[w].outcome is Outcome.FAIL and e in self.observed.get(key, ()):
                failed[key].add(e)
        for tid, _i, key, values in [*self.reads, *((_FINAL, 0, k, v) for k, v in self.final.items())]:
            if tid != _FINAL and tid not in self.committed:
                continue
            for e in failed.get(key, ()):
                if e in values:
                    w = self.writer[(key, e)]
                    why = f" ({self.txns[w].error})" if self.txns[w].error else ""
                    self.add("G1a", tuple(s for s in (w, tid) if s),
                             f"{_who(tid)} read {key} = {fmt_list(values)}, which holds {e} appended by {w}, "
                             f"which failed{why}", dedupe=(tid, key, e))
            if tid == _FINAL:
                continue
            ref, at = self.order[key], len(values) - 1  # index of the read's last element in the order
            if values and key in self.unordered and values in self.unordered[key]:
                at = self.pos[key].get(values[-1], -1)
            if values:
                w = self.writer.get((key, values[-1]), "")
                if w and w != tid and self.appends[w][key][-1] != values[-1]:
                    self.add("G1b", (w, tid), f"{tid} read {key} = {fmt_list(values)}, ending with {values[-1]}, "
                             f"which {w} followed with {self.appends[w][key][-1]}", dedupe=(key, values[-1]))
                self._edge("wr", w, tid, key, values, (values[-1],))
                if at < 0:  # its last element is not in the version order (incompatible-order)
                    continue
            if at + 1 < len(ref):
                self._edge("rw", tid, self.writer.get((key, ref[at + 1]), ""), key, values, (ref[at + 1],))

    def _edge(self, kind: str, src: str, dst: str, key: str, read: tuple[int, ...] | None,
              written: tuple[int, ...]) -> None:
        """Edges join committed txns only; the first justification found is kept."""
        u, v = self.node.get(src), self.node.get(dst)
        if u is not None and v is not None and u != v and (u, v, kind) not in self.edges:
            self.edges[(u, v, kind)] = Edge(kind, src, dst, key, read, written)

    def _lost(self) -> None:
        """Committed appends the final read lacks (keys without a final read prove nothing)."""
        present = {k: set(v) for k, v in self.final.items()}
        for (key, e), w in self.writer.items():
            if key in present and w in self.committed and e not in present[key]:
                self.add("lost", (w,), f"{w} ({self.txns[w].outcome.value}) appended {e} to {key}, "
                         f"missing from the final list {fmt_list(self.final[key])}")

    def _cycles(self) -> None:
        """Tarjan SCCs per edge-type subset, then shortest witness cycles (BFS) inside them."""
        n = len(self.node)
        adj: dict[str, list[list[int]]] = {k: [[] for _ in range(n)] for k in _EDGE_KINDS}
        for u, v, kind in self.edges:
            adj[kind][u].append(v)
        ww = adj["ww"]
        wwwr = [a + b for a, b in zip(ww, adj["wr"], strict=True)]
        full = [a + b for a, b in zip(wwwr, adj["rw"], strict=True)]
        comp = _components(full)
        if max(comp, default=-1) < 0:
            return
        self._one_per_component("G0", ww, _components(ww), "ww", ("ww",))
        self._one_per_component("G1c", wwwr, _components(wwwr), "wr", ("ww", "wr"))
        by_dst: dict[int, list[int]] = defaultdict(list)
        for u, v, kind in self.edges:
            if kind == "rw" and comp[u] == comp[v] >= 0:
                by_dst[v].append(u)
        for b, sources in by_dst.items():
            if self._full("G-single") and self._full("G2-item"):
                break
            if self.visits > self.budget:
                self.truncated = True
                break
            near, far = _reach(wwwr, b, comp), None
            self.visits += len(near)
            for a in sources:
                if a in near:
                    if not self._full("G-single"):
                        self._add_cycle("G-single", (a, b, "rw"), _trace(near, a), ("ww", "wr"))
                elif not self._full("G2-item"):
                    if far is None:
                        far = _reach(full, b, comp)
                        self.visits += len(far)
                    self._add_cycle("G2-item", (a, b, "rw"), _trace(far, a), ("ww", "wr", "rw"))
        if self.truncated:  # make sure every cyclic component still yields some witness
            covered = {self.node[t] for k in _CYCLE_KINDS for a in self.found[k] for t in a.txns}
            done = {comp[u] for u in covered}
            for u, v, kind in list(self.edges):
                if comp[u] == comp[v] >= 0 and comp[u] not in done:
                    done.add(comp[u])
                    self._add_cycle("", (u, v, kind), _trace(_reach(full, v, comp), u), _EDGE_KINDS)

    def _full(self, kind: str) -> bool:
        return len(self.found[kind]) >= self.limit

    def _one_per_component(self, kind: str, adj: list[list[int]], comp: list[int], closing: str,
                           kinds: tuple[str, ...]) -> None:
        done: set[int] = set()
        for u, v, k in self.edges:
            if k == closing and comp[u] == comp[v] >= 0 and comp[u] not in done and not self._full(kind):
                done.add(comp[u])
                self._add_cycle(kind, (u, v, k), _trace(_reach(adj, v, comp), u), kinds)

    def _add_cycle(self, kind: str, closing: tuple[int, int, str], path: list[int], kinds: tuple[str, ...]) -> None:
        """Record the cycle ``closing`` (a -> b) + ``path`` (b ... a); hops take the first kind present."""
        steps = [self.edges[closing]]
        for u, v in pairwise(path):
            steps.append(next(self.edges[(u, v, k)] for k in kinds if (u, v, k) in self.edges))
        rw = sum(e.kind == "rw" for e in steps)
        if not kind:
            kind = ("G0" if all(e.kind == "ww" for e in steps) else "G1c") if rw == 0 else \
                "G-single" if rw == 1 else "G2-item"
        txns = tuple(e.src for e in steps)
        detail = f"cycle of {len(steps)} transactions: " + ", ".join(e.kind for e in steps)
        self.add(kind, txns, detail, tuple(steps), dedupe=frozenset(txns))


def _in_order(items: Sequence[int], values: tuple[int, ...]) -> bool:
    """Whether ``items`` occur in ``values`` in this order (not necessarily adjacent)."""
    start = 0
    for e in items:
        try:
            start = values.index(e, start) + 1
        except ValueError:
            return False
    return True


def _components(adj: Sequence[Sequence[int]]) -> list[int]:
    """Tarjan's strongly connected components (iterative): each node's component id, -1 if alone."""
    n = len(adj)
    index, low, on = [-1] * n, [0] * n, [False] * n
    comp = [-1] * n
    stack: list[int] = []
    counter = ncomp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i < len(adj[v]):
                work[-1] = (v, i + 1)
                w = adj[v][i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, 0))
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    members.append(w)
                    if w == v:
                        break
                if len(members) > 1:
                    for w in members:
                        comp[w] = ncomp
                    ncomp += 1
    return comp


def _reach(adj: Sequence[Sequence[int]], src: int, comp: Sequence[int]) -> dict[int, int]:
    """Breadth-first parents of every node reachable from ``src`` inside ``src``'s component."""
    parent = {src: src}
    queue = deque([src])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if v not in parent and comp[v] == comp[src]:
                parent[v] = u
                queue.append(v)
    return parent


def _trace(parent: Mapping[int, int], dst: int) -> list[int]:
    """The shortest path from the BFS source to ``dst`` (which must be reachable)."""
    path = [dst]
    while parent[path[-1]] != path[-1]:
        path.append(parent[path[-1]])
    return path[::-1]
