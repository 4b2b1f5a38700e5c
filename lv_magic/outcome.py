"""Outputs that change after their cell ended: the outcome of a commit that went on in the background,
and the statement lines of a transaction that was still open when its cell ended.

Each is shown with a display id and updated when its transaction ends: at once, from the thread that
saw the end (a live frontend shows it), and again from the next cell's own thread (IPython's
``post_execute`` hook), because a headless executor (nbclient, which saves notebooks) only records
updates sent while a cell runs. The update replaces the output, so a saved notebook keeps the final
text: "t2 committed: kv@5", and "UPDATE kv: 1 row" struck through as rolled back.
"""

from __future__ import annotations

import html
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from lv_core import events as ev
from lv_core.errors import TransactionAborted
from widgets.cellhooks import after_each_cell
from widgets.model import versions_text

log = logging.getLogger(__name__)

#: Short names of abort rules (the widget's "why" panel uses the same words).
RULE_WORDS = {
    "R1": "outdated read", "R2": "version taken", "R3": "lost update", "timeout": "wait timed out",
    "deadlock": "dependency cycle", "conflict": "conflicting commit", "exposed_read": "returned result changed",
    "crashed": "crashed", "rollback": "rolled back", "interrupt": "interrupted", "error": "failed statement",
    "global_log": "foreign global version", "voided": "plan voided",
}

_PENDING: "weakref.WeakSet[LiveOutput]" = weakref.WeakSet()  # outputs whose final state waits to be resent
_COUNT = 0
_COUNT_LOCK = threading.Lock()


def _new_id(kind: str) -> str:
    global _COUNT
    with _COUNT_LOCK:
        _COUNT += 1
        return f"lv-{kind}-{id(_PENDING):x}-{_COUNT}"


class LiveOutput:
    """One output (text and HTML from ``render``) that is redrawn when :meth:`changed` is called."""

    def __init__(self, render: Callable[[], tuple[str, str]], kind: str) -> None:
        self._render = render
        self.display_id = _new_id(kind)
        self._dirty = False
        self._lock = threading.Lock()

    def bundle(self) -> dict[str, str]:
        text, markup = self._render()
        return {"text/plain": text, "text/html": markup}

    def show(self) -> None:
        from IPython.display import display

        display(self.bundle(), raw=True, display_id=self.display_id)

    def changed(self) -> None:
        """The state changed (any thread): update the output now and again from the next cell."""
        with self._lock:
            self._dirty = True
        _PENDING.add(self)
        after_each_cell(resend_pending)
        if threading.current_thread() is threading.main_thread():
            self.resend()
            return
        self._send()

    def resend(self) -> None:
        """Send the current state if it changed since the last resend (from a cell's own thread)."""
        with self._lock:
            dirty, self._dirty = self._dirty, False
        if dirty:
            self._send()
        _PENDING.discard(self)

    def _send(self) -> None:
        try:
            from IPython.display import update_display

            update_display(self.bundle(), raw=True, display_id=self.display_id)
        except Exception:  # never break a cell or a commit thread over an output
            log.exception("updating an output failed")


def resend_pending(*_args: Any) -> None:
    """IPython ``post_execute`` hook: send outputs that changed while no cell of theirs ran."""
    for out in list(_PENDING):
        out.resend()



# ------------------------------------------------------------------------------ commit outcomes
def outcome_line(label: str, fut: Future, names_in: Callable[[str], str] = lambda s: s) -> tuple[str, str]:
    """What a finished commit came to, as (kind, one line): kind is "committed", "aborted" or
    "failed"; an abort names its rule and says why (a timed-out wait says so)."""
    err = fut.exception()
    if err is None:
        res = fut.result()
        return "committed", f"{label} committed: {versions_text(res.versions, 'read-only, nothing written')}"
    if isinstance(err, TransactionAborted):
        reason = names_in(err.reason.strip().splitlines()[0] if err.reason.strip() else "")
        if err.rule == "timeout":
            return "aborted", f"{label} aborted: its wait timed out, nothing changed ({reason})"
        words = RULE_WORDS.get(err.rule)
        rule = f"{err.rule}: {words}" if words and words != err.rule else err.rule
        return "aborted", f"{label} aborted ({rule}), nothing changed: {reason}"
    first = str(err).strip().splitlines()
    return "failed", f"{label} failed: {names_in(first[0]) if first else type(err).__name__}"


_COLOURS = {"committed": "#2e7d32", "aborted": "#c62828", "failed": "#c62828", "waiting": "#8a6d00"}


def background_commit(label: str, note: str, fut: Future, names_in: Callable[[str], str] = lambda s: s,
                      *, show: bool = True) -> LiveOutput:
    """The output of a commit that continues in the background: "waiting for ..." until it ends, then
    its outcome (shown under the cell that asked for the commit)."""
    state: dict[str, Any] = {"kind": "waiting", "line": f"{label}: {note}; the commit continues in the background "
                                                        "(this line shows how it ends; %lv status)"}

    def render() -> tuple[str, str]:
        kind, line = state["kind"], state["line"]
        return line, (f"<div class='lv-outcome lv-outcome-{kind}' data-outcome='{kind}' "
                      f"style='color:{_COLOURS[kind]}'>{html.escape(line)}</div>")

    out = LiveOutput(render, "commit")

    def done(f: Future) -> None:
        kind, line = outcome_line(label, f, names_in)
        state["kind"], state["line"] = kind, f"{line} (after {note})"  # "after waiting for t1 at kv@3"
        out.changed()

    if show:
        out.show()
    fut.add_done_callback(done)
    return out


# ------------------------------------------------------------------------------ statement lines
class LiveTranscript:
    """The statement lines of a transaction that is still open (or commits in the background) when its
    cell ends: if it then rolls back or aborts, the lines are struck through and marked "rolled back"."""

    def __init__(self, items: list[Any], txn: Any) -> None:
        self.items = list(items)
        self.ended: str | None = None  # "rolled back" once the transaction ended without committing
        self.output = LiveOutput(self._render, "lines")
        self._shown = False
        txn.events.subscribe(self._on, replay=True)  # replay: it may have ended already

    def _on(self, e: ev.Event) -> None:
        if isinstance(e, ev.Aborted) and self.ended is None:
            asked = e.rule in ("rollback", "interrupt", "error")
            self.ended = "rolled back" if asked else f"rolled back: aborted ({e.rule})"
            if self._shown:
                self.output.changed()

    def _render(self) -> tuple[str, str]:
        texts, parts = [], []
        cls = " lv-rolled-back" if self.ended else ""
        for item in self.items:
            if isinstance(item, str):
                texts.append(f"{item}  ({self.ended})" if self.ended else item)
                line = html.escape(item)
                if self.ended:
                    line = f"<s>{line}</s> <i>{html.escape(self.ended)}</i>"
                parts.append(f"<div class='lv-line{cls}'>{line}</div>")
            else:
                texts.append(repr(item) + (f"  ({self.ended})" if self.ended else ""))
                inner = item._repr_html_() if hasattr(item, "_repr_html_") else \
                    f"<pre>{html.escape(repr(item))}</pre>"
                note = f"<div class='lv-note'><i>{html.escape(self.ended)}</i></div>" if self.ended else ""
                style = " style='opacity:.6'" if self.ended else ""
                parts.append(f"<div class='lv-item{cls}'{style}>{inner}{note}</div>")
        return "\n".join(texts), f"<div class='lv-lines'>{''.join(parts)}</div>"

    def show(self) -> None:
        if self.items:
            self._shown = True
            self.output.show()


__all__ = ["LiveOutput", "LiveTranscript", "RULE_WORDS", "background_commit", "outcome_line", "resend_pending"]
