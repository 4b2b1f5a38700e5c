"""The commit plan of a validated transaction, and its idempotent execution (roll forward).

Once validation passed, the validation lock is moved to state "committing" holding a plan: per
table the exact commit bytes, the Delta version and how it is written, plus the gvl base version.
:func:`execute_plan` writes it and publishes the new global version. The owner and, after the
owner's lease expired, whoever takes the lock over run the same function; every step is
idempotent, so both may run concurrently and end in the same state:

- ``create`` (put-if-absent at ``version``): a version already holding these exact bytes is
  ours (written by the other runner). A version taken by anything else breaks the plan, except
  for a blind append, which walks up to the next free version (both runners walk the same
  sequence of occupied versions, so they land on the same one).
- ``overwrite-marker`` (the transaction's marker reserves ``version``; the commit is written there,
  put-if-absent, as markers live beside the log): a version holding our bytes is done; anything else
  (an empty commit after the owner's lease ran out, or a writer that ignores markers) breaks the plan.
- the global version ``gvl_base + 1`` is published by put-if-absent; one already published by
  the plan's transaction is ours. One that no LakeVilla holder wrote (a foreign or malformed object,
  :class:`~lv_core.protocol.gvl.ForeignGlobalVersion`) voids the plan like a break (rule
  :data:`GLOBAL_LOG`): every table commit written is reverted, nothing is published.

A broken plan is rolled back: log files are never rewritten, so for every version it already wrote a
revert commit is appended (removing what it added, adding back what it removed), and nothing is
published, so no LV[I] reader ever sees part of it (plain Delta readers see the commit and its revert). A runner
that finds our commit already written and our revert right after it stops there (rule :data:`VOIDED`): the
plan was broken or voided before and stays so. Entries
are written in the order: non-blind creates, blind creates, then the marker overwrites (in parallel),
so a lost create race (the only likely break) usually happens before anything was written.

A plan read back from the store (:func:`parse_plan`) is checked before anyone may execute it:
valid table names, non-negative integer versions, a known mode, commit bytes that decode as a
Delta commit, at most one entry per table, and valid additions. A plan failing the check
(written by a buggy or foreign client) raises :class:`InvalidPlan` and is never executed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from lv_core import concurrency
from lv_core.delta.actions import Action, AddFile, CommitInfo, RemoveFile, decode_commit, encode_commit
from lv_core.delta.table import validate_table_name
from lv_core.errors import AlreadyExists, LvError, NotFound
from lv_core.protocol import ict
from lv_core.protocol.gvl import ForeignGlobalVersion, GlobalLog, GvlState, move_out
from lv_core.protocol.layout import commit_key
from lv_core.protocol.markers import KEY, append_at_tail, classify
from lv_core.protocol.validation import ValidationOutcome
from lv_core.storage.base import CREATE, ObjectStore
from lv_core.testing import crashpoint

CREATE_MODE = "create"
OVERWRITE_MARKER = "overwrite-marker"
MODES = (CREATE_MODE, OVERWRITE_MARKER)
#: The rule of a plan voided because its global version holds an object no LakeVilla holder wrote.
GLOBAL_LOG = "global_log"
#: The rule of a plan a runner before broke or voided (a second runner finds our revert after our commit).
VOIDED = "voided"


class InvalidPlan(ValueError):
    """A recorded plan (or one of its entries) is malformed: it must never be executed."""


def _version(value: Any, what: str) -> int:
    """``value`` if it is a non-negative int (not a bool), else raise InvalidPlan."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidPlan(f"{what} must be a non-negative integer, not {value!r}")
    return value


def _table(value: Any, what: str) -> str:
    try:
        return validate_table_name(value)
    except LvError as e:
        raise InvalidPlan(f"{what}: {e}") from None


@dataclass(frozen=True)
class PlannedCommit:
    """One table's commit in a plan.

    Attributes:
        table: table name.
        version: the Delta version it goes to (the validated write version ``w``).
        data: the exact commit bytes (Delta JSON lines; include a commitInfo naming the txn).
        mode: "create" (put-if-absent) or "overwrite-marker" (if-match on ``etag``).
        etag: the etag of the transaction's marker (``overwrite-marker`` only).
        blind: a blind append: may move to the next free version if ``version`` was taken.
    """

    table: str
    version: int
    data: bytes
    mode: str = CREATE_MODE
    etag: str | None = None
    blind: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.mode == OVERWRITE_MARKER and not self.etag:
            raise ValueError(f"{self.table}@{self.version}: overwrite-marker needs the marker's etag")

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "mode": self.mode, "etag": self.etag,
                "blind": self.blind, "commit": self.data.decode()}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "PlannedCommit":
        """Parse and check one recorded entry (see :func:`check_entry`).

        Raises:
            InvalidPlan: a field is missing or has a bad type or value.
        """
        if not isinstance(body, Mapping):
            raise InvalidPlan(f"a plan entry must be a JSON object, not {type(body).__name__}")
        for k in ("table", "version", "mode", "commit"):
            if k not in body:
                raise InvalidPlan(f"a plan entry misses {k!r}")
        table = _table(body["table"], "plan entry")
        version = _version(body["version"], f"the version of plan entry {table!r}")
        mode, etag, blind, commit = body["mode"], body.get("etag"), body.get("blind", False), body["commit"]
        if mode not in MODES:
            raise InvalidPlan(f"plan entry {table}@{version}: mode must be one of {MODES}, not {mode!r}")
        if etag is not None and not isinstance(etag, str):
            raise InvalidPlan(f"plan entry {table}@{version}: etag must be a string, not {etag!r}")
        if not isinstance(blind, bool):
            raise InvalidPlan(f"plan entry {table}@{version}: blind must be true or false, not {blind!r}")
        if not isinstance(commit, str):
            raise InvalidPlan(f"plan entry {table}@{version}: commit must be a string, not {type(commit).__name__}")
        try:
            data = commit.encode("utf-8")
        except UnicodeError as e:
            raise InvalidPlan(f"plan entry {table}@{version}: commit is not valid text ({e})") from None
        try:
            entry = cls(table, version, data, mode, etag, blind)
        except ValueError as e:
            raise InvalidPlan(f"plan entry {table}@{version}: {e}") from None
        return check_entry(entry)


def check_entry(e: PlannedCommit) -> PlannedCommit:
    """Return ``e`` if it may be executed, else raise :class:`InvalidPlan` (pure; no I/O).

    Checks: the table name is valid (:func:`~lv_core.delta.table.validate_table_name`), the version
    a non-negative int, the mode known (an ``overwrite-marker`` has an etag), and the commit bytes
    a Delta commit (:func:`~lv_core.delta.actions.decode_commit`) with at least one action.
    """
    _table(e.table, "plan entry")
    _version(e.version, f"the version of plan entry {e.table!r}")
    if e.mode not in MODES:
        raise InvalidPlan(f"plan entry {e.table}@{e.version}: mode must be one of {MODES}, not {e.mode!r}")
    if e.mode == OVERWRITE_MARKER and not (isinstance(e.etag, str) and e.etag):
        raise InvalidPlan(f"plan entry {e.table}@{e.version}: overwrite-marker needs the marker's etag")
    if not isinstance(e.data, bytes):
        raise InvalidPlan(f"plan entry {e.table}@{e.version}: the commit must be bytes")
    try:
        actions = decode_commit(e.data, version=e.version, table=e.table)
    except LvError as err:
        raise InvalidPlan(f"plan entry {e.table}@{e.version}: {err}") from None
    if not actions:
        raise InvalidPlan(f"plan entry {e.table}@{e.version}: the commit has no action")
    return e


def check_plan(plan: Sequence[PlannedCommit], additions: Mapping[str, int] | None = None) -> None:
    """Raise :class:`InvalidPlan` unless every entry passes :func:`check_entry`, a table's entries (several
    only in a same-table group: docs/PROTOCOL.md) are at increasing versions in plan order, none blind,
    and every addition maps a valid table name to a non-negative int (pure; no I/O)."""
    last: dict[str, PlannedCommit] = {}
    for e in plan:
        if not isinstance(e, PlannedCommit):
            raise InvalidPlan(f"a plan entry must be a PlannedCommit, not {type(e).__name__}")
        check_entry(e)
        before = last.get(e.table)
        if before is not None and (e.version <= before.version or e.blind or before.blind):
            raise InvalidPlan(f"the plan names table {e.table!r} twice, not at increasing versions of non-blind "
                              "commits")
        last[e.table] = e
    for t, v in (additions or {}).items():
        _version(v, f"the version of addition {_table(t, 'addition')!r}")


def parse_plan(plan: Any, additions: Any = None) -> tuple[tuple[PlannedCommit, ...], dict[str, int]]:
    """Parse and check a recorded plan (the JSON ``plan`` list and ``additions`` object).

    Missing (None) means empty. Returns (entries, additions).

    Raises:
        InvalidPlan: anything malformed (see :func:`check_plan`): such a plan must never be executed.
    """
    if plan is None:
        plan = []
    if additions is None:
        additions = {}
    if not isinstance(plan, list):
        raise InvalidPlan(f"a plan must be a JSON list, not {type(plan).__name__}")
    if not isinstance(additions, Mapping):
        raise InvalidPlan(f"additions must be a JSON object, not {type(additions).__name__}")
    entries = tuple(PlannedCommit.from_json(e) for e in plan)
    adds = dict(additions)
    check_plan(entries, adds)
    return entries, adds


def parse_group(group: Any, plan: Sequence[PlannedCommit]) -> dict[str, dict[str, Any]]:
    """A recorded group (txn -> its tables, each a table of the plan named once, and its validation
    outcome), or InvalidPlan."""
    if group is None:
        return {}
    if not isinstance(group, Mapping):
        raise InvalidPlan(f"group must be a JSON object, not {type(group).__name__}")
    planned: dict[str, list[int]] = {}
    for e in plan:
        planned.setdefault(e.table, []).append(e.version)
    seen: set[tuple[str, int]] = set()
    out: dict[str, dict[str, Any]] = {}
    for m, entry in group.items():
        tables = entry.get("tables") if isinstance(entry, Mapping) else None
        validation = entry.get("validation") if isinstance(entry, Mapping) else None
        at = entry.get("at", {}) if isinstance(entry, Mapping) else None
        if not (isinstance(m, str) and m) or not isinstance(tables, list) or not isinstance(validation, dict) \
                or not isinstance(at, Mapping):
            raise InvalidPlan(f"group entry {m!r} must map a transaction id to its tables and validation")
        for t in tables:
            v = at.get(t) if isinstance(t, str) else None
            versions = planned.get(t) if isinstance(t, str) else None
            if versions is None or (v is None and len(versions) != 1) or (v is not None and v not in versions):
                raise InvalidPlan(f"group entry {m!r} names table {t!r} that the plan does not hold once")
            key = (t, versions[0] if v is None else _version(v, f"group entry {m!r} at {t!r}"))
            if key in seen:
                raise InvalidPlan(f"group entry {m!r} names table {t!r} that the plan does not hold once")
            seen.add(key)
        out[m] = {"tables": tuple(tables), "validation": validation, **({"at": dict(at)} if at else {})}
    return out


@dataclass
class PlanResult:
    """What executing a plan did.

    Attributes:
        committed: every table commit landed and the global version is published.
        versions: table -> Delta version written (a blind append may have moved).
        gvl: the published global version (None when not committed).
        undone: table -> version overwritten with a freed commit by the roll back.
        rule, reason: why the plan broke ("R2": a create lost its version to another writer;
            "timeout": a marker was freed after the owner's lease ran out; :data:`GLOBAL_LOG`: its
            global version holds an object no LakeVilla holder wrote, so every commit was reverted;
            :data:`VOIDED`: a runner before broke or voided it, and reverted what it wrote).
        group: the outcome of each other transaction committed with it (group commit), as published
            in the global version (:attr:`GvlState.group`).
    """

    committed: bool
    versions: dict[str, int] = field(default_factory=dict)
    gvl: GvlState | None = None
    undone: dict[str, int] = field(default_factory=dict)
    rule: str | None = None
    reason: str = ""
    group: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Broken(Exception):
    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


def ordered(plan: Sequence[PlannedCommit]) -> list[PlannedCommit]:
    """The write order: non-blind creates, blind creates, marker overwrites (stable otherwise)."""
    rank = {(CREATE_MODE, False): 0, (CREATE_MODE, True): 1}
    return sorted(plan, key=lambda e: rank.get((e.mode, e.blind), 2))


def _freed(version: int, raw: bytes, etag: str) -> bool:
    """Whether a log version holds the empty commit of a given-up marker."""
    try:
        return classify(version, raw, etag).kind == "freed"
    except LvError:
        return False


#: how far past our commit a second runner looks for its revert: a voided plan reverts a table's entries
#: at the table's tail, after every entry of its lane (same-table group), not right after each one
REVERT_SPAN = 64


def _reverted(store: ObjectStore, txn: str, table: str, version: int) -> int | None:
    """Where our commit at ``version``, found already written (we are a second runner), is reverted by us, or
    None: a runner before broke or voided the plan. A break reverts it right after the commit, a void after the
    last entry written on the table (other members' commits in between), so the versions after it are read
    until the first missing one (at most :data:`REVERT_SPAN`). 1 GET per version read, never on the path of a
    plan's first run."""
    for v in range(version + 1, version + 1 + REVERT_SPAN):
        try:
            actions = decode_commit(store.get(commit_key(table, v)).data)
        except NotFound:
            return None
        except LvError:
            continue
        lv = next((a.payload.get(KEY) for a in actions if isinstance(a, CommitInfo)), None)
        if isinstance(lv, dict) and lv.get("kind") == "revert" and lv.get("txn") == txn and lv.get("of") == version:
            return v
    return None


def _ours(store: ObjectStore, txn: str, e: PlannedCommit, version: int, etag: str) -> tuple[int, str]:
    """Our commit found at ``version``: written by another runner, unless a runner before reverted it (then
    the plan stays broken: without this, a rerun after the cause of a void went away, e.g. a foreign global
    version moved out, would publish commits their revert already undoes)."""
    at = _reverted(store, txn, e.table, version)
    if at is not None:
        raise _Broken(VOIDED, f"the commit plan of transaction {txn} was broken or voided by a run before this one "
                      f"(its commit {e.table}@{version} is reverted at {e.table}@{at}); nothing of it is "
                      "published. Help: retry the transaction.")
    return version, etag


def _write(store: ObjectStore, txn: str, e: PlannedCommit) -> tuple[int, str]:
    """Write one entry (or find it written); returns (version, etag of our bytes)."""
    if e.mode == OVERWRITE_MARKER:
        key = commit_key(e.table, e.version)
        try:
            return e.version, store.put(key, ict.seal(store, e.table, e.version, e.data), mode=CREATE)
        except AlreadyExists:
            try:
                got = store.get(key)
            except NotFound:
                got = None
            if got is not None and ict.same_commit(got.data, e.data):
                return _ours(store, txn, e, e.version, got.etag)
            if got is not None and not _freed(e.version, got.data, got.etag):
                raise _Broken("R2", f"R2 (version taken): version {e.version} of table {e.table!r}, reserved by "
                              "the transaction's marker, was taken by a writer that ignores markers. Help: retry "
                              "the transaction.") from None
            raise _Broken("timeout", f"the marker of table {e.table!r} at version {e.version} was freed before "
                          "the commit landed (the lease ran out). Help: retry the transaction.") from None
    v = e.version
    while True:
        key = commit_key(e.table, v)
        try:
            return v, store.put(key, ict.seal(store, e.table, v, e.data), mode=CREATE)
        except AlreadyExists:
            got = store.get(key)
            if ict.same_commit(got.data, e.data):
                return _ours(store, txn, e, v, got.etag)
            if not e.blind:
                raise _Broken("R2", f"R2 (version taken): version {v} of table {e.table!r} was taken by another "
                              "writer after validation. Help: retry the transaction.") from None
            v += 1


def revert_actions(data: bytes, txn: str, version: int) -> list[Action]:
    """The actions undoing the commit ``data`` (pure, deterministic): each file it added is removed,
    each file it removed is added back (from the remove's extended metadata)."""
    out: list[Action] = []
    actions = decode_commit(data)
    ts = next((int(a.payload.get("timestamp", 0)) for a in actions if isinstance(a, CommitInfo)), 0)
    for a in actions:
        if isinstance(a, AddFile):
            out.append(a.remove(ts, data_change=a.data_change))
        elif isinstance(a, RemoveFile):
            out.append(AddFile(path=a.path, partition_values=dict(a.partition_values or {}), size=a.size or 0,
                               modification_time=ts, data_change=a.data_change, stats=a.stats,
                               tags=None if a.tags is None else dict(a.tags), extra=dict(a.extra),
                               raw_path=a.raw_path))
    out.append(CommitInfo({"timestamp": ts, "operation": "LAKEVILLA REVERT", "operationParameters": {},
                           "engineInfo": "lakevilla-jupyter", KEY: {"kind": "revert", "txn": txn, "of": version}}))
    return out


def _undo(store: ObjectStore, txn: str, written: list[tuple[PlannedCommit, int, str]]) -> dict[str, int]:
    """Append a revert commit after every version written (idempotent: both runners write the same
    bytes and walk the same versions). Returns table -> version of the revert."""
    undone: dict[str, int] = {}
    for e, v, _etag in reversed(written):
        actions = revert_actions(e.data, txn, v)
        if ict.unsealed(e.data) or ict.stamped(e.data) is not None:  # in-commit timestamps: commitInfo first
            info = next(a for a in actions if isinstance(a, CommitInfo))
            data = ict.commit_info_first([a for a in actions if a is not info], dict(info.payload), True)
        else:
            data = encode_commit(actions)
        undone[e.table] = append_at_tail(store, e.table, v + 1, data)
    return undone


def build_plan(outcome: ValidationOutcome, commits: Mapping[str, bytes],
               markers: Mapping[str, tuple[int, str]] | None = None) -> list[PlannedCommit]:
    """The plan of a compatible validation (pure).

    ``commits`` holds the exact commit bytes of every written table; ``markers`` the (version,
    etag) of the transaction's marker per table, if any. A table whose marker is at the validated
    write version is an ``overwrite-marker``; every other written table is a ``create`` at the
    validated version (blind appends may move on at write time). A blind append that moved away
    from its marker (``verdict.moved_from``) leaves that marker to the caller, who must free it
    after the commit (and must not name it in an LV[R] commit decision).

    Raises:
        ValueError: the outcome is incompatible, or a written table has no commit bytes.
    """
    if not outcome.compatible:
        raise ValueError(f"an incompatible validation ({outcome.rule}) has no plan")
    plan: list[PlannedCommit] = []
    for table, w in outcome.write_versions().items():
        if table not in commits:
            raise ValueError(f"no commit bytes for written table {table!r}")
        verdict = outcome.tables[table]
        marker = (markers or {}).get(table)
        if marker is not None and marker[0] == w:
            plan.append(PlannedCommit(table, w, commits[table], OVERWRITE_MARKER, marker[1], verdict.blind))
        else:
            plan.append(PlannedCommit(table, w, commits[table], CREATE_MODE, None, verdict.blind))
    return plan


def _run(store: ObjectStore, txn: str, entries: Sequence[PlannedCommit]) -> PlanResult:
    """Write one transaction's entries: creates one after another in :func:`ordered` order (a lost
    create race, the only likely break, then happens before anything else is written), then the marker
    overwrites in parallel (they break only when a marker was freed after its owner's lease ran out). A
    break rolls this transaction's own writes back."""
    written: list[tuple[PlannedCommit, int, str]] = []

    def landed(e: PlannedCommit, v: int, etag: str) -> None:
        written.append((e, v, etag))
        if len(written) == 1 and len(entries) > 1:
            crashpoint("between-table-writes")

    def attempt(e: PlannedCommit) -> tuple[int, str] | _Broken:
        try:
            return _write(store, txn, e)
        except _Broken as b:
            return b

    todo = ordered(entries)
    creates = [e for e in todo if e.mode != OVERWRITE_MARKER]
    markers = [e for e in todo if e.mode == OVERWRITE_MARKER]
    try:
        for e in creates:
            landed(e, *_write(store, txn, e))
        got = concurrency.gather(concurrency.Pool.REQUESTS, attempt, markers) if len(markers) > 1 else None
        broken: _Broken | None = None
        for i, e in enumerate(markers):
            r = got[i] if got is not None else attempt(e)
            if isinstance(r, _Broken):
                broken = broken or r
            else:
                landed(e, *r)
        if broken is not None:
            raise broken
    except _Broken as b:
        undone = _undo(store, txn, written)
        return PlanResult(False, {e.table: v for e, v, _ in written}, None, undone, b.rule, b.reason)
    return PlanResult(True, {e.table: v for e, v, _ in written})


def execute_plan(
    store: ObjectStore,
    glog: GlobalLog,
    plan: Sequence[PlannedCommit],
    *,
    txn: str,
    gvl_base: int,
    additions: Mapping[str, int] | None = None,
    base: GvlState | None = None,
    group: Mapping[str, Mapping[str, Any]] | None = None,
) -> PlanResult:
    """Write every planned table commit not yet present, then publish global version ``gvl_base + 1``.

    ``additions`` are read-only tables the log did not know (added at the given version). ``base``
    is ``glog.at(gvl_base)`` when the caller has it (saves a GET). ``group`` (group commit): other
    transactions -> ``{"tables": [...], "validation": {...}}`` (the tables of theirs the plan commits);
    each transaction's entries are written (transactions in parallel) and rolled back on a break
    independently of the others', and the global version names each one's outcome. Nothing is
    published when nothing is to be. Idempotent and safe to run concurrently with another runner of
    the same plan. Cost when nothing was written before: 1 PUT-create per table (a transaction's creates
    one after another, its marker overwrites in parallel), then 1 PUT-create + 1 PUT (hint) for the
    publish; every table commit already written by another runner costs 2 GETs more (ours? reverted?), a
    publish already done 1 GET.

    An object at ``gvl_base + 1`` that no LakeVilla holder wrote (:class:`ForeignGlobalVersion`: bad
    input by another client) voids the plan: every transaction's written entries are reverted, as for a
    break, and the result names rule :data:`GLOBAL_LOG` (no request more on the normal path: the object is
    found by the publish's put-if-absent).

    Raises:
        GlobalLogConflict: ``gvl_base + 1`` was published by another transaction (mutual exclusion broken).
        StorageError: a request failed; the state is unknown but running the plan again is safe.
    """
    parts = _parts(plan, group or {}, txn)
    lanes = _lanes(parts)
    if len(lanes) > 1:
        # each lane's writes on TASKS (its marker overwrites are requests it waits on)
        results = {m: r for got in concurrency.gather(concurrency.Pool.TASKS, lambda ln: _lane(store, ln, parts), lanes)
                   for m, r in got.items()}
    else:
        results = _lane(store, lanes[0], parts)
    own = results[txn]
    outcome = {m: {**({"versions": r.versions} if r.committed else {"rule": r.rule, "reason": r.reason}),
                   "validation": dict((group or {}).get(m, {}).get("validation") or {})}
               for m, r in results.items() if m != txn}
    if not own.committed and not outcome:
        return own
    versions: dict[str, int] = {}
    for r in results.values():
        for t, v in (r.versions if r.committed else {}).items():
            versions[t] = max(v, versions.get(t, v))
    updates = {**dict(additions or {}), **versions}
    if base is None or base.version != gvl_base:
        base = glog.at(gvl_base)
    if not updates and not outcome:
        return PlanResult(True, own.versions, base)
    try:
        published = glog.publish(base, updates, txn, group=outcome)
    except ForeignGlobalVersion as e:
        return _void(store, txn, parts, results, e)
    crashpoint("gvl-published")
    if not own.committed:
        return dataclasses.replace(own, group=outcome)
    return PlanResult(True, own.versions, published, group=outcome)


def _parts(plan: Sequence[PlannedCommit], group: Mapping[str, Mapping[str, Any]],
           txn: str) -> dict[str, list[PlannedCommit]]:
    """Each transaction's entries (the holder ``txn``'s first; a member's by its tables, or by table and
    version where its group entry says ``at``: a same-table group)."""
    at = {(t, int(v)): m for m, g in group.items() for t, v in dict(g.get("at") or {}).items()}
    owner = {t: m for m, g in group.items() for t in g["tables"] if t not in dict(g.get("at") or {})}
    parts: dict[str, list[PlannedCommit]] = {txn: []}
    for e in plan:
        parts.setdefault(at.get((e.table, e.version)) or owner.get(e.table, txn), []).append(e)
    return parts


def _lanes(parts: Mapping[str, Sequence[PlannedCommit]]) -> list[list[str]]:
    """The transactions grouped by shared tables, each lane in plan order (the holder's first): a lane's
    transactions are written one after another, lanes in parallel."""
    lanes: list[tuple[set[str], list[str]]] = []
    for m, entries in parts.items():
        tables = {e.table for e in entries}
        joined = [ln for ln in lanes if ln[0] & tables]
        merged = (tables.union(*(ln[0] for ln in joined)), [x for ln in joined for x in ln[1]] + [m])
        lanes = [ln for ln in lanes if ln not in joined] + [merged]
    order = list(parts)
    return [sorted(ln[1], key=order.index) for ln in lanes]


def _lane(store: ObjectStore, lane: Sequence[str],
          parts: Mapping[str, Sequence[PlannedCommit]]) -> dict[str, PlanResult]:
    """Write a lane's transactions in order. A same-table member is certified against the entries before it
    on its table: once one of those did not land, it is not written either (broken, rule R2), so the log
    never holds a member's commit after anything but what it was certified against, and never a gap (each
    version is written after the one below it)."""
    broken: dict[str, str] = {}  # table -> the transaction whose entry there did not land
    out: dict[str, PlanResult] = {}
    for m in lane:
        entries = parts[m]
        hit = sorted(e.table for e in entries if e.table in broken)
        if hit:
            out[m] = PlanResult(False, rule="R2", reason=(
                f"R2 (version taken): the commit of transaction {broken[hit[0]]} on table {hit[0]!r}, which this "
                "one was validated after in the same global version, did not land. Help: retry the transaction."))
        else:
            out[m] = _run(store, m, entries)
        if not out[m].committed:
            broken.update({e.table: m for e in entries if e.table not in broken})
    return out


def _void(store: ObjectStore, txn: str, parts: Mapping[str, Sequence[PlannedCommit]],
          results: Mapping[str, PlanResult], foreign: ForeignGlobalVersion) -> PlanResult:
    """A plan whose global version holds a foreign object: revert every transaction's written entries
    (a broken one's are already reverted; deterministic bytes, so a second runner writes the same) and
    say so. A holder of the key wrote nothing there, so mutual exclusion holds: the plan's versions
    stay in the log (each with its revert after it, a same-table lane's after the lane, newest first) and nothing
    is published."""
    undone: dict[str, int] = {}
    for m, r in reversed(list(results.items())):  # (newest first: a lane's members after their holder)
        if r.committed:
            written = [(e, r.versions[e.table], "") for e in parts[m] if e.table in r.versions]
            undone.update(_undo(store, m, written))
        else:
            undone.update(r.undone)
    own = results[txn]
    reverted = ", ".join(f"{t}@{own.versions[t]} reverted at {t}@{u}" for t, u in sorted(undone.items())
                         if t in own.versions)
    reason = (f"{foreign}. Nothing of transaction {txn} was published"
              + (f"; its table commits were reverted ({reverted})" if reverted else "")
              + (f" (its own plan broke first: {own.reason})" if not own.committed else "")
              + ". Help: another client put that object into the global version log, where LakeVilla cannot "
              f"publish past it: {move_out(foreign.key)}.")
    return PlanResult(False, dict(own.versions), None, undone, GLOBAL_LOG, reason)


__all__ = ["CREATE_MODE", "GLOBAL_LOG", "OVERWRITE_MARKER", "VOIDED", "InvalidPlan", "PlanResult", "PlannedCommit",
           "build_plan", "check_entry", "check_plan", "execute_plan", "ordered", "parse_group", "parse_plan"]
