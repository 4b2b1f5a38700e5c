"""benchmarks.common.tree_process: a before/after child imports lv_core from the tree under test, even
after importing benchmarks.common (which once put this checkout first on sys.path: every before/after run
of scale.py, commit_latency.py and aborts.py then compared this checkout with itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.common import tree_process


def test_a_tree_child_imports_the_trees_lv_core(tmp_path: Path) -> None:
    tree = tmp_path / "old"
    (tree / "lv_core").mkdir(parents=True)
    (tree / "lv_core" / "__init__.py").write_text("WHICH = 'the old tree'\n")
    code = "import benchmarks.common, benchmarks.scale, lv_core; print(lv_core.WHICH)"
    with tree_process(tree) as (cwd, env):
        out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "the old tree"
