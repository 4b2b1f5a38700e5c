"""benchmarks/RESULTS.md is generated, whole: ``run.py --report-only`` rewrites it from the results
JSON and the notes of ``benchmarks/notes`` without losing a section (it used to drop every hand-written
one), the committed file is what it writes, and every results file a note cites exists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCH = ROOT / "benchmarks"
COMMITTED = BENCH / "RESULTS.md"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> str:
    """RESULTS.md as ``run.py --report-only`` writes it from a copy of the committed results (the same
    layout, so its links are the same; the plots it redraws go to the copy)."""
    pytest.importorskip("matplotlib")
    from benchmarks import run

    tmp = tmp_path_factory.mktemp("report")
    shutil.copytree(BENCH / "results", tmp / "results", ignore=shutil.ignore_patterns("*.png"))
    assert run.main(["--report-only", "--out", str(tmp / "results"), "--report", str(tmp / "RESULTS.md")]) == 0
    return (tmp / "RESULTS.md").read_text()


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_report_only_keeps_every_section_and_note(regenerated: str) -> None:
    lost = [h for h in _headings(COMMITTED.read_text()) if h not in _headings(regenerated)]
    assert lost == []
    for note in sorted((BENCH / "notes").rglob("*.md")):
        assert note.read_text().strip() in regenerated, note.name
    first = next(h for h in _headings(regenerated) if h.startswith("## "))
    assert first == "## Targets (issue 38)"


def test_committed_results_md_is_what_report_only_writes(regenerated: str) -> None:
    assert COMMITTED.read_text() == regenerated, "regenerate it: python benchmarks/run.py --report-only"


def test_targets_name_existing_results_files() -> None:
    from benchmarks.report_targets import targets

    rows = targets(BENCH / "results")
    assert rows and all(r[3] in ("met", "MISSED", "-") for r in rows)
    for r in rows:
        for name in re.findall(r"`([^`]+\.json)`", r[4]):
            assert (BENCH / "results" / name).exists(), name


def test_history_notes_cite_results_that_exist() -> None:
    """Every note names where its numbers come from: a file of results/, or the commit holding the
    version it used (the harnesses overwrite their files run after run)."""
    git = shutil.which("git")
    for note in sorted((BENCH / "notes" / "history").glob("*.md")):
        text = note.read_text()
        source = text.rstrip().splitlines()[-1]
        assert source.startswith("*Source*"), note.name
        for name in re.findall(r"`results/([^`]+\.json)`", source):
            assert (BENCH / "results" / name).exists(), (note.name, name)
        for commit, path in re.findall(r"`git show ([0-9a-f]+):([^`]+)`", source):
            if git and (ROOT / ".git").exists():
                res = subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{commit}:{path}"])
                assert res.returncode == 0, (note.name, commit, path)
