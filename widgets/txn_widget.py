"""``TransactionWidget``: a live view of one transaction, fed by its event stream.

The widget subscribes to ``txn.events`` (replaying the past), folds events into a
:class:`~widgets.model.TxnView` and re-renders the parts that changed, at most every
``min_interval_s`` (events arrive from background threads too: a commit waiting behind another
transaction). While the transaction waits or commits it re-renders every ``tick_s`` so elapsed
times move. The constructor does no I/O: it renders what the stream already holds.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Callable

import ipywidgets

from lv_core import events as ev
from widgets.cancel import default_cancel, early_clicks
from widgets.cellhooks import after_each_cell
from widgets.live_dag import default_scanner, scan_around
from widgets.model import TxnView
from widgets.render import CSS, DETAILS, PARTS, render_html, render_parts, render_text

log = logging.getLogger(__name__)

_KNOWN: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_LIVE: "weakref.WeakSet[TransactionWidget]" = weakref.WeakSet()  # widgets still listening


def remember(txn: Any) -> None:
    """Remember a transaction so other widgets can show its name instead of its id."""
    try:
        _KNOWN[txn.id] = txn
    except TypeError:  # not weak-referenceable: names are a nicety
        pass


def known_names() -> dict[str, str]:
    """Display names of the (still alive) transactions that have widgets in this process."""
    out: dict[str, str] = {}
    for tid, txn in list(_KNOWN.items()):
        name = getattr(txn, "name", None)
        if name:
            out[tid] = str(name)
    return out


def flush_live_widgets(*_args: Any) -> None:
    """Re-render every live transaction widget now, in the calling thread.

    Registered as IPython's ``post_execute`` hook: updates made by background threads reach a
    frontend anyway, but a headless executor (nbclient) only records widget messages sent while a
    cell runs; this sends the current state from the cell's own thread (cheap: only changed parts).
    """
    for w in list(_LIVE):
        try:
            w.flush()
            w._resend_background_changes()
            if w.view.done:
                w.send_final()
                _LIVE.discard(w)
        except Exception:  # never break the user's cell
            log.exception("transaction widget update failed")



_UNSET: Any = object()
SCAN_MAX_S = 30.0  # longest pause between marker scans of a transaction whose neighbourhood does not change
_TOGGLE = ('<label class="lv-toggle-label" title="details"><input type="checkbox"{checked}>'
           '<span class="lv-closed">▶</span><span class="lv-open">▼</span></label>')


class TransactionWidget(ipywidgets.VBox):
    """One status line (outcome, preset, tables with versions, time, requests) that expands to the
    details: why it aborted or redid work, header, markers, dependency DAG, validation, timeline, result.

    Args:
        txn: a :class:`lv_core.Transaction` (anything with ``.id``, ``.events`` and optionally
            ``.name``/``.state``).
        min_interval_s: at most one re-render per interval (batches busy streams).
        tick_s: re-render period while waiting or committing (elapsed times), 0 to disable.
        expanded: open with the details shown (the toggle works in the browser alone, even while a cell runs).
        cancel: what the Cancel button of a running statement calls; default: the transaction's
            ``interrupt()``, else an interrupt of ``lakehouse``'s Spark session, else no button.
        lakehouse: scan its markers (every ``scan_s`` while the transaction holds markers, backing off
            while nothing changes) to show the other live transactions that wait for this one, or that it
            waits for, in the DAG; default: the transaction's own store (``txn.store.inner``).

    CSS classes: ``lv-txn`` and ``lv-state-<state>`` on the box; ``lv-bar`` (``lv-toggle``,
    ``lv-summary``), ``lv-progress-box`` (``lv-progress``, ``lv-cancel``), ``lv-details`` (``lv-why``,
    ``lv-header``, ``lv-markers``, ``lv-dag``, ``lv-validation``, ``lv-timeline``, ``lv-result``).
    """

    def __init__(self, txn: Any, *, min_interval_s: float = 0.1, tick_s: float = 1.0, expanded: bool = False,
                 cancel: Callable[[], None] | None = _UNSET, lakehouse: Any = None, scan_s: float = 2.0,
                 **kwargs: Any) -> None:
        self._lv_txn = txn
        self._lv_view = TxnView(txn.id, name=getattr(txn, "name", None))
        self._lv_min_interval = float(min_interval_s)
        self._lv_tick = float(tick_s)
        self._lv_lock = threading.Lock()  # pending events, timer
        self._lv_render_lock = threading.RLock()  # one render at a time
        self._lv_pending: list[ev.Event] = []
        self._lv_timer: threading.Timer | None = None
        self._lv_timer_due = 0.0
        self._lv_last = 0.0
        self._lv_building = True
        self._lv_closed = False
        self._lv_unsubscribe: Any = None
        self._lv_state_class = ""
        self._lv_scanner = lakehouse if lakehouse is not None else default_scanner(txn)
        self._lv_scan_s = float(scan_s)
        self._lv_scanned = 0.0
        self._lv_scan_every = self._lv_scan_s  # grows while scans find nothing new (an idle open transaction)
        self._lv_cancel = default_cancel(txn, lakehouse) if cancel is _UNSET else cancel
        self._lv_cancelling = False
        self._lv_display_id: str | None = None
        self._lv_final_sent = False
        self._lv_expanded = bool(expanded)
        self.renders = 0  # how many times parts were re-rendered (for tests and curiosity)
        self._lv_bg_changed: set[str] = set()  # parts changed by a background thread since the last cell
        parts = {name: ipywidgets.HTML(value="") for name in PARTS}
        for name, w in parts.items():
            w.add_class(f"lv-{name}")
        self._lv_parts = parts
        self._lv_style = ipywidgets.HTML(value=CSS)
        self._lv_style.add_class("lv-style")
        toggle = ipywidgets.HTML(value=_TOGGLE.format(checked=" checked" if expanded else ""))
        toggle.add_class("lv-toggle")
        self._lv_toggle = toggle
        self._lv_button = ipywidgets.Button(description="Cancel", icon="stop", button_style="warning",
                                            tooltip="interrupt the running statement (the transaction rolls back)",
                                            layout=ipywidgets.Layout(width="auto", height="24px"))
        self._lv_button.add_class("lv-cancel")
        self._lv_button.on_click(lambda _b: self.cancel())
        self._lv_boxes = {
            "bar": ipywidgets.HBox([toggle, parts["summary"]]),
            "progress": ipywidgets.HBox([parts["progress"], self._lv_button],
                                        layout=ipywidgets.Layout(display="none")),
            "details": ipywidgets.VBox([parts[name] for name in DETAILS]),
        }
        for name, box in self._lv_boxes.items():
            box.add_class("lv-bar-row" if name == "bar" else f"lv-{name}" if name == "details" else "lv-progress-box")
        self._lv_visible = {"progress": False}
        super().__init__(children=[self._lv_style, *self._lv_boxes.values()], **kwargs)
        self.add_class("lv-txn")
        early_clicks(self._lv_button, self.cancel)
        remember(txn)
        _LIVE.add(self)
        after_each_cell(flush_live_widgets)
        self._lv_unsubscribe = txn.events.subscribe(self._on_event, replay=True)
        self.flush()

    # ------------------------------------------------------------------ public
    @property
    def txn(self) -> Any:
        return self._lv_txn

    @property
    def view(self) -> TxnView:
        """The folded view state (after the last render)."""
        return self._lv_view

    def part(self, name: str) -> ipywidgets.HTML:
        """The HTML widget of one part (see :data:`widgets.render.PARTS`)."""
        return self._lv_parts[name]

    @property
    def cancel_button(self) -> ipywidgets.Button:
        return self._lv_button

    def cancel(self) -> bool:
        """Interrupt the running statement (what the Cancel button does); False when there is nothing to
        cancel, no way to cancel or a cancel is already under way."""
        with self._lv_lock:
            if self._lv_cancelling or self._lv_cancel is None or self._lv_view.done:
                return False
            self._lv_cancelling = True
        self._lv_button.disabled = True
        self._lv_button.description = "Cancelling…"
        try:
            self._lv_cancel()
        except Exception:
            log.exception("cancel failed")
            with self._lv_lock:
                self._lv_cancelling = False
            self._lv_button.disabled, self._lv_button.description = False, "Cancel"
            return False
        return True

    def flush(self, *, scan: bool = False) -> None:
        """Fold pending events and re-render changed parts now (any thread); ``scan``: also look for the
        other live transactions (I/O; done by the widget's timer thread when a lakehouse was given)."""
        with self._lv_render_lock:
            with self._lv_lock:
                events, self._lv_pending = self._lv_pending, []
                self._lv_building = False
                self._lv_last = time.monotonic()
            view = self._lv_view
            view.names = known_names()  # before folding: timeline sentences name other transactions
            for e in events:
                view.apply(e)
            view.engine_state = getattr(self._lv_txn, "state", None)
            view.dag.nodes[view.txn] = view.state
            if self._lv_closed:
                return
            if scan and not view.done:
                self._scan(view)
            self._render(view)
            if view.done:
                self._detach()
                if threading.current_thread() is threading.main_thread():
                    self.send_final()
            elif self._lv_tick > 0 and view.state in ("waiting", "committing", "validating"):
                self._schedule(self._lv_tick)
            elif self._scans(view):
                self._schedule(max(0.1, self._lv_scan_every))

    def close(self) -> None:
        """Stop listening and close the widget and its parts."""
        self._lv_closed = True
        _LIVE.discard(self)
        self._detach()
        owned = [self._lv_style, self._lv_toggle, self._lv_button, *self._lv_parts.values(), *self._lv_boxes.values()]
        for w in owned:
            for sub in (getattr(w, "layout", None), getattr(w, "style", None)):
                if isinstance(sub, ipywidgets.Widget):
                    sub.close()
            w.close()
        layout = self.layout
        super().close()
        if isinstance(layout, ipywidgets.Widget):
            layout.close()

    def to_html(self) -> str:
        """The current state as static HTML."""
        with self._lv_render_lock:
            return render_html(self._lv_view)

    def to_text(self) -> str:
        """The current state as plain text."""
        with self._lv_render_lock:
            return render_text(self._lv_view)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The widget view plus static fallbacks (text/html for nbconvert, text/plain for terminals)."""
        self.flush()
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = self.to_text()
        data["text/html"] = self.to_html()
        return data

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Display with a display id, so that the saved fallbacks can be replaced by the final state."""
        from IPython.display import display

        if self._lv_display_id is None:
            self._lv_display_id = f"lv-txn-{self.model_id or id(self)}"
        display(self._repr_mimebundle_(), raw=True, display_id=self._lv_display_id)
        self._lv_final_sent = self._lv_view.done

    def send_final(self) -> bool:
        """Replace the displayed output by the final state as static HTML and text, once.

        A finished transaction has nothing left to update, and what an output holds is what a saved
        notebook keeps: JupyterLab reopened without a kernel, nbconvert, GitHub then show how the
        transaction ended (a widget view would need the kernel's model, gone by then). Call it from the
        cell's thread (the update goes to the running cell's request): the widget does, when the end is
        folded there or by the post-execute hook. Returns whether an update was sent.
        """
        if self._lv_display_id is None or self._lv_final_sent or not self._lv_view.done or self._lv_closed:
            return False
        self._lv_final_sent = True
        try:
            from IPython.display import update_display

            self.flush()
            with self._lv_render_lock:
                bundle = {"text/plain": render_text(self._lv_view),
                          "text/html": render_html(self._lv_view, expanded=self._lv_expanded)}
            update_display(bundle, raw=True, display_id=self._lv_display_id)
        except Exception:  # never break the user's cell
            log.exception("updating the saved transaction output failed")
            return False
        return True

    # ------------------------------------------------------------------ internals
    def _scans(self, view: TxnView) -> bool:
        return (self._lv_scanner is not None and self._lv_scan_s > 0 and not view.done
                and any(r.version is not None and r.state not in ("freed", "committed") for r in view.markers.values()))

    def _scan(self, view: TxnView) -> None:
        if not self._scans(view) or time.monotonic() - self._lv_scanned < self._lv_scan_every * 0.9:
            return
        self._lv_scanned = time.monotonic()
        tables = [t for t, r in view.markers.items() if r.version is not None]
        live = scan_around(self._lv_scanner, view.txn, tables, time.time())
        before = (view.live_nodes, [e.key for e in view.live_edges])
        view.live_nodes, view.live_edges = live.nodes, live.edges
        same = before == (view.live_nodes, [e.key for e in view.live_edges])
        self._lv_scan_every = min(SCAN_MAX_S, self._lv_scan_every * 2) if same else self._lv_scan_s
        view.names = {**known_names(), **view.names}

    def _on_event(self, event: ev.Event) -> None:
        with self._lv_lock:
            self._lv_pending.append(event)
            self._lv_scan_every = self._lv_scan_s  # something happened: look around again soon
            if self._lv_building or self._lv_closed:
                return
            delay = max(0.0, self._lv_last + self._lv_min_interval - time.monotonic())
            timer = self._lv_timer
            if timer is not None:
                if self._lv_timer_due <= time.monotonic() + delay:
                    return  # an earlier render is already due
                timer.cancel()  # a slow tick (scan back-off) must not hold events back
            self._start_timer(delay)

    def _schedule(self, delay: float) -> None:
        with self._lv_lock:
            if self._lv_timer is None and not self._lv_closed:
                self._start_timer(delay)

    def _start_timer(self, delay: float) -> None:  # caller holds _lv_lock
        self._lv_timer_due = time.monotonic() + delay
        timer = threading.Timer(delay, self._on_timer)
        timer.daemon = True
        timer.name = f"lv-widget-{self._lv_view.txn[-6:]}"
        self._lv_timer = timer
        timer.start()

    def _on_timer(self) -> None:
        with self._lv_lock:
            if self._lv_timer is threading.current_thread():  # not a newer timer that replaced this one
                self._lv_timer = None
        try:
            self.flush(scan=True)
        except Exception:  # never let a rendering bug kill the timer thread silently
            log.exception("transaction widget update failed")

    def _render(self, view: TxnView) -> None:
        html = render_parts(view)
        changed: list[str] = []
        for name, value in html.items():
            w = self._lv_parts[name]
            if w.value != value:
                with w.hold_sync():
                    w.value = value
                changed.append(name)
        cls = f"lv-state-{view.state}"
        if cls != self._lv_state_class:
            with self.hold_sync():
                if self._lv_state_class:
                    self.remove_class(self._lv_state_class)
                self.add_class(cls)
            self._lv_state_class = cls
            changed.append("_box")
        show = bool(html["progress"]) and not view.done
        if show != self._lv_visible["progress"]:
            self._lv_visible["progress"] = show
            self._lv_boxes["progress"].layout.display = "" if show else "none"
            changed.append("_progress")
        hide_cancel = self._lv_cancel is None or view.done
        if self._lv_button.layout.display != ("none" if hide_cancel else ""):
            self._lv_button.layout.display = "none" if hide_cancel else ""
            changed.append("_cancel")
        if changed:
            self.renders += 1
            if threading.current_thread() is not threading.main_thread():
                self._lv_bg_changed.update(changed)

    def _resend_background_changes(self) -> None:
        """Send again, from this thread, the parts a background thread changed (see flush_live_widgets)."""
        with self._lv_render_lock:
            names, self._lv_bg_changed = self._lv_bg_changed, set()
            for name in names:
                if name == "_box":
                    self.send_state("_dom_classes")
                elif name == "_progress":
                    self._lv_boxes["progress"].layout.send_state("display")
                elif name == "_cancel":
                    self._lv_button.layout.send_state("display")
                elif not self._lv_closed:
                    self._lv_parts[name].send_state("value")

    def _detach(self) -> None:
        unsub, self._lv_unsubscribe = self._lv_unsubscribe, None
        if unsub is not None:
            unsub()
        with self._lv_lock:
            timer, self._lv_timer = self._lv_timer, None
        if timer is not None:
            timer.cancel()



__all__ = ["TransactionWidget", "flush_live_widgets", "known_names", "remember"]
