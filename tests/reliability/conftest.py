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
def _every_test_keeps_the_log_immutable(log_immutability: Any) -> Any:
    """Every reliability test runs under the log-immutability checker (tests/conftest.py)."""
    return log_immutability
