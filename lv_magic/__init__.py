"""IPython extension: ``%load_ext lv_magic`` registers ``%lv`` and ``%%lvtxn``."""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (imported lazily: importing lv_magic alone loads nothing heavy)."""
    from lv_magic.magics import LvMagics

    ipython.register_magics(LvMagics)


__all__ = ["load_ipython_extension"]
