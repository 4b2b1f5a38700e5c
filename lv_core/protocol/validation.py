"""Module #4.2: validation rules R1-R3 (LV[I]). Pure functions: no I/O.

Per table, with ``r`` = read version, ``h`` = hidden version (highest committed version seen at
validation), ``w`` = write version, ``l`` = log version (the global log's version of the table at
validation) and ``written_logs`` = number of pending or committed logs ``v`` with ``l < v < w``,
a transaction is incompatible when

- **R1** (reads, outdated data): ``r < h - slack``
- **R2** (writes, version taken): ``w <= h``
- **R3** (writes, lost update): ``l + written_logs + 1 != w``

:class:`Policy` says which rules apply (``serializable``: all three; ``snapshot``: R2 + R3;
``write_serializable``: read-only transactions skip R1). With ``Policy.r1_files`` (``serializable``,
``write_serializable``) R1 counts only the versions in ``(r, h]`` that changed what the transaction
read (:attr:`TableInputs.changes`, gathered by :mod:`lv_core.protocol.hidden`): more than ``slack``
of them fail it. A table the log does not know yet is
always compatible (it is added to the log). A blind append (written, not read) that fails R2 or R3
takes the next free version instead (``TableVerdict.moved_from`` tells it moved).

:func:`derive` turns what the probe of a table's log found (:class:`LogTail`, gathered by
:mod:`lv_core.protocol.hidden`) into the rule inputs (:class:`TableInputs`); :func:`validate`
applies the rules and returns the outcome as data (for widgets), which can become a
:class:`~lv_core.errors.TransactionAborted` naming the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, TypedDict

from lv_core.errors import ConfigError, TransactionAborted

RULES: tuple[str, ...] = ("R1", "R2", "R3")


# ---------------------------------------------------------------------------------------- rules
def r1_outdated_read(r: int, h: int, slack: int = 0) -> bool:
    """R1 fires: the read version ``r`` is more than ``slack`` versions behind the hidden version ``h``."""
    return r < h - slack


def r2_version_taken(w: int, h: int) -> bool:
    """R2 fires: the write version ``w`` is not newer than the hidden version ``h`` (already taken)."""
    return w <= h


def r3_lost_update(l: int, written_logs: int, w: int) -> bool:  # the paper's name
    """R3 fires: the logs between the log version ``l`` and ``w`` do not account for ``w``."""
    return l + written_logs + 1 != w


# ---------------------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class Policy:
    """Which rules apply.

    Attributes:
        check_r1: R1 applies at all (False in snapshot isolation).
        r1_read_only: R1 applies to read-only transactions too (False in write_serializable).
        slack: how many committed versions a read may lag behind (R1); with ``r1_files``: how many
            newer commits that changed what it read.
        r1_files: R1 at the granularity the transaction read (files and predicates): a newer
            version fails it only if it changed what was read (:attr:`TableInputs.changes`).
        snapshot_read_only: a read-only transaction whose every table was read at the one global
            version it started at passes without R1 (decided by the caller, which knows the reads).
    """

    check_r1: bool = True
    r1_read_only: bool = True
    slack: int = 0
    r1_files: bool = False
    snapshot_read_only: bool = False

    @classmethod
    def for_preset(cls, preset: str, slack: int | None = None) -> "Policy":
        """The policy of an isolation preset; ``slack`` (transaction level) overrides the preset's.

        Raises:
            ConfigError: unknown preset or negative slack.
        """
        from lv_core.presets import PRESETS

        p = PRESETS.get(preset.strip().lower())
        if p is None:
            raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        s = p.slack if slack is None else slack
        if s < 0:
            raise ConfigError(f"slack must be >= 0, not {s}")
        return cls(check_r1=p.check_r1, r1_read_only=p.r1_read_only, slack=s, r1_files=p.r1_files,
                   snapshot_read_only=p.snapshot_read_only)

    def r1_applies(self, txn_writes: bool) -> bool:
        return self.check_r1 and (txn_writes or self.r1_read_only)


SERIALIZABLE = Policy(r1_files=True, snapshot_read_only=True)
SNAPSHOT = Policy(check_r1=False)
WRITE_SERIALIZABLE = Policy(r1_read_only=False, r1_files=True)


@dataclass(frozen=True)
class Change:
    """A newer version of a table that changed what the transaction read there (file-level R1).

    ``txn`` is the LakeVilla transaction that wrote it (None: a writer outside LakeVilla), ``why``
    says what it changed, ``files`` the data files concerned; ``why`` is "pending" for a version
    whose content is not known yet (a marker of a running transaction): it counts as a change."""

    version: int
    txn: str | None
    why: str
    files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "txn": self.txn, "why": self.why, "files": list(self.files)}


# ---------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class TableAccess:
    """What the transaction knows about one table it touched (input of the probe).

    Attributes:
        table: table name.
        read: the transaction read it.
        written: the transaction writes it.
        read_version: ``r``; with a marker defaults to ``marker - 1`` (reads redone on it).
            Without a marker it is required: the global log's version at the first read, or the
            version deduced from the table's own log for a table the log did not know.
        marker: version of the transaction's marker (LV[R]), or None (written without marker).
        blind: a blind append; None = ``written and not read``. Ignored when ``read``.
        hint: a version known to exist, to start probing from for a table the log does not know
            when ``read_version`` is None.
    """

    table: str
    read: bool = False
    written: bool = False
    read_version: int | None = None
    marker: int | None = None
    blind: bool | None = None
    hint: int | None = None

    @property
    def is_blind(self) -> bool:
        if self.read or not self.written:
            return False
        return True if self.blind is None else self.blind

    @property
    def r(self) -> int | None:
        if self.read_version is not None:
            return self.read_version
        return self.marker - 1 if self.marker is not None else None


@dataclass(frozen=True)
class OneSnapshotRead(TableAccess):
    """A table of a read-only transaction read at one global version, which is ordered before every
    global version above it. ``ordered_before`` is the version of the head it is validated against: a
    commit whose ``lakevilla.gvl`` names a global version above it (a plan's table commit written
    before that version was published) does not count for file-level R1
    (:func:`lv_core.protocol.hidden.changes_since`; docs/PROTOCOL.md, "Special cases"). Never queued
    (a request carries plain :class:`TableAccess` fields only)."""

    ordered_before: int | None = None


@dataclass(frozen=True)
class LogTail:
    """What probing a table's log found: every existing version above ``start`` (contiguous).

    Attributes:
        start: the version probing started after (known to exist, or -1).
        kinds: the kind of each version ``start + 1 .. top``: "commit" (a real commit, foreign or
            LakeVilla), "marker" (pending), "freed", or "own" (the transaction's own marker).
    """

    start: int
    kinds: tuple[str, ...] = ()

    @property
    def top(self) -> int:
        """The highest existing version."""
        return self.start + len(self.kinds)

    def versions(self, kind: str) -> tuple[int, ...]:
        return tuple(self.start + 1 + i for i, k in enumerate(self.kinds) if k == kind)

    def highest_commit(self, default: int) -> int:
        commits = self.versions("commit")
        return max(default, commits[-1]) if commits else default


@dataclass(frozen=True)
class TableInputs:
    """The rule inputs of one table.

    ``h`` is None when it was not measured (no rule needed it); ``l`` is None for a table the
    global log does not know (always compatible). ``top`` is the highest existing version seen
    (a blind append moves to ``top + 1``). ``foreign`` lists real commits above ``l`` the log does
    not know (plain Delta writers, LV[R]-only transactions); ``pending`` lists pending markers of
    other transactions above the probe start (their content is not known yet).
    """

    table: str
    read: bool
    written: bool
    blind: bool
    r: int | None
    h: int | None
    w: int | None
    l: int | None
    written_logs: int
    top: int | None = None
    marker: int | None = None
    foreign: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    changes: tuple[Change, ...] | None = None  # versions in (r, h] that changed what was read (None: not examined)


def derive(access: TableAccess, l: int | None, tail: LogTail | None) -> TableInputs:
    """Compute ``r, h, w, written_logs`` of one table from the log version and the probe result.

    With a marker: ``w`` = the marker, ``r`` = ``w - 1`` unless given, every version below ``w`` is
    resolved and counted (``written_logs = w - l - 1``), ``h = max(w - 1, l, commits above w)``.
    Without a marker: the tail starts at ``l`` (or at ``r`` for a table the log does not know);
    ``h`` = the highest real commit in the tail, else its start. A write plans ``w = r + 1``; if the
    log has not moved past ``r`` (``l <= r``) the writer moves past versions unknown to the log to
    ``w = top + 1`` and counts them (``written_logs = top - l``); if it has (``l > r``), ``w`` stays
    ``r + 1`` and R2/R3 decide. ``tail`` may be None when no rule needs ``h`` (``h`` is then None).

    Raises:
        ValueError: inconsistent inputs (no read version where one is needed, a tail that does
            not start where the rules need it).
    """
    r = access.r
    blind = access.is_blind
    if access.read and r is None:
        raise ValueError(f"table {access.table!r} was read but has no read version")
    if tail is None:
        if access.written:
            raise ValueError(f"table {access.table!r} is written: its log tail is needed")
        return TableInputs(access.table, access.read, False, False, r, None, None, l, 0, marker=access.marker)

    foreign = tuple(v for v in tail.versions("commit") if l is None or v > l)
    pending = tail.versions("marker")
    if access.marker is not None:
        w: int | None = access.marker
        assert w is not None
        if tail.start < w - 1:
            raise ValueError(f"table {access.table!r}: the tail must start at or after the marker's predecessor")
        h = tail.highest_commit(max(w - 1, l if l is not None else -1))
        written_logs = max(0, w - l - 1) if l is not None else 0
        if r is None:
            r = w - 1
        return TableInputs(access.table, access.read, access.written, blind, r, h, w if access.written else None,
                           l, written_logs if access.written else 0, tail.top, w, foreign, pending)

    base = l if l is not None else r
    if base is None:
        base = tail.start
    if tail.start != base:
        raise ValueError(f"table {access.table!r}: the tail must start at the log version {base}, not {tail.start}")
    h = tail.highest_commit(base)
    if not access.written:
        return TableInputs(access.table, access.read, False, False, r, h, None, l, 0, tail.top, None, foreign, pending)
    start_r = r if r is not None else base
    if l is None or l <= start_r:
        w = tail.top + 1
        written_logs = tail.top - l if l is not None else 0
    else:
        w = start_r + 1
        written_logs = 0  # no version between l and w: w <= l
    return TableInputs(access.table, access.read, True, blind, start_r, h, w, l, written_logs, tail.top, None,
                       foreign, pending)


# ---------------------------------------------------------------------------------------- outcome
@dataclass(frozen=True)
class RuleCheck:
    """One rule on one table: whether it applies, whether it passed, and the comparison made."""

    applies: bool
    passed: bool = True
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"applies": self.applies, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class TableVerdict:
    """The rule outcome of one table (``w``/``written_logs`` after a blind move, if any)."""

    table: str
    r: int | None
    h: int | None
    w: int | None
    l: int | None
    written_logs: int
    rules: Mapping[str, RuleCheck]
    read: bool = False
    written: bool = False
    blind: bool = False
    new_table: bool = False
    moved_from: int | None = None  # a blind append moved from this write version to ``w``
    foreign: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    changes: tuple[Change, ...] | None = None

    @property
    def compatible(self) -> bool:
        return all(c.passed for c in self.rules.values())

    @property
    def failed_rule(self) -> str | None:
        """The rule that names a failure: R1, then R3, then R2. When R2 and R3 both fire, the global log
        moved past what the transaction read (another validated commit): a lost update, the more
        specific diagnosis; R2 alone means a writer outside the log took the version."""
        return next((name for name in ("R1", "R3", "R2") if not self.rules[name].passed), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "r": self.r, "h": self.h, "w": self.w, "l": self.l, "written_logs": self.written_logs,
            "read": self.read, "written": self.written, "blind": self.blind, "new_table": self.new_table,
            "moved_from": self.moved_from, "foreign": list(self.foreign), "pending": list(self.pending),
            "changes": None if self.changes is None else [c.to_json() for c in self.changes],
            "rules": {name: c.to_json() for name, c in self.rules.items()},
        }


@dataclass(frozen=True)
class ValidationOutcome:
    """The whole transaction's validation: per-table verdicts and the first failed rule."""

    tables: Mapping[str, TableVerdict]
    policy: Policy = SERIALIZABLE
    rule: str | None = None  # first failed rule (None when compatible)
    table: str | None = None  # the table it failed on
    reason: str = ""  # one sentence for humans

    @property
    def compatible(self) -> bool:
        return self.rule is None

    def write_versions(self) -> dict[str, int]:
        """table -> version to write (after blind moves), for written tables."""
        return {t: v.w for t, v in self.tables.items() if v.written and v.w is not None}

    def additions(self) -> dict[str, int]:
        """Read-only tables to name at their ``r``: those the global log does not know yet, and those read past
        the version it names (a marker table a redo left unwritten, read at ``marker - 1``: the commits
        outside the log it saw there are caught up before the transaction, docs/PROTOCOL.md "Special cases")."""
        return {t: v.r for t, v in self.tables.items() if not v.written and v.r is not None
                and (v.new_table or (v.l is not None and v.r > v.l))}

    def to_json(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible, "rule": self.rule, "table": self.table, "reason": self.reason,
            "slack": self.policy.slack, "tables": {t: v.to_json() for t, v in self.tables.items()},
        }

    def to_abort(self) -> TransactionAborted:
        """The :class:`TransactionAborted` to raise for an incompatible outcome (``.rule`` = "R1"/"R2"/"R3").

        Raises:
            ValueError: the outcome is compatible.
        """
        if self.rule is None:
            raise ValueError("a compatible validation has nothing to abort")
        return TransactionAborted(self.reason, self.rule, details={"validation": self.to_json()})


def _check(inp: TableInputs, policy: Policy, txn_writes: bool) -> dict[str, RuleCheck]:
    rules: dict[str, RuleCheck] = {}
    if inp.read and inp.h is not None and inp.r is not None and policy.r1_applies(txn_writes):
        fired = r1_outdated_read(inp.r, inp.h, policy.slack)
        op = "<" if fired else ">="
        detail = f"r={inp.r} {op} h-slack={inp.h - policy.slack}"
        if fired and policy.r1_files and inp.changes is not None:
            fired = len(inp.changes) > policy.slack
            what = ", ".join(f"{c.version}" for c in inp.changes) or "none"
            detail = (f"r={inp.r} < h={inp.h}; versions that changed what it read: {what} "
                      f"({len(inp.changes)} {'>' if fired else '<='} slack={policy.slack})")
        rules["R1"] = RuleCheck(True, not fired, detail)
    else:
        ro = "read-only transaction at one global version" if policy.snapshot_read_only else "read-only transaction"
        why = ("not read" if not inp.read else "snapshot isolation" if not policy.check_r1
               else ro if not policy.r1_applies(txn_writes) else "not measured")
        rules["R1"] = RuleCheck(False, True, why)
    if inp.written and inp.w is not None and inp.h is not None and inp.l is not None:
        fired = r2_version_taken(inp.w, inp.h)
        rules["R2"] = RuleCheck(True, not fired, f"w={inp.w} {'<=' if fired else '>'} h={inp.h}")
        fired = r3_lost_update(inp.l, inp.written_logs, inp.w)
        expect = inp.l + inp.written_logs + 1
        rules["R3"] = RuleCheck(True, not fired,
                                f"l+written_logs+1={inp.l}+{inp.written_logs}+1={expect} "
                                f"{'!=' if fired else '=='} w={inp.w}")
    else:
        rules["R2"] = rules["R3"] = RuleCheck(False, True, "not written")
    return rules


def _sentence(rule: str, v: TableVerdict, policy: Policy) -> str:
    t = v.table
    if rule == "R1" and v.changes:
        c = v.changes[0]
        by = f"transaction {c.txn}" if c.txn else "a writer outside LakeVilla"
        what = ("is held by a running transaction whose changes are not known yet" if c.why == "pending"
                else f"was committed by {by} and {c.why}")
        files = f" ({', '.join(c.files[:3])}{', ...' if len(c.files) > 3 else ''})" if c.files else ""
        more = f"; {len(v.changes)} newer version(s) changed it, more than the slack of {policy.slack}" \
            if policy.slack else ""
        return (f"R1 (outdated read): table {t!r} was read at version {v.r}; version {c.version} {what}{files}{more}. "
                "Help: retry the transaction to read current data.")
    if rule == "R1":
        return (f"R1 (outdated read): table {t!r} was read at version {v.r}, but version {v.h} is committed, "
                f"more than the allowed slack of {policy.slack} version(s) newer. Help: retry the transaction "
                "to read current data, or allow older reads with a larger `slack`.")
    if rule == "R2":
        return (f"R2 (version taken): version {v.w} of table {t!r}, which this transaction would write, is "
                f"already taken by a commit (hidden version {v.h}). Help: retry the transaction.")
    return (f"R3 (lost update): table {t!r} changed since this transaction read it: the global log is at "
            f"version {v.l} and {v.written_logs} other log(s) precede the write version {v.w}, so it would "
            f"overwrite changes it never saw (expected version {(v.l or 0) + v.written_logs + 1}). "
            "Help: retry the transaction.")


class _VerdictFlags(TypedDict):
    """The :class:`TableVerdict` fields copied from a table's :class:`TableInputs` unchanged."""

    read: bool
    written: bool
    blind: bool
    foreign: tuple[int, ...]
    pending: tuple[int, ...]
    changes: tuple[Change, ...] | None


def validate(inputs: Iterable[TableInputs], policy: Policy = SERIALIZABLE) -> ValidationOutcome:
    """Apply R1-R3 to every table (a table the log does not know is always compatible).

    A blind append failing R2 or R3 moves to ``top + 1`` (the next free version) and is
    re-checked. The first failed rule, in input order of tables and R1, R3, R2 order within a
    table (see :attr:`TableVerdict.failed_rule`), names the outcome.
    """
    items = list(inputs)
    txn_writes = any(i.written for i in items)
    verdicts: dict[str, TableVerdict] = {}
    first: tuple[str, TableVerdict] | None = None
    for inp in items:
        common = _VerdictFlags(read=inp.read, written=inp.written, blind=inp.blind, foreign=inp.foreign,
                               pending=inp.pending, changes=inp.changes)
        if inp.l is None:
            what = f"added at version {inp.w if inp.written else inp.r}"
            rules = {n: RuleCheck(False, True, f"table not in the global log yet: {what} (always compatible)")
                     for n in RULES}
            v = TableVerdict(inp.table, inp.r, inp.h, inp.w, None, inp.written_logs, rules, new_table=True, **common)
        else:
            rules = _check(inp, policy, txn_writes)
            v = TableVerdict(inp.table, inp.r, inp.h, inp.w, inp.l, inp.written_logs, rules, **common)
            if inp.blind and inp.top is not None and not (rules["R2"].passed and rules["R3"].passed):
                moved = TableInputs(inp.table, inp.read, inp.written, True, inp.r, inp.h, inp.top + 1, inp.l,
                                    inp.top - inp.l, inp.top, inp.marker, inp.foreign, inp.pending, inp.changes)
                v = TableVerdict(inp.table, inp.r, inp.h, moved.w, inp.l, moved.written_logs,
                                 _check(moved, policy, txn_writes), moved_from=inp.w, **common)
        verdicts[inp.table] = v
        if first is None and not v.compatible:
            first = (v.failed_rule or "R1", v)
    if first is None:
        return ValidationOutcome(verdicts, policy)
    rule, v = first
    return ValidationOutcome(verdicts, policy, rule, v.table, _sentence(rule, v, policy))


__all__ = [
    "RULES",
    "SERIALIZABLE",
    "SNAPSHOT",
    "WRITE_SERIALIZABLE",
    "Change",
    "LogTail",
    "Policy",
    "RuleCheck",
    "TableAccess",
    "TableInputs",
    "TableVerdict",
    "ValidationOutcome",
    "derive",
    "r1_outdated_read",
    "r2_version_taken",
    "r3_lost_update",
    "validate",
]
