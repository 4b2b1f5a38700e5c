"""``LakehouseInspector``: tables, live markers, the global DAG, the global version log and stuck
transactions of a lakehouse, with Refresh and Recover buttons (what ``%lv inspect`` shows).

The constructor does no I/O; :meth:`LakehouseInspector.refresh` scans (and returns the widget, so
``LakehouseInspector(lh).refresh()`` displays a filled inspector). No background polling.
"""

from __future__ import annotations

import html
import logging
import threading
from typing import Any

import ipywidgets

from widgets.lakehouse_scan import LakehouseScan, scan_lakehouse
from widgets.render import CSS
from widgets.render_inspector import INSPECTOR_PARTS, inspector_html, inspector_parts, inspector_text
from widgets.txn_widget import known_names

log = logging.getLogger(__name__)


class LakehouseInspector(ipywidgets.VBox):
    """One-shot view of a lakehouse, refreshed on demand.

    Args:
        lh: a :class:`lv_core.Lakehouse`.
        history: how many global versions below the head to show.

    CSS classes: ``lv-inspector`` on the box; ``lv-toolbar`` with buttons ``lv-refresh`` and
    ``lv-recover``; parts ``lv-summary``, ``lv-tables``, ``lv-live-markers``, ``lv-global-dag``,
    ``lv-gvl``, ``lv-stuck``; ``lv-recover-result`` shows what the last recovery did.
    """

    def __init__(self, lh: Any, *, history: int = 5, **kwargs: Any) -> None:
        self._lv_lh = lh
        self._lv_history = history
        self._lv_lock = threading.RLock()
        self.scan: LakehouseScan | None = None
        self.last_recovery: Any = None
        self.refresh_button = ipywidgets.Button(description="Refresh", icon="refresh",
                                                tooltip="scan the lakehouse again")
        self.refresh_button.add_class("lv-refresh")
        self.recover_button = ipywidgets.Button(description="Recover", icon="medkit",
                                                tooltip="free expired markers, roll decided commits forward, "
                                                        "clean leftovers (never touches live transactions)")
        self.recover_button.add_class("lv-recover")
        self.status = ipywidgets.HTML(value="")
        self.status.add_class("lv-status")
        toolbar = ipywidgets.HBox([self.refresh_button, self.recover_button, self.status])
        toolbar.add_class("lv-toolbar")
        self._lv_parts = {name: ipywidgets.HTML(value="") for name in INSPECTOR_PARTS}
        for name, w in self._lv_parts.items():
            w.add_class(f"lv-{name}")
        self.recover_result = ipywidgets.HTML(value="")
        self.recover_result.add_class("lv-recover-result")
        style = ipywidgets.HTML(value=CSS)
        style.add_class("lv-style")
        super().__init__(children=[style, toolbar, *self._lv_parts.values(), self.recover_result], **kwargs)
        self.add_class("lv-inspector")
        self.refresh_button.on_click(lambda _b: self._guarded(self.refresh))
        self.recover_button.on_click(lambda _b: self._guarded(self.recover))
        self._render()

    # ------------------------------------------------------------------ actions
    def refresh(self) -> "LakehouseInspector":
        """Scan the lakehouse now and show the result; returns the widget."""
        with self._lv_lock:
            self._set_status("scanning…")
            self.scan = scan_lakehouse(self._lv_lh, history=self._lv_history)
            self._render()
            self._set_status("")
        return self

    def recover(self) -> Any:
        """Run ``lh.recover()``, show its summary and refresh; returns the RecoveryReport."""
        with self._lv_lock:
            self.recover_button.disabled = True
            self._set_status("recovering…")
            try:
                report = self._lv_lh.recover()
            finally:
                self.recover_button.disabled = False
            self.last_recovery = report
            self.recover_result.value = (f'<div class="lv-recovery" data-freed="{len(report.freed)}" '
                                         f'data-rolled-forward="{len(report.rolled_forward)}">'
                                         f"<b>Recovery:</b> {html.escape(report.summary())}</div>")
            self.refresh()
            return report

    def close(self) -> None:
        """Close the inspector and every widget inside it."""
        def walk(w: Any) -> list[Any]:
            return [w, *(x for c in getattr(w, "children", ()) for x in walk(c))]

        for w in walk(self)[1:]:
            w.close()
        super().close()

    # ------------------------------------------------------------------ rendering
    def _guarded(self, action: Any) -> None:
        try:
            action()
        except Exception as e:  # a button must report, not raise into the comm handler
            log.exception("inspector action failed")
            self._set_status(f'<span class="lv-rule-fail">{html.escape(type(e).__name__)}: '
                             f'{html.escape(str(e))}</span>')

    def _set_status(self, value: str) -> None:
        self.status.value = value

    def _render(self) -> None:
        names = known_names()
        for name, value in inspector_parts(self.scan, names).items():
            w = self._lv_parts[name]
            if w.value != value:
                with w.hold_sync():
                    w.value = value
        stuck = bool(self.scan and self.scan.stuck)
        self.recover_button.button_style = "warning" if stuck else ""

    def to_html(self) -> str:
        return inspector_html(self.scan, known_names())

    def to_text(self) -> str:
        return inspector_text(self.scan, known_names())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The widget view plus static fallbacks (text/html, text/plain) of the last scan."""
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = self.to_text()
        data["text/html"] = self.to_html()
        return data


def inspect_lakehouse(lh: Any, **kwargs: Any) -> LakehouseInspector:
    """A scanned inspector for ``lh`` (what ``%lv inspect`` displays)."""
    return LakehouseInspector(lh, **kwargs).refresh()


__all__ = ["LakehouseInspector", "inspect_lakehouse"]
