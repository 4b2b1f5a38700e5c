"""Fixtures of the reliability tests."""

from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="module")
def ipshell() -> Iterator[Any]:
    """IPython's global test shell with the magics loaded (widgets off).

    ``IPython.testing.globalipapp.start_ipython`` hands the shell out once per process; afterwards it
    returns None. Other test modules (tests/unit/test_magic.py) call it themselves, so this fixture
    gives the shell back: it clears the "already called" flag again when the module is done.
    """
    from IPython import get_ipython
    from IPython.testing import globalipapp

    fresh = globalipapp.start_ipython()
    shell = fresh or get_ipython()
    shell.run_line_magic("load_ext", "lv_magic")
    shell.run_line_magic("config", "LvMagics.widgets = False")
    yield shell
    shell.run_line_magic("config", "LvMagics.widgets = False")
    if fresh is not None and hasattr(globalipapp.start_ipython, "already_called"):
        del globalipapp.start_ipython.already_called


@pytest.fixture(autouse=True)
def log_immutability(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Issue 18: every reliability test that works in ``tmp_path`` runs under the log-immutability
    checker (tests/helpers/immutability.py): no ``_delta_log`` file may change or disappear, whatever
    the processes, crashes and faults of the test do. A test that plants a broken log file itself
    (bad input) opts out with ``@pytest.mark.plants_log_files``."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("plants_log_files"):
        yield None
        return
    from tests.helpers.immutability import LogWatcher

    watcher = LogWatcher(root=request.getfixturevalue("tmp_path")).start()
    yield watcher
    watcher.stop()
    assert not watcher.violations, f"Delta log files were rewritten: {watcher.violations[:10]} ({watcher.summary()})"
