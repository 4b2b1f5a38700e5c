"""The process's one IPython test shell with the LakeVilla magics loaded (for magic tests in-process)."""

from __future__ import annotations

from typing import Any


def magic_shell(*, widgets: bool = True) -> Any:
    """The test shell (IPython hands it out once per process; later calls get the same one) with
    ``lv_magic`` loaded; ``widgets=False``: the magics print text instead of showing widgets."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "lv_magic")
    if not widgets:
        shell.run_line_magic("config", "LvMagics.widgets = False")
    return shell
