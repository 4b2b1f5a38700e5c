"""binder/ stays consistent with pyproject.toml (mybinder.org launches the tutorials from it)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _reqs() -> list[str]:
    lines = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_requirements_match_pyproject_dependencies():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = _reqs()
    assert set(deps) <= set(reqs), f"binder/requirements.txt misses {sorted(set(deps) - set(reqs))}"
    names = {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0] for r in reqs}
    assert {"jupyterlab", "ipykernel"} <= names


def test_apt_packages_and_postbuild():
    apt = (ROOT / "binder" / "apt.txt").read_text().split()
    assert "openjdk-17-jre-headless" in apt and "graphviz" in apt
    post = ROOT / "binder" / "postBuild"
    assert post.stat().st_mode & 0o111, "postBuild must be executable"
    assert "pip install" in post.read_text() and "-e ." in post.read_text()
