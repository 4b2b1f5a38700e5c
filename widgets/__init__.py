"""ipywidgets for LakeVilla: the live transaction widget and the lakehouse inspector.

``TransactionWidget(txn)`` and ``LakehouseInspector(lh)`` need ipywidgets; the model and the static
renderers (``fold``, ``render_html``, ``render_text``) do not, and are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TransactionWidget": "widgets.txn_widget",
    "LakehouseInspector": "widgets.inspector",
    "inspect_lakehouse": "widgets.inspector",
    "TxnView": "widgets.model",
    "fold": "widgets.model",
    "render_html": "widgets.render",
    "render_text": "widgets.render",
    "scan_lakehouse": "widgets.lakehouse_scan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
