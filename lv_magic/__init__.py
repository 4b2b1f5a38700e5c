"""IPython extension: ``%load_ext lv_magic`` registers ``%lv``, ``%%lvtxn`` and ``%%lvsql``, and SQL
completion in their cells."""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (imported lazily: importing lv_magic alone loads nothing heavy)."""
    from lv_magic.complete import register
    from lv_magic.magics import LvMagics
    from lv_magic.state import STATE

    ipython.register_magics(LvMagics)
    register(ipython, STATE)


__all__ = ["load_ipython_extension"]
