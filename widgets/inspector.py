"""``LakehouseInspector``: tables, live markers, the global DAG, the global version log and stuck
transactions of a lakehouse, with Refresh and Recover buttons (what ``%lv inspect`` shows).

The constructor does no I/O; :meth:`LakehouseInspector.refresh` scans (and returns the widget, so
``LakehouseInspector(lh).refresh()`` displays a filled inspector).

Live: once displayed, a background thread rescans by itself (:class:`LivePolicy`): soon after a
change, after a cell of this kernel ran (``post_execute``) or one of its transactions placed or
freed a marker, committed or aborted (their ``lv_core.events``, even in the background), backing off
while nothing changes, so that an idle notebook costs one scan every ``idle_interval_s`` (default
30 s). A scan reads, per table, ``_last_checkpoint`` and each version after it, plus one LIST of the
warehouse, one of the transaction folders, the leases of leftover transactions and the global
version log: measured, 13 requests (11 GET, 2 LIST) for 2 tables with 2 versions each
(``test_requests_per_refresh``), about 26 requests a minute for an idle notebook. It stops on
:meth:`~LakehouseInspector.close`, :meth:`~LakehouseInspector.stop`, or when a newer live inspector
of the same lakehouse is displayed in this kernel (re-running ``%lv inspect``), or after
:data:`MAX_FAILURES` rescans in a row could not read the lakehouse.

Saved notebooks: displaying the inspector makes two outputs, the widget view and a static copy of
its last state (``text/html``, kept up to date with ``update_display`` whenever what it shows
changes). A ``<style>`` in the copy hides it while the live widget is there, and hides the widget
output ("Error displaying widget: model not found") when it is not: a notebook reopened without its
kernel (or converted with nbconvert) shows the inspector as it last was.
"""

from __future__ import annotations

import html
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import ipywidgets

from lv_core import events as ev
from widgets.cellhooks import after_each_cell
from widgets.lakehouse_scan import LakehouseScan, scan_lakehouse
from widgets.nbstatic import SAVED_KEY
from widgets.render import CSS
from widgets.render_inspector import INSPECTOR_PARTS, inspector_html, inspector_parts, inspector_text
from widgets.txn_widget import known_names

log = logging.getLogger(__name__)



@dataclass
class LivePolicy:
    """When the live inspector scans next (pure; unit-tested).

    Args:
        interval_s: pause after a scan that found a change (or after a nudge).
        idle_interval_s: longest pause: unchanged scans double the pause up to this.
        min_gap_s: never two scans closer than this (nudges from busy cells are merged).
    """

    interval_s: float = 5.0
    idle_interval_s: float = 30.0
    min_gap_s: float = 1.0

    def next_pause(self, pause: float, changed: bool) -> float:
        """The pause after a scan: back to ``interval_s`` on a change, else twice the last (capped)."""
        if changed:
            return self.interval_s
        return min(self.idle_interval_s, max(self.interval_s, pause * 2))


#: Defaults for new inspectors (change them to configure ``%lv inspect``): e.g.
#: ``widgets.inspector.LIVE.idle_interval_s = 120``.
LIVE = LivePolicy()

MAX_FAILURES = 3  # consecutive rescans that could not read the lakehouse before the poller stops
_LIVE_INSPECTORS: "weakref.WeakSet[LakehouseInspector]" = weakref.WeakSet()


#: Events of this kernel's transactions after which the lakehouse looks different to the inspector.
_CHANGES = (ev.MarkerPlaced, ev.MarkerFreed, ev.Committed, ev.Aborted)
_WATCHED: "weakref.WeakSet[Any]" = weakref.WeakSet()  # transactions whose events nudge the inspectors


def _on_txn_event(event: ev.Event) -> None:
    if isinstance(event, _CHANGES) and _LIVE_INSPECTORS:
        for w in list(_LIVE_INSPECTORS):
            w.nudge()


def watch_transactions() -> None:
    """Nudge the live inspectors on the events of this kernel's transactions (those its widgets show,
    :func:`widgets.txn_widget.remember`): a commit that ends in the background shows at once, not at
    the next poll. Cheap: the callbacks only set a flag."""
    from widgets import txn_widget

    known = getattr(txn_widget, "_KNOWN", {})  # the transactions remember() keeps (weakly)
    for txn in list(known.values()):
        if txn in _WATCHED:
            continue
        try:
            txn.events.subscribe(_on_txn_event, replay=False)
            _WATCHED.add(txn)
        except (AttributeError, TypeError):  # not a transaction with an event stream: polls see it
            continue


def nudge_live_inspectors(*_args: Any) -> None:
    """Ask every live inspector to rescan soon (IPython ``post_execute`` hook: a cell of this kernel
    may have changed the lakehouse) and watch the transactions that cell began."""
    if not _LIVE_INSPECTORS:
        return
    watch_transactions()
    for w in list(_LIVE_INSPECTORS):
        w.nudge()



def saved_style(model_id: str) -> str:
    """CSS (JupyterLab's and nbconvert's output classes) that shows exactly one of the widget output and
    its static copy: the copy only where the live view is missing (no kernel, closed), else the widget."""
    live, saved = f".lv-insp-{model_id}", f".lv-saved-{model_id}"
    return ("<style data-lv-saved-style>"
            f".jp-OutputArea-child:has({live}) + .jp-OutputArea-child:has({saved}) {{display: none;}}"
            f".jp-OutputArea-child:not(:has({live})):has(+ .jp-OutputArea-child {saved}) {{display: none;}}"
            "</style>")


class LakehouseInspector(ipywidgets.VBox):
    """A view of a lakehouse that keeps itself up to date while displayed.

    Args:
        lh: a :class:`lv_core.Lakehouse`.
        history: how many global versions below the head to show.
        live: rescan in the background once displayed (False: only on Refresh).
        interval_s, idle_interval_s, min_gap_s: the live rescan pauses (see :class:`LivePolicy`;
            default: :data:`LIVE`).

    CSS classes: ``lv-inspector`` (and ``lv-insp-<model id>``) on the box; ``lv-toolbar`` with buttons
    ``lv-refresh`` and ``lv-recover`` and ``lv-status`` (``data-live``: "on"/"off"); parts
    ``lv-summary``, ``lv-tables``, ``lv-live-markers``, ``lv-global-dag``, ``lv-gvl``, ``lv-stuck``;
    ``lv-recover-result`` shows what the last recovery did. The static copy: ``lv-inspector-saved``.
    """

    def __init__(self, lh: Any, *, history: int = 5, live: bool = True, interval_s: float | None = None,
                 idle_interval_s: float | None = None, min_gap_s: float | None = None, **kwargs: Any) -> None:
        self._lv_lh = lh
        self._lv_history = history
        self._lv_lock = threading.RLock()
        self.scan: LakehouseScan | None = None
        self.last_recovery: Any = None
        self.scans = 0  # how many scans ran (tests, curiosity)
        self.policy = LivePolicy(LIVE.interval_s if interval_s is None else float(interval_s),
                                 LIVE.idle_interval_s if idle_interval_s is None else float(idle_interval_s),
                                 LIVE.min_gap_s if min_gap_s is None else float(min_gap_s))
        self.policy.interval_s = min(self.policy.interval_s, self.policy.idle_interval_s)
        self._lv_live_wanted = live
        self._lv_thread: threading.Thread | None = None
        self._lv_stop = threading.Event()
        self._lv_wake = threading.Event()
        self._lv_pause = self.policy.interval_s
        self._lv_last_scan = 0.0
        self._lv_fingerprint: Any = None
        self._lv_display_id: str | None = None
        self._lv_saved_html = ""
        self._lv_saved_fp: Any = None
        self._lv_closed = False
        self.refresh_button = ipywidgets.Button(description="Refresh", icon="refresh",
                                                tooltip="scan the lakehouse again")
        self.refresh_button.add_class("lv-refresh")
        self.recover_button = ipywidgets.Button(description="Recover", icon="medkit",
                                                tooltip="free expired markers, roll decided commits forward, "
                                                        "clean leftovers (never touches live transactions)")
        self.recover_button.add_class("lv-recover")
        self.status = ipywidgets.HTML(value="")
        self.status.add_class("lv-status")
        self.live_status = ipywidgets.HTML(value="")
        self.live_status.add_class("lv-live-status")
        toolbar = ipywidgets.HBox([self.refresh_button, self.recover_button, self.status, self.live_status])
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
        self.add_class(f"lv-insp-{self.model_id}")
        self.refresh_button.on_click(lambda _b: self._guarded(self.refresh))
        self.recover_button.on_click(lambda _b: self._guarded(self.recover))
        self._render()
        self._show_live()

    # ------------------------------------------------------------------ actions
    def refresh(self) -> "LakehouseInspector":
        """Scan the lakehouse now and show the result; returns the widget."""
        with self._lv_lock:
            self._set_status("scanning…")
            scan = scan_lakehouse(self._lv_lh, history=self._lv_history)
            self.scans += 1
            self._lv_last_scan = time.monotonic()
            fingerprint = scan.fingerprint()
            changed, self._lv_fingerprint = fingerprint != self._lv_fingerprint, fingerprint
            self.scan = scan
            self._render()
            self._set_status("")
            if changed:
                self._lv_pause = self.policy.interval_s
            self._update_saved()
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

    # ------------------------------------------------------------------ live
    @property
    def live(self) -> bool:
        """Whether the background rescans run."""
        t = self._lv_thread
        return t is not None and t.is_alive() and not self._lv_stop.is_set()

    def start(self) -> "LakehouseInspector":
        """Start the background rescans (displaying the inspector does); stops other live inspectors of
        the same lakehouse in this kernel (an earlier ``%lv inspect``: one poller per lakehouse)."""
        with self._lv_lock:
            if self._lv_closed or self.live:
                return self
            for other in list(_LIVE_INSPECTORS):
                if other is not self and other._lv_lh is self._lv_lh:
                    other.stop("a newer inspector of this lakehouse is live")
            self._lv_stop = threading.Event()
            self._lv_pause = self.policy.interval_s
            thread = threading.Thread(target=self._run, args=(self._lv_stop,), daemon=True,
                                      name=f"lv-inspector-{str(self.model_id)[:8]}")
            self._lv_thread = thread
            _LIVE_INSPECTORS.add(self)
            after_each_cell(nudge_live_inspectors)
            watch_transactions()
            thread.start()
            self._show_live()
        return self

    def stop(self, why: str = "stopped") -> None:
        """Stop the background rescans (Refresh still works)."""
        self._lv_stop.set()
        self._lv_wake.set()
        _LIVE_INSPECTORS.discard(self)
        if not self._lv_closed:
            self._show_live(why)

    def nudge(self) -> None:
        """Rescan soon (at most ``min_gap_s`` after the last scan), e.g. after a cell of this kernel ran."""
        self._lv_pause = self.policy.interval_s
        self._lv_wake.set()

    def _run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            woke = self._lv_wake.wait(timeout=max(0.0, self._lv_last_scan + self._lv_pause - time.monotonic()))
            if stop.is_set():
                return
            if woke:
                self._lv_wake.clear()
                gap = self._lv_last_scan + self.policy.min_gap_s - time.monotonic()
                if gap > 0 and stop.wait(gap):
                    return
            try:
                before = self._lv_fingerprint
                self.refresh()
                self._lv_pause = self.policy.next_pause(self._lv_pause, self._lv_fingerprint != before)
                scan = self.scan
                failed = scan is not None and not scan.tables and bool(scan.errors)
            except Exception:  # a background thread reports in the widget, never in a cell's stderr
                log.debug("inspector rescan failed", exc_info=True)
                self._lv_last_scan = time.monotonic()
                self._lv_pause = self.policy.idle_interval_s
                failed = True
            failures = failures + 1 if failed else 0
            if failures >= MAX_FAILURES:  # e.g. the store went away: stop polling it
                self.stop(f"the lakehouse could not be read {failures} times in a row")
                return

    def _show_live(self, why: str = "") -> None:
        if self.live:
            text = (f'<span class="lv-muted" data-live="on" title="rescans every {self.policy.interval_s:g} s after '
                    f'a change, up to every {self.policy.idle_interval_s:g} s while nothing changes, and after '
                    'each cell">● live</span>')
        elif why:
            text = f'<span class="lv-muted" data-live="off">not live ({html.escape(why)}): press Refresh</span>'
        else:
            text = '<span class="lv-muted" data-live="off"></span>'
        if self.live_status.value != text:
            self.live_status.value = text

    # ------------------------------------------------------------------ display
    def _ipython_display_(self, **kwargs: Any) -> None:
        """Two outputs: the widget view, then a static copy of its last state (see the module doc)."""
        from IPython.display import display

        view = dict(super()._repr_mimebundle_(**kwargs) or {})
        view["text/plain"] = "Lakehouse inspector (live view; its last state follows)"
        display(view, raw=True)
        self._lv_display_id = f"lv-inspector-{self.model_id}"
        self._lv_saved_html, self._lv_saved_fp = self._saved_html(), self._lv_fingerprint
        display(self._saved_bundle(self._lv_saved_html), raw=True, display_id=self._lv_display_id,
                metadata={SAVED_KEY: self.model_id})
        if self._lv_live_wanted:
            self.start()

    def _saved_html(self) -> str:
        mid = html.escape(str(self.model_id))
        return (f'{saved_style(mid)}<div class="lv-inspector-saved lv-saved-{mid}" data-for="{mid}">'
                '<div class="lv-muted lv-saved-note">Saved view: the lakehouse as the inspector last saw it '
                "(run the cell again for a live one).</div>"
                f"{self.to_html()}</div>")

    def _saved_bundle(self, body: str) -> dict[str, Any]:
        return {"text/html": body, "text/plain": self.to_text()}

    def _update_saved(self) -> None:
        """Send the static copy again when the lakehouse changed (not for clocks and lease ages alone:
        each update marks the notebook as modified in JupyterLab)."""
        if self._lv_display_id is None or self._lv_closed or self._lv_fingerprint == self._lv_saved_fp:
            return
        body = self._saved_html()
        self._lv_saved_html, self._lv_saved_fp = body, self._lv_fingerprint
        try:
            from IPython.display import update_display

            update_display(self._saved_bundle(body), raw=True, display_id=self._lv_display_id,
                           metadata={SAVED_KEY: self.model_id})
        except Exception:  # never break a cell or the poller (nor print into a cell)
            log.debug("updating the inspector's saved copy failed", exc_info=True)

    def close(self) -> None:
        """Stop rescanning; close the inspector and every widget inside it (the saved copy shows then)."""
        self.stop("closed")
        self._lv_closed = True

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
        if self.status.value != value:
            self.status.value = value

    def _render(self) -> None:
        names = known_names()
        for name, value in inspector_parts(self.scan, names).items():
            w = self._lv_parts[name]
            if w.value != value:
                with w.hold_sync():
                    w.value = value
        stuck = bool(self.scan and self.scan.stuck)
        style = "warning" if stuck else ""
        if self.recover_button.button_style != style:
            self.recover_button.button_style = style

    def to_html(self) -> str:
        """The last scan as static HTML (its summary says when it was scanned)."""
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
    """A scanned inspector for ``lh`` (what ``%lv inspect`` displays; live once displayed)."""
    return LakehouseInspector(lh, **kwargs).refresh()


__all__ = ["LIVE", "LakehouseInspector", "LivePolicy", "inspect_lakehouse", "nudge_live_inspectors", "saved_style",
           "watch_transactions"]
