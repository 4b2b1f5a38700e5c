"""``lv doctor --isolation`` / ``%lv selftest``: a short black-box isolation test on the user's own store.

Runs the list-append workload (:mod:`lv_core.blackbox`) with a few client processes under each
LakeVilla preset in a scratch warehouse below the user's (``_lakevilla/doctor/selftest-<id>/``),
judges each run from the values read alone, reports anomalies (none expected) and abort rates, and
removes the scratch warehouse. A store whose conditional writes or consistency are subtly wrong shows
here as a cycle the checker draws.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from lv_core.blackbox.checker import Anomaly
from lv_core.blackbox.runner import RunResult, run
from lv_core.blackbox.workload import Spec
from lv_core.doctor.checks import scratch_prefix
from lv_core.errors import LvError
from lv_core.storage.uri import open_store

__all__ = ["PRESETS", "SelftestReport", "options_of", "selftest"]

PRESETS = ("serializable", "snapshot", "write_serializable", "repeatable_read")


@dataclass(frozen=True)
class SelftestReport:
    """One black-box run per preset."""

    warehouse: str
    runs: tuple[RunResult, ...]

    @property
    def ok(self) -> bool:
        return not any(r.violations() for r in self.runs)

    def witnesses(self) -> list[tuple[str, Anomaly]]:
        """(preset, anomaly) of every forbidden anomaly found (the first witness of each kind)."""
        out = []
        for r in self.runs:
            for kind in sorted(r.violations()):
                found = r.report.anomalies.get(kind) or ()
                if found:
                    out.append((r.spec.preset, found[0]))
        return out

    def to_text(self) -> str:
        lines = [f"lv doctor --isolation: {self.warehouse}"]
        for r in self.runs:
            s = r.stats
            bad = sorted(r.violations())
            seen = sorted(k for k, v in r.report.anomalies.items() if v)
            lines.append(f"  {'FAIL' if bad else 'PASS'}  {r.spec.preset:18} {s['txns']} txns, "
                         f"{s['committed']} committed, "
                         f"abort rate {s['abort_rate']:.0%}; anomalies: {', '.join(seen) or 'none'}"
                         + (f" (forbidden: {', '.join(bad)})" if bad else ""))
        for preset, anomaly in self.witnesses():
            run_ = next(r for r in self.runs if r.spec.preset == preset)
            lines.append(f"\n{preset}: {anomaly.kind}")
            lines.append(run_.report.explain(1))
        lines.append("  every preset kept its promise on this store." if self.ok else
                     "  isolation broke on this store: do not trust LakeVilla's guarantees here.")
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = []
        for r in self.runs:
            s, bad = r.stats, sorted(r.violations())
            seen = sorted(k for k, v in r.report.anomalies.items() if v)
            color = "#cf222e" if bad else "#1a7f37"
            rows.append(f"<tr><td style='color:{color};font-weight:bold'>{'fail' if bad else 'pass'}</td>"
                        f"<td><code>{r.spec.preset}</code></td><td>{s['txns']}</td><td>{s['committed']}</td>"
                        f"<td>{s['abort_rate']:.0%}</td><td>{html.escape(', '.join(seen) or 'none')}</td></tr>")
        drawn = []
        for preset, anomaly in self.witnesses():
            r = next(x for x in self.runs if x.spec.preset == preset)
            drawn.append(f"<p><b>{preset}</b>: {html.escape(anomaly.kind)}</p>{_svg(r.report.cycle_dot(anomaly))}")
        return ("<div><b>isolation self-test</b> "
                f"<code>{html.escape(self.warehouse)}</code><table><tr><th>result</th><th>preset</th><th>txns</th>"
                "<th>committed</th><th>abort rate</th><th>anomalies seen</th></tr>" + "".join(rows) + "</table>"
                + "".join(drawn) + "</div>")

    def to_json(self) -> dict[str, Any]:
        return {"warehouse": self.warehouse, "ok": self.ok, "runs": [r.to_json() for r in self.runs]}


def _svg(dot: str) -> str:
    """The cycle drawn by Graphviz (its DOT text when ``dot`` is not installed)."""
    import subprocess

    exe = shutil.which("dot")
    if exe is None:
        return f"<pre>{html.escape(dot)}</pre>"
    try:
        return subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return f"<pre>{html.escape(dot)}</pre>"


def options_of(store: Any) -> dict[str, Any] | None:
    """The storage options (never credentials: those come from the environment) that reach ``store``
    again from another process."""
    opts = {k: v for k, v in (("endpoint_url", getattr(store, "endpoint_url", None)),
                              ("region", getattr(store, "region", None))) if v}
    return opts or None


def _scratch(warehouse: str, name: str) -> str:
    if warehouse.startswith("s3://"):
        return warehouse.rstrip("/") + "/" + name
    if warehouse.startswith("file://"):
        warehouse = warehouse[len("file://"):]
    return os.path.join(warehouse, name)


def selftest(warehouse: str, *, storage_options: Mapping[str, Any] | None = None,
             presets: Sequence[str] = PRESETS, clients: int = 3, txns: int = 12, seed: int = 1) -> SelftestReport:
    """Run the workload once per preset below ``warehouse``; every scratch object is removed afterwards."""
    prefix = scratch_prefix().rstrip("/")
    where = _scratch(str(warehouse), prefix.replace("doctor/", "doctor/selftest-"))
    work = Path(tempfile.mkdtemp(prefix="lv-selftest-"))
    runs = []
    try:
        for i, preset in enumerate(presets):
            spec = Spec(preset=preset, tables=2, keys=2, txns=txns, seed=seed, lease_s=5.0, prefix=f"st{i}_")
            runs.append(run(where, spec, work / preset, clients=clients, fresh=False,
                            storage_options=storage_options))
    finally:
        _remove(where, storage_options)
        shutil.rmtree(work, ignore_errors=True)
    return SelftestReport(str(warehouse), tuple(runs))


def _remove(where: str, storage_options: Mapping[str, Any] | None) -> None:
    try:
        store = open_store(where, storage_options)
        raw = getattr(getattr(store, "guard", None), "raw", store)
        for meta in list(raw.list("")):
            raw.delete(meta.key)
    except LvError:
        pass
    if not where.startswith("s3://"):
        shutil.rmtree(where, ignore_errors=True)
