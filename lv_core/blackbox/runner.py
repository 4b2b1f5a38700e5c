"""Run the list-append workload with several client processes and faults, then judge it black-box.

:func:`run` creates the list tables (fresh: unknown to the global version log, as right after CREATE
TABLE; or known to it), starts the clients, injects the faults of a :class:`Faults` schedule while
they run (pause a client past its lease with SIGSTOP/SIGCONT, SIGKILL one and start it again, one
client's clock skewed, store faults and lost responses inside the clients), then lets leases run
out, runs ``lv recover``, reads every list with ``deltalake`` (a reader that knows nothing of
LakeVilla) and checks the history (:func:`lv_core.blackbox.check`). Nothing the system says about
versions or order is used to judge.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lv_core.blackbox.checker import Report, check
from lv_core.blackbox.history import Txn
from lv_core.blackbox.listops import create_list_table, read_list, read_lists_plain
from lv_core.blackbox.workload import Spec, abort_stats, load_records, table_names
from lv_core.concurrency import Backoff

__all__ = ["Faults", "RunResult", "run"]


@dataclass(frozen=True)
class Faults:
    """A fault schedule.

    Attributes:
        pause: now and then stop a client (SIGSTOP) for ``pause_leases`` of its lease, then let it go on.
        kill: now and then SIGKILL a client and start it again (its transaction in flight: outcome unknown).
        skew_s: client 0's wall clock runs this far ahead (negative: behind).
        interval_s: seconds between two fault events.
        pause_leases: how long a pause lasts, in leases.
        seed: the schedule's random choices.
    """

    pause: bool = False
    kill: bool = False
    skew_s: float = 0.0
    interval_s: float = 2.0
    pause_leases: float = 2.5
    seed: int = 1

    def label(self) -> str:
        parts = [p for p, on in (("pause", self.pause), ("kill", self.kill)) if on]
        if self.skew_s:
            parts.append(f"skew{self.skew_s:+g}s")
        return "+".join(parts) or "none"


@dataclass
class RunResult:
    """One run: the history, the final lists, the checker's report, and what the faults did."""

    spec: Spec
    faults: Faults
    fresh: bool
    history: list[Txn]
    final: dict[str, tuple[int, ...]]
    report: Report
    stats: Mapping[str, Any]
    seconds: float
    events: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)  # clients that died of an error (not of a fault)

    def violations(self, level: str | None = None) -> set[str]:
        """The anomaly kinds found that ``level`` (default: the run's preset) forbids."""
        return set(self.report.violations(level or self.spec.preset))

    def summary(self) -> str:
        found = ", ".join(f"{k}: {len(v)}" for k, v in sorted(self.report.anomalies.items()) if v) or "none"
        return (f"preset={self.spec.preset} fresh={self.fresh} faults={self.faults.label()} seed={self.spec.seed} "
                f"txns={self.stats['txns']} committed={self.stats['committed']} aborted={self.stats['aborted']} "
                f"unknown={self.stats['unknown']} anomalies: {found}")

    def to_json(self) -> dict[str, Any]:
        return {"spec": dataclasses.asdict(self.spec), "faults": dataclasses.asdict(self.faults), "fresh": self.fresh,
                "stats": dict(self.stats), "seconds": round(self.seconds, 2), "events": self.events,
                "report": self.report.to_json()}


class _Client:
    """One client slot: its current process, incarnation and record files."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.incarnation = 0
        self.proc: subprocess.Popen[str] | None = None
        self.files: list[Path] = []


def _setup(lh: Any, spec: Spec, fresh: bool) -> None:
    for t in table_names(spec):
        create_list_table(lh, t, spec.keys)
    if not fresh:  # a validating transaction makes the global version log know every table
        txn = lh.begin("serializable")
        for t in table_names(spec):
            read_list(txn, t, 0)
        txn.commit()


def _started(slot: _Client, warehouse: str, spec: Spec, workdir: Path, options: Mapping[str, Any] | None,
             env: Mapping[str, str]) -> None:
    start = sum(1 for f in slot.files for line in f.read_text().splitlines() if '"invoke"' in line)
    out = workdir / f"c{slot.n}.{slot.incarnation}.jsonl"
    out.touch()
    slot.files.append(out)
    err = open(workdir / f"c{slot.n}.{slot.incarnation}.err", "w")  # noqa: SIM115 (handed to the child)
    slot.proc = subprocess.Popen(
        [sys.executable, "-m", "lv_core.blackbox.client", warehouse, spec.to_json(), str(slot.n),
         str(slot.incarnation), str(out), str(start), json.dumps(dict(options)) if options else ""],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True)
    err.close()  # the child holds its own copy


def _nemesis(slots: list[_Client], faults: Faults, spec: Spec, restart: Any, stop: threading.Event,
             events: list[str]) -> None:
    """Pause or kill a random running client every ``interval_s`` until ``stop`` is set."""
    rng = random.Random(faults.seed)
    kinds = [k for k, on in (("pause", faults.pause), ("kill", faults.kill)) if on]
    while kinds and not stop.wait(faults.interval_s):
        live = [s for s in slots if s.proc is not None and s.proc.poll() is None]
        if not live:
            continue
        slot, kind = rng.choice(live), rng.choice(kinds)
        assert slot.proc is not None
        if kind == "pause":
            slot.proc.send_signal(signal.SIGSTOP)
            events.append(f"{time.monotonic():.2f} SIGSTOP c{slot.n}")
            stop.wait(spec.lease_s * faults.pause_leases)
            slot.proc.send_signal(signal.SIGCONT)
            events.append(f"{time.monotonic():.2f} SIGCONT c{slot.n}")
        else:
            slot.proc.send_signal(signal.SIGKILL)
            slot.proc.wait()
            events.append(f"{time.monotonic():.2f} SIGKILL c{slot.n}.{slot.incarnation}")
            slot.incarnation += 1
            restart(slot)


def run(warehouse: str, spec: Spec, workdir: Path, *, clients: int = 3, faults: Faults = Faults(),
        fresh: bool = True, storage_options: Mapping[str, Any] | None = None, deadline_s: float = 600.0) -> RunResult:
    """Run the workload against ``warehouse`` (which must not hold the list tables yet) and check it."""
    import lv_core

    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    lh = lv_core.connect(warehouse, storage_options=storage_options, lease_s=spec.lease_s)
    _setup(lh, spec, fresh)
    slots = [_Client(n) for n in range(clients)]
    lock = threading.Lock()

    def restart(slot: _Client) -> None:
        env = {"LV_TEST_CLOCK_SKEW_S": str(faults.skew_s)} if faults.skew_s and slot.n == 0 else {}
        with lock:
            _started(slot, warehouse, spec, workdir, storage_options, env)

    for slot in slots:
        restart(slot)
    stop = threading.Event()
    events: list[str] = []
    nemesis = threading.Thread(target=_nemesis, args=(slots, faults, spec, restart, stop, events), daemon=True)
    nemesis.start()
    deadline = began + deadline_s
    poll = Backoff(0.1, 0.1)
    try:
        while True:
            with lock:
                running = [s for s in slots if s.proc is not None and s.proc.poll() is None]
            if not running or time.monotonic() > deadline:
                break
            poll.sleep()
    finally:
        stop.set()
        nemesis.join()
        for s in slots:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.proc.kill()
                s.proc.wait()
                events.append(f"{time.monotonic():.2f} deadline: killed c{s.n}")
    # Crashed clients' markers and a dead holder's validation key: their leases run out, then recovery.
    time.sleep(spec.lease_s * 1.5)
    lh.recover(lease_grace_s=0.0)
    opts = lh.store.storage_options_for_deltalake() or None
    final: dict[str, tuple[int, ...]] = {}
    for t in table_names(spec):
        for k, vals in read_lists_plain(lh.store.url(t), opts).items():
            final[f"{t}/{k}"] = vals
    lh.close()
    history = load_records([f for s in slots for f in s.files])
    report = check(history, final)
    # A client that exited with an error (not one the nemesis or the deadline killed: those are faults).
    # Its stderr also holds logged tracebacks of background clean-ups that failed under store faults.
    crashes = [f"c{s.n}.{s.incarnation} exited with {s.proc.returncode}: "
               + (workdir / f"c{s.n}.{s.incarnation}.err").read_text(errors="replace")[-3000:]
               for s in slots if s.proc is not None and s.proc.returncode not in (0, None, -signal.SIGKILL)]
    return RunResult(spec, faults, fresh, history, final, report, abort_stats(history), time.monotonic() - began,
                     events, crashes)
