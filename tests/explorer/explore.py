"""The two search modes over schedules of a :class:`~tests.explorer.run.Scenario`.

Exhaustive (:func:`explore`): a stateless depth-first search over the choice points (which pending
request the store answers next; for pausable actors also when to pause them past their lease),
re-running the scenario from scratch for every schedule and replaying the chosen prefix. Reduced
soundly by sleep sets (two requests of different actors on different objects, or both reads, commute:
of the orders of commuting requests only one is run) and bounded by:

- ``preemptions``: how often a schedule may switch away from an actor that could still move
  (context bounding, as in CHESS; None = unbounded);
- ``depth``: choice points after this many steps are not branched on (the run still finishes);
- ``max_schedules``: the number of schedules run;
- ``within``: whether the order of one actor's concurrent requests (its pool threads') is explored;
  if not, at each choice point only each actor's first-arrived request is an alternative;
- poll loops: an actor's second identical re-read in a row is deferred until nobody else can move
  (:meth:`~tests.explorer.gate.Scheduler._is_stutter`); the first re-read is explored everywhere.

Random (:func:`random_runs`): per seed, random actor priorities (PCT-style: the highest-priority
actor that can move goes; at random steps the running actor drops to the lowest priority), and at
each request a chance to lose its response or to crash its client.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from tests.explorer.gate import Request, Scheduler
from tests.explorer.memstore import MemStore
from tests.explorer.run import Kind, RunResult, Scenario, Step, run_schedule

__all__ = ["Exploration", "explore", "random_runs"]


@dataclass
class _Node:
    """One choice point of the current schedule."""

    enabled: dict[tuple[str, str, str, int], Request]
    chosen: Step
    last: str  # the actor that moved before
    preemptions: int  # preemptions before this choice
    sleep: set[tuple[str, str, str, int]]
    done: set[Step] = field(default_factory=set)
    can_pause: tuple[str, ...] = ()
    bounded: bool = False


@dataclass
class Exploration:
    """What a search did: schedules run, the first violating one, time."""

    schedules: int = 0
    pruned: int = 0
    diverged: int = 0
    complete: bool = False  # every schedule within the bounds was run
    violations: list[RunResult] = field(default_factory=list)
    first_violation_at: int | None = None  # 1-based schedule number
    elapsed: float = 0.0
    steps_max: int = 0
    random: bool = False  # random mode: one schedule per seed (nothing to exhaust)

    def _how(self) -> str:
        if self.complete:
            return "ran every seed" if self.random else "exhausted the bounds"
        return "stopped: " + ("first violation" if self.violations and self.first_violation_at == self.schedules
                              else "schedule budget")

    def summary(self) -> str:
        first = (f"first violation at schedule {self.first_violation_at}: {self.violations[0].report.summary()}"
                 if self.violations and self.violations[0].report is not None else "no violation")
        return (f"{self.schedules} schedules ({self.pruned} pruned by sleep sets, {self.diverged} diverged), "
                f"{self._how()}, "
                f"longest {self.steps_max} steps, {self.elapsed:.1f} s; {first}")


def _preempts(node_last: str, enabled: dict[tuple[str, str, str, int], Request], actor: str) -> bool:
    return bool(node_last) and actor != node_last and any(r.actor == node_last for r in enabled.values())


class _Dfs:
    """The policy of one run of the depth-first search (keeps the node stack across runs)."""

    def __init__(self, scenario: Scenario, preemptions: int | None, depth: int, within: bool) -> None:
        self.scenario = scenario
        self.within = within
        self.bound = preemptions
        self.depth = depth
        self.nodes: list[_Node] = []
        self.prefix = 0  # nodes[:prefix] are replayed in the next run
        self.paused: set[str] = set()

    def replay(self, step: int) -> Step | None:
        if step < self.prefix:
            chosen = self.nodes[step].chosen
            if chosen.kind is Kind.PAUSE:
                self.paused.add(chosen.ident[0])
            return chosen
        return None

    def _allowed(self, node: _Node, step: Step) -> bool:
        if step in node.done or step == node.chosen:
            return False
        if step.kind is Kind.PAUSE:
            return True
        if step.ident in node.sleep:
            return False
        extra = _preempts(node.last, node.enabled, step.ident[0])
        return self.bound is None or node.preemptions + extra <= self.bound

    def choose(self, step: int, enabled: list[Request], sched: Scheduler, last: str) -> Step | None:
        by_ident = {r.ident: r for r in enabled}
        if step == 0:
            sleep: set[tuple[str, str, str, int]] = set()
            pre = 0
        else:
            parent = self.nodes[step - 1]
            pre = parent.preemptions + (_preempts(parent.last, parent.enabled, parent.chosen.ident[0])
                                        if parent.chosen.kind is Kind.RUN else 0)
            sleep = set()
            if parent.chosen.kind is Kind.RUN:
                moved = parent.enabled[parent.chosen.ident]
                asleep = parent.sleep | {s.ident for s in parent.done if s.kind is Kind.RUN}
                sleep = {i for i in asleep if i in parent.enabled and i in by_ident
                         and not parent.enabled[i].conflicts(moved)}
        can_pause = tuple(a for a in sorted(self.scenario.pausable - self.paused)
                          if any(r.actor == a for r in enabled))
        awake = [r for r in enabled if r.ident not in sleep]
        if not awake:
            return None  # every order from here was run already (sleep-set blocked)
        same = [r for r in awake if r.actor == last]
        pick = (same or sorted(awake, key=lambda r: (r.actor, r.seq)))[0]
        node = _Node(by_ident, Step(Kind.RUN, pick.ident), last, pre, sleep, can_pause=can_pause,
                     bounded=step >= self.depth)
        self.nodes[step:] = [node]
        return node.chosen

    def backtrack(self) -> bool:
        """Move to the next schedule: the deepest choice point with an alternative left."""
        for i in range(len(self.nodes) - 1, -1, -1):
            node = self.nodes[i]
            if node.bounded:
                continue
            idents = list(node.enabled)
            if not self.within:  # one request per actor: the one that came first
                tried = {s.ident[0] for s in node.done | {node.chosen}}
                firsts: dict[str, tuple[str, str, str, int]] = {}
                for ident in idents:
                    firsts.setdefault(ident[0], ident)
                idents = [i for a, i in firsts.items() if a not in tried]
            options = [Step(Kind.RUN, ident) for ident in idents]
            options += [Step(Kind.PAUSE, (a, "", "", 0)) for a in node.can_pause]
            for opt in options:
                if self._allowed(node, opt):
                    node.done.add(node.chosen)
                    node.chosen = opt
                    del self.nodes[i + 1:]
                    self.prefix = i + 1
                    self.paused = set()
                    return True
        return False


def explore(scenario: Scenario, *, preemptions: int | None = 1, depth: int = 400, max_schedules: int = 50,
            within: bool = False, stop_at_first: bool = False, base: MemStore | None = None) -> Exploration:
    """Depth-first search over the schedules of ``scenario`` within the bounds (see the module docstring)."""
    began = time.monotonic()
    base = base or scenario.setup()
    dfs = _Dfs(scenario, preemptions, depth, within)
    out = Exploration()
    while out.schedules < max_schedules:
        res = run_schedule(scenario, base, dfs)
        out.schedules += 1
        out.steps_max = max(out.steps_max, len(res.steps))
        out.pruned += res.pruned
        out.diverged += res.diverged
        if not res.ok:
            out.violations.append(res)
            out.first_violation_at = out.first_violation_at or out.schedules
            if stop_at_first:
                break
        if not dfs.backtrack():
            out.complete = True
            break
    out.elapsed = time.monotonic() - began
    return out


class _Random:
    """Random priorities per actor, with lost responses and crashes injected at requests."""

    def __init__(self, scenario: Scenario, seed: int, lost: float, crash: float, pause: float) -> None:
        self.rng = random.Random(seed)
        self.prio = {a.name: self.rng.random() for a in scenario.actors}
        self.lost, self.crash, self.pause = lost, crash, pause
        self.pausable = set(scenario.pausable)
        self.crashes = 0

    def replay(self, step: int) -> Step | None:
        return None

    def choose(self, step: int, enabled: list[Request], sched: Scheduler, last: str) -> Step | None:
        pick = max(enabled, key=lambda r: (self.prio[r.actor], -r.seq))
        roll = self.rng.random()
        if roll < 0.1:  # a priority change point: the running actor yields
            self.prio[pick.actor] = min(self.prio.values()) - self.rng.random()
        roll = self.rng.random()
        if pick.actor in self.pausable and roll < self.pause:
            self.pausable.discard(pick.actor)
            return Step(Kind.PAUSE, (pick.actor, "", "", 0))
        if self.crashes == 0 and roll < self.pause + self.crash:
            self.crashes += 1
            return Step(Kind.CRASH, (pick.actor, "", "", 0))
        if roll < self.pause + self.crash + self.lost:
            return Step(Kind.LOST, pick.ident)
        return Step(Kind.RUN, pick.ident)


def random_runs(scenario: Scenario, seeds: range, *, lost: float = 0.01, crash: float = 0.004,
                pause: float = 0.004, stop_at_first: bool = False, base: MemStore | None = None) -> Exploration:
    """One schedule per seed with random priorities; at each request a chance (per request: a schedule has
    about 60-150) to lose its response, to crash its client (at most one crash per schedule) or to pause a
    pausable one."""
    began = time.monotonic()
    base = base or scenario.setup()
    out = Exploration(random=True)
    for seed in seeds:
        res = run_schedule(scenario, base, _Random(scenario, seed, lost, crash, pause))
        out.schedules += 1
        out.steps_max = max(out.steps_max, len(res.steps))
        if not res.ok:
            out.violations.append(res)
            out.first_violation_at = out.first_violation_at or out.schedules
            if stop_at_first:
                break
    out.complete = out.schedules == len(seeds)
    out.elapsed = time.monotonic() - began
    return out
