"""Every tutorial notebook runs top to bottom with its own assertions passing (a real kernel, nbclient).

Each notebook runs in a fresh working directory (its `%lv connect` folders are created there) and
starts its own embedded Spark Connect server in the kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from run_notebook import run, summary_of  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_five_tutorials_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.notebook
@pytest.mark.spark
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_with_its_assertions(notebook: Path, tmp_path: Path):
    nb = run(notebook, tmp_path / "out", tmp_path / "work", timeout=900)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    assert summary_of(nb), "the notebook's last cell prints its LV-SUMMARY"
    if notebook.stem.startswith("02"):
        assert_one_line_per_statement(nb)
    assert (tmp_path / "out" / (notebook.stem + ".html")).stat().st_size > 10_000


def assert_one_line_per_statement(nb: Any) -> None:
    """In the cells that drive transactions by hand, every statement's output is one line (no
    row-count frames, no multi-line result tables)."""
    for cell in nb.cells:
        if cell.cell_type != "code" or "run(" not in cell.source:
            continue
        for o in cell.get("outputs", []):
            text = o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", "")
            assert "num_affected_rows" not in text, text
            if o.get("output_type") != "stream":
                assert len(text.strip().splitlines()) <= 1, text
