"""The transaction widget's view state: a pure fold of a transaction's event stream.

No I/O and no ipywidgets here: :func:`fold` (or :meth:`TxnView.apply`, one event at a time) turns
the typed events of :mod:`lv_core.events` into what the widget shows: the header (name, preset,
features, state, elapsed), one marker row per table, the dependency DAG around the transaction,
the LV[I] validation per table, a timeline and the final result. Rendering lives in
:mod:`widgets.render` (HTML, text) and :mod:`widgets.dag_svg` (Graphviz).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lv_core import events as ev
from lv_core.protocol.dag import DagEdge, DagView, Shift
from lv_core.protocol.layout import (
    display_name,
    short_id,  # noqa: F401  (re-exported: the one short form)
)
from lv_core.protocol.markers import name_of

#: Display states of a transaction, in lifecycle order ("committing": LV[R]/LV[CT] commit work
#: without LV[I] validation; "unknown": a decided commit whose publication failed).
STATES: tuple[str, ...] = ("active", "waiting", "committing", "validating", "committed", "aborted", "unknown")
STATE_COLOURS: Mapping[str, str] = {
    "active": "#1f6fb2",
    "waiting": "#c77700",
    "committing": "#6a4fb3",
    "validating": "#6a4fb3",
    "committed": "#2e7d32",
    "aborted": "#c62828",
    "unknown": "#6d6d6d",
}
#: Abort "rules" of a transaction the user ended on purpose (``%lv rollback``, ROLLBACK, Cancel, an
#: interrupt): shown neutral, not as an error.
USER_ENDED: tuple[str, ...] = ("rollback", "interrupt")
#: Marker row states.
MARKER_STATES: tuple[str, ...] = ("placed", "waiting", "shifted", "lost", "committed", "freed", "read")
#: The DAG around the transaction is lv_core's :class:`~lv_core.protocol.dag.DagView` (one class for
#: ``Transaction.dag()`` and this model); ``DagData``, ``DagEdge`` and ``Shift`` keep their names here.
DagData = DagView
TIMELINE_KEEP = 500  # entries kept in the model (older ones are counted in ``TxnView.dropped``)

#: What to do after an abort, by rule, when the reason carries no "Help:" sentence.
DEFAULT_HELP: Mapping[str, str] = {
    "R1": "retry the transaction to read current data, or allow older reads with a larger slack.",
    "R2": "retry the transaction.",
    "R3": "retry the transaction.",
    "conflict": "retry the transaction, or raise its retry bound.",
    "deadlock": "retry the transaction; fewer concurrent transactions on these tables avoid it.",
    "timeout": "commit or roll back the transaction it waited for, or retry with a longer timeout.",
    "exposed_read": "run the transaction again: a result it already returned changed.",
    "crashed": "run `%lv recover` (or lh.recover()) and retry the transaction.",
    "rollback": "nothing: the transaction was rolled back on request.",
    "unknown": ("do not run it again yet: its commit is recorded and completes by roll forward once its "
                "lease runs out (the next transaction on these tables, or `%lv recover`, does it)."),
}


def versions_text(versions: Mapping[str, int] | Iterable[tuple[str, int]], empty: str = "") -> str:
    """Tables at versions, the one way they are written (``kv@4, kv_b@2``), in the order given (pass
    ``sorted(d.items())`` for name order); ``empty`` when there are none: each place says what no
    version means there ("read-only", "nothing written", "-")."""
    pairs = versions.items() if isinstance(versions, Mapping) else versions
    return ", ".join(f"{t}@{v}" for t, v in pairs) or empty


def split_help(reason: str) -> tuple[str, str]:
    """Split an abort reason into (what happened, what to do) at its "Help:" sentence."""
    head, sep, tail = reason.partition("Help:")
    return head.strip(), tail.strip() if sep else ""


@dataclass
class MarkerRow:
    """One table the transaction touched: the marker it holds there and that marker's state."""

    table: str
    version: int | None = None  # marker version held (None: no marker, e.g. preset ``delta``)
    state: str = "placed"
    since: float = 0.0  # wall-clock time of the last state change
    read_version: int | None = None  # snapshot version read (base)
    waiting_on: tuple[str, int] | None = None  # (txn, version) while waiting in this table
    shifted_from: int | None = None
    detail: str = ""
    attempts: int = 1


@dataclass
class RuleResult:
    name: str
    applies: bool
    passed: bool
    detail: str = ""


@dataclass
class TableValidation:
    """LV[I] inputs and rule outcomes of one table (r/h/w/l/written_logs as in the paper)."""

    table: str
    r: int | None = None
    h: int | None = None
    w: int | None = None
    l: int | None = None  # the paper's name
    written_logs: int | None = None
    rules: dict[str, RuleResult] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # new_table, moved_from, read, written, ...

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rules.values())


@dataclass
class ValidationView:
    compatible: bool
    gvl_version: int | None
    failed_rule: str | None
    tables: dict[str, TableValidation]
    ts: float


@dataclass
class TimelineEntry:
    ts: float
    kind: str  # the event class name
    text: str
    level: str = "info"  # "info" | "wait" | "warn" | "ok" | "error"


@dataclass
class ResultView:
    outcome: str  # "committed" | "aborted" | "unknown" (decided or possibly landed; not completed here)
    ts: float
    versions: dict[str, int] = field(default_factory=dict)
    redo_count: int = 0
    elapsed_s: float | None = None
    reason: str = ""
    rule: str = ""
    help: str = ""
    blocked_by: tuple[str, ...] = ()  # transactions it still waited for when it aborted


@dataclass
class ProgressView:
    """The running statement's progress (the last :class:`~lv_core.events.Progress` event)."""

    statement: int
    stage: str
    done: int
    total: int
    elapsed_s: float
    ts: float
    running: int = 0  # tasks in flight

    @property
    def fraction(self) -> float | None:
        """Share of the known tasks done (None while none is known)."""
        return min(1.0, self.done / self.total) if self.total > 0 else None

    @property
    def finished(self) -> bool:
        """The statement ended (the progress line goes away). Not when its known tasks are all done:
        a statement may start more Spark operations, and its clock runs until it ends."""
        return self.stage in ("done", "failed")


@dataclass(frozen=True)
class ConflictSeen:
    """A conflict that forced a redo: the commit at ``table@version`` invalidated ``step``."""

    table: str
    version: int
    step: int
    files: tuple[str, ...]
    ts: float


def _rule(name: str, raw: Any) -> RuleResult:
    if isinstance(raw, Mapping):
        return RuleResult(name, bool(raw.get("applies", True)), bool(raw.get("passed", True)),
                          str(raw.get("detail") or ""))
    return RuleResult(name, True, bool(raw))


def _int(x: Any) -> int | None:
    try:
        return None if x is None else int(x)
    except (TypeError, ValueError):
        return None


@dataclass
class TxnView:
    """Everything the transaction widget shows, folded from events."""

    txn: str
    name: str | None = None
    preset: str = ""
    features: tuple[str, ...] = ()
    began: float | None = None
    markers: dict[str, MarkerRow] = field(default_factory=dict)
    dag: DagView = field(init=False)
    validation: ValidationView | None = None
    timeline: list[TimelineEntry] = field(default_factory=list)
    dropped: int = 0  # timeline entries dropped (oldest first)
    requests: dict[str, int] = field(default_factory=dict)
    redos: list[tuple[int, int, float]] = field(default_factory=list)  # (from_step, attempt, ts)
    conflicts: int = 0
    steps: int = 0  # operations done (incl. redone ones)
    waits: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)  # open: (table, v) -> (txn, since)
    waits_total: int = 0
    result: ResultView | None = None
    last_ts: float | None = None
    engine_state: str | None = None  # Transaction.state when known (set by the widget before rendering)
    names: dict[str, str] = field(default_factory=dict)  # txn id -> display name (others, when known)
    events_seen: int = 0
    progress: ProgressView | None = None  # the running statement (None when none runs)
    conflict_log: list[ConflictSeen] = field(default_factory=list)
    #: other live transactions around this one from a marker scan (the widget sets these; cleared at the end)
    live_nodes: dict[str, str] = field(default_factory=dict)
    live_edges: list[DagEdge] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dag = DagView(self.txn)
        self.dag.nodes[self.txn] = "active"

    # ------------------------------------------------------------------ derived
    @property
    def state(self) -> str:
        """active / waiting / committing / validating / committed / aborted (/ unknown)."""
        if self.result is not None:
            return self.result.outcome
        if self.engine_state in ("committed", "aborted", "unknown"):
            return self.engine_state
        if self.waits:
            return "waiting"
        if self.validation is not None:
            return "validating"  # validated, publishing
        if self.engine_state == "committing":
            return "validating" if "I" in self.features else "committing"
        return "active"

    @property
    def colour(self) -> str:
        """The state's colour; red only for errors and aborts: a rollback or cancel the user asked
        for is neutral grey."""
        if self.tone == "neutral":
            return STATE_COLOURS["unknown"]
        return STATE_COLOURS.get(self.state, "#6d6d6d")

    @property
    def tone(self) -> str:
        """How its outcome reads: "error" (aborted by a rule, a failed statement, outcome unknown),
        "neutral" (rolled back or cancelled as the user asked), "ok" (committed, redos included) or
        "live" (not ended)."""
        res = self.result
        if res is None:
            return "live"
        if res.outcome == "committed":
            return "ok"
        return "neutral" if res.outcome == "aborted" and res.rule in USER_ENDED else "error"

    @property
    def done(self) -> bool:
        """True once the Committed or Aborted event arrived (the stream ends there)."""
        return self.result is not None

    @property
    def title(self) -> str:
        return self.name or self.txn

    def label(self, txn: str) -> str:
        """Display name of a transaction: its name in this process, else another client's
        ``NAME (short-id)`` (the name its markers carry), else its short id."""
        if txn == self.txn:
            return self.name or short_id(txn)
        return self.names.get(txn) or display_name(txn, name_of(txn))

    def offset(self, ts: float) -> float:
        """Seconds since begin."""
        return ts - self.began if self.began is not None else 0.0

    def elapsed(self, now: float | None = None) -> float:
        """Seconds from begin to the end (or to ``now`` while running)."""
        if self.began is None:
            return 0.0
        if self.result is not None:
            if self.result.outcome == "committed" and self.result.elapsed_s is not None:
                return self.result.elapsed_s
            return max(0.0, self.result.ts - self.began)
        return max(0.0, (time.time() if now is None else now) - self.began)

    @property
    def requests_total(self) -> int:
        return sum(self.requests.values())

    # ------------------------------------------------------------------ folding
    def _note(self, e: ev.Event, text: str, level: str = "info") -> None:
        self.timeline.append(TimelineEntry(e.ts, e.kind, text, level))
        if len(self.timeline) > TIMELINE_KEEP:
            cut = len(self.timeline) - TIMELINE_KEEP
            del self.timeline[:cut]
            self.dropped += cut

    def _row(self, table: str, ts: float) -> MarkerRow:
        row = self.markers.get(table)
        if row is None:
            row = self.markers[table] = MarkerRow(table, since=ts)
        return row

    def apply(self, e: ev.Event) -> None:
        """Fold one event into the view (events of other transactions are ignored)."""
        if e.txn != self.txn:
            return
        self.events_seen += 1
        self.last_ts = e.ts
        handler = getattr(self, f"_on_{e.kind}", None)
        if handler is not None:
            handler(e)
        else:
            self._note(e, e.kind)
        self.dag.nodes[self.txn] = self.state

    def _on_Began(self, e: ev.Began) -> None:
        self.began = e.ts
        self.preset, self.features, self.name = e.preset, tuple(e.features), e.name or self.name
        feats = "+".join(e.features) if e.features else "none"
        self._note(e, f"began: preset {e.preset}, features {feats}")

    def _on_MarkerPlaced(self, e: ev.MarkerPlaced) -> None:
        row = self._row(e.table, e.ts)
        tries = f" after {e.attempts} tries" if e.attempts > 1 else ""
        if e.shift:
            if row.version is not None and row.version != e.version:
                row.shifted_from = row.version
            row.state = "shifted"
            row.detail = f"shifted from @{row.shifted_from}" if row.shifted_from is not None else "shifted"
            self._note(e, f"marker {e.table}@{e.version} placed by a marker shift{tries}", "warn")
        else:
            replaced = row.state == "lost" and row.version is not None
            row.state, row.detail = "placed", (f"replaces lost @{row.version}" if replaced else "")
            self._note(e, f"marker {e.table}@{e.version} placed{tries}")
        row.version, row.attempts, row.since, row.waiting_on = e.version, e.attempts, e.ts, None

    def _on_MarkerLost(self, e: ev.MarkerLost) -> None:
        row = self._row(e.table, e.ts)
        if row.version in (None, e.version):
            row.version, row.state, row.since, row.detail = e.version, "lost", e.ts, "freed by someone else"
        self._note(e, f"marker {e.table}@{e.version} lost (freed by someone else); claiming a new one", "warn")

    def _on_MarkerFreed(self, e: ev.MarkerFreed) -> None:
        row = self.markers.get(e.table)
        ours = row is not None and row.version == e.version and e.reason != "expired"
        if not ours:  # we freed an expired marker of another transaction while waiting
            self._note(e, f"freed the expired marker {e.table}@{e.version} of a crashed transaction", "warn")
            for w in self.dag.edges:
                if w.table == e.table and w.version == e.version:
                    w.status, w.outcome = "resolved", "expired-freed"
            return
        assert row is not None
        row.state, row.since, row.waiting_on = "freed", e.ts, None
        row.detail = e.reason + (f" by {self.label(e.by)}" if e.by and e.by != self.txn else "")
        level = "warn" if e.reason in ("shift", "expired", "checkpoint") else "info"
        self._note(e, f"marker {e.table}@{e.version} freed ({e.reason})", level)

    def _on_SnapshotRead(self, e: ev.SnapshotRead) -> None:
        row = self._row(e.table, e.ts)
        if row.read_version is None:
            row.read_version = e.version
        if row.version is None and self.began is not None and not self.markers_used:
            row.state = "read"
        self._note(e, f"reads {e.table} at version {e.version} ({e.files} file{'s' if e.files != 1 else ''})")

    @property
    def markers_used(self) -> bool:
        return bool({"R", "CT"} & set(self.features))

    def _on_EdgeAdded(self, e: ev.EdgeAdded) -> None:
        self.dag.edge(self.txn, e.to_txn, e.table, e.version)
        self._note(e, f"edge → {self.label(e.to_txn)} at {e.table}@{e.version}: its marker comes first")

    def _on_CycleFound(self, e: ev.CycleFound) -> None:
        cycle = tuple(tuple(x) for x in e.edges)
        self.dag.cycles.append(cycle)  # type: ignore[arg-type]
        for src, dst, label in cycle:
            table, _, v = label.rpartition("@")
            version = _int(v)
            edge = self.dag.edge(src, dst, table, version if version is not None else -1)
            edge.in_cycle = True
        path = " → ".join([self.label(cycle[0][0])] + [f"{self.label(d)} ({lbl})" for _, d, lbl in cycle])
        self._note(e, f"cycle found: {path}", "warn")

    def _on_Shifted(self, e: ev.Shifted) -> None:
        moves = tuple((str(t), int(a), int(b)) for t, a, b in e.moves)
        self.dag.shifts.append(Shift(moves, e.reason, e.ts))
        for t, old, new in moves:
            row = self._row(t, e.ts)
            row.shifted_from = old
            if row.version == new:
                row.state, row.detail = "shifted", f"shifted from @{old} ({e.reason})"
            for edge in self.dag.edges:  # incoming edges at the old marker are inverted by the shift
                if edge.dst == self.txn and edge.table == t and edge.version == old:
                    edge.inverted, edge.status = True, "resolved"
        what = ", ".join(f"{t} @{a} → @{b}" for t, a, b in moves)
        self._note(e, f"marker shift ({e.reason}): {what}", "warn")

    def _on_OperationDone(self, e: ev.OperationDone) -> None:
        self.steps += 1
        files = f"+{e.added}/−{e.removed} files"
        self._note(e, f"step {e.step}: {e.op} on {e.table} ({e.sublog} sublog, {files})")

    def _on_Waiting(self, e: ev.Waiting) -> None:
        self.waits[(e.table, e.version)] = (e.on_txn, e.ts)
        self.waits_total += 1
        edge = self.dag.edge(self.txn, e.on_txn, e.table, e.version)
        edge.status = "waiting"
        row = self._row(e.table, e.ts)
        row.waiting_on, row.state, row.since = (e.on_txn, e.version), "waiting", e.ts
        self._note(e, f"waiting for {self.label(e.on_txn)}: its marker {e.table}@{e.version} is pending", "wait")

    def _on_WaitEnded(self, e: ev.WaitEnded) -> None:
        since = self.waits.pop((e.table, e.version), (e.on_txn, e.ts))[1]
        edge = self.dag.edge(self.txn, e.on_txn, e.table, e.version)
        edge.status, edge.outcome = "resolved", e.outcome
        if e.outcome == "committed":
            self.dag.nodes[e.on_txn] = "committed"
        row = self._row(e.table, e.ts)
        if row.state == "waiting" and not any(t == e.table for t, _ in self.waits):
            row.state = "shifted" if row.shifted_from is not None else "placed"
            row.waiting_on, row.since = None, e.ts
            row.detail = f"waited {e.ts - since:.2f} s for {self.label(e.on_txn)} ({e.outcome})"
        self._note(e, f"{self.label(e.on_txn)}'s marker {e.table}@{e.version} {e.outcome}; "
                      f"waited {e.ts - since:.2f} s", "ok")

    def _on_Progress(self, e: ev.Progress) -> None:  # frequent: no timeline entry
        self.progress = ProgressView(e.statement, e.stage, e.done, e.total, e.elapsed_s, e.ts,
                                     getattr(e, "running", 0))

    def by_whom(self, table: str, version: int) -> str | None:
        """The transaction whose marker at ``table@version`` this one waited behind, if known."""
        return next((d.dst for d in self.dag.edges if d.src == self.txn and d.table == table
                     and d.version == version), None)

    def _on_ConflictFound(self, e: ev.ConflictFound) -> None:
        self.conflict_log.append(ConflictSeen(e.table, e.version, e.step, tuple(e.files), e.ts))
        self.conflicts += 1
        n = len(e.files)
        files = f" ({n} file{'s' if n != 1 else ''})" if n else ""
        self._note(e, f"conflict: the commit at {e.table}@{e.version} invalidates step {e.step}{files}", "warn")

    def _on_Redo(self, e: ev.Redo) -> None:
        self.redos.append((e.from_step, e.attempt, e.ts))
        self._note(e, f"redo from step {e.from_step} (attempt {e.attempt})", "warn")

    def _on_Validated(self, e: ev.Validated) -> None:
        tables: dict[str, TableValidation] = {}
        for t, raw in (e.tables or {}).items():
            raw = raw if isinstance(raw, Mapping) else {}
            rules = {str(k): _rule(str(k), v) for k, v in (raw.get("rules") or {}).items()}
            extra = {k: v for k, v in raw.items() if k not in ("r", "h", "w", "l", "written_logs", "rules")}
            tables[str(t)] = TableValidation(str(t), _int(raw.get("r")), _int(raw.get("h")), _int(raw.get("w")),
                                             _int(raw.get("l")), _int(raw.get("written_logs")), rules, extra)
        self.validation = ValidationView(bool(e.compatible), e.gvl_version, e.failed_rule, tables, e.ts)
        if e.compatible:
            gv = f"; global version {e.gvl_version}" if e.gvl_version is not None else ""
            self._note(e, f"validation passed (R1-R3 on {len(tables)} table(s)){gv}", "ok")
        else:
            where = next((t for t, tv in tables.items() if not tv.passed), "")
            self._note(e, f"validation failed: {e.failed_rule or 'a rule'}{' on ' + where if where else ''}", "error")

    def _on_Requests(self, e: ev.Requests) -> None:
        self.requests = {str(k): int(v) for k, v in (e.counts or {}).items()}

    def _on_Committed(self, e: ev.Committed) -> None:
        self.result = ResultView("committed", e.ts, dict(e.versions), e.redo_count, e.elapsed_s)
        self.waits.clear()
        for t, v in e.versions.items():
            row = self._row(t, e.ts)
            row.version, row.state, row.since, row.waiting_on = v, "committed", e.ts, None
            row.detail = f"after a shift from @{row.shifted_from}" if row.shifted_from is not None else ""
        for row in self.markers.values():
            if row.state in ("placed", "shifted", "waiting", "read"):
                row.state, row.since, row.waiting_on = ("freed" if row.version is not None else "read"), e.ts, None
        self._close_edges()
        what = versions_text(sorted(e.versions.items()), "nothing written")
        redo = f", {e.redo_count} redo{'s' if e.redo_count != 1 else ''}" if e.redo_count else ""
        self._note(e, f"committed: {what}{redo}, {e.elapsed_s:.2f} s", "ok")

    def _on_Aborted(self, e: ev.Aborted) -> None:
        what, help_ = split_help(e.reason)
        unknown = e.rule == "unknown"  # decided (or possibly landed): markers are not freed
        self.result = ResultView("unknown" if unknown else "aborted", e.ts, reason=what or e.reason, rule=e.rule,
                                 help=help_ or DEFAULT_HELP.get(e.rule, "retry the transaction."),
                                 blocked_by=tuple(txn for txn, _ in self.waits.values()))
        self.waits.clear()
        for row in self.markers.values():
            if row.state not in ("freed", "committed"):
                if unknown:
                    row.waiting_on = None
                    row.detail = "outcome unknown: completed by roll forward or freed once the lease runs out"
                    continue
                row.state, row.since, row.waiting_on = "freed", e.ts, None
                row.detail = row.detail or f"aborted ({e.rule})"
        self._close_edges()
        self._note(e, f"{'outcome unknown' if unknown else 'aborted'} ({e.rule}): {what or e.reason}", "error")

    def _close_edges(self) -> None:
        self.progress = None
        self.live_nodes, self.live_edges = {}, []
        for edge in self.dag.edges:
            if edge.src == self.txn and edge.status != "resolved":
                edge.status = "resolved"


def fold(events: Iterable[ev.Event], *, txn: str | None = None, engine_state: str | None = None,
         names: Mapping[str, str] | None = None) -> TxnView:
    """Fold ``events`` (one transaction's stream) into a :class:`TxnView`.

    ``txn`` defaults to the first event's transaction; ``engine_state`` is ``Transaction.state``
    when known (it tells "committing" apart from "active"); ``names`` maps other transactions'
    ids to display names.
    """
    items = list(events)
    if txn is None:
        if not items:
            raise ValueError("fold() needs events or a transaction id")
        txn = items[0].txn
    view = TxnView(txn)
    if names:
        view.names.update(names)
    for e in items:
        view.apply(e)
    view.engine_state = engine_state
    view.dag.nodes[view.txn] = view.state
    return view


__all__ = [
    "DEFAULT_HELP",
    "MARKER_STATES",
    "STATES",
    "STATE_COLOURS",
    "DagData",
    "DagEdge",
    "DagView",
    "ConflictSeen",
    "MarkerRow",
    "ProgressView",
    "ResultView",
    "RuleResult",
    "Shift",
    "TableValidation",
    "TimelineEntry",
    "TxnView",
    "ValidationView",
    "fold",
    "short_id",
    "split_help",
]
