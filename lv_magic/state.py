"""Per-kernel state of the magics: the connection and the open (named) transactions."""

from __future__ import annotations

import atexit
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lv_core import events as ev
from lv_core.errors import LvError
from lv_core.protocol.layout import (
    TXN_ID_RE,
    display_name,
    short_id,  # noqa: F401  (re-exported: the one short form)
)
from lv_core.protocol.markers import name_of


class NotConnected(LvError):
    """No %lv connect yet."""


@dataclass
class OpenTxn:
    txn: Any
    future: Future | None = None  # a commit running in the background
    widget: Any = None


@dataclass
class KernelState:
    lh: Any = None
    txns: dict[str, OpenTxn] = field(default_factory=dict)
    sql_txn: str | None = None  # the name of the transaction a SQL BEGIN opened (%%lvsql), while open
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _names: dict[str, str] = field(default_factory=dict)  # transaction id -> the name it was shown under

    def label(self, txn: Any) -> str:
        """How to name a transaction (or an id) to the user: this kernel's name for it, else another
        client's ``NAME (short-id)`` (the name its markers carry), else the short id."""
        txn_id = txn if isinstance(txn, str) else txn.id
        name = self._names.get(txn_id) or (None if isinstance(txn, str) else txn.name)
        return name or display_name(txn_id, name_of(txn_id))

    def names_in(self, text: str) -> str:
        """``text`` with every transaction id replaced by its label (:meth:`label`)."""
        for txn_id, name in list(self._names.items()):
            text = text.replace(txn_id, name)
        return TXN_ID_RE.sub(lambda m: self.label(m.group(0)), text)

    def remember(self, name: str, txn: Any) -> None:
        self._names[txn.id] = name

    def require(self) -> Any:
        if self.lh is None:
            raise NotConnected("not connected: run `%lv connect` first (no argument: the embedded default)")
        return self.lh

    def add(self, name: str, txn: Any, widget: Any = None) -> OpenTxn:
        with self._lock:
            if name in self.txns and self.txns[name].txn.state in ("active", "committing"):
                raise LvError(f"a transaction named {name!r} is already open: commit or roll it back first")
            ot = OpenTxn(txn, widget=widget)
            self.txns[name] = ot
            self._names[txn.id] = name
            return ot

    def get(self, name: str) -> OpenTxn:
        ot = self.txns.get(name)
        if ot is None:
            known = ", ".join(self.txns) or "none"
            raise LvError(f"no open transaction named {name!r} (open: {known}); start one with %lv begin {name}")
        return ot

    def shutdown(self) -> None:
        """Roll back what is still open (called at kernel exit); markers of anything missed expire by lease."""
        for ot in list(self.txns.values()):
            if ot.txn.state == "active":
                try:
                    ot.txn.rollback()
                except Exception:  # best effort at exit
                    pass


def commit_in_background(txn: Any, wait_s: float = 0.5) -> tuple[Future, str | None]:
    """Start the commit; return at once if it has to wait for another transaction.

    Returns (future, waiting_note): ``waiting_note`` is None if the commit finished within the call.
    """
    waiting = threading.Event()
    note: list[str] = []

    def watch(e: ev.Event) -> None:
        if isinstance(e, ev.Waiting):
            note.append(f"waiting for {e.on_txn} at {e.table}@{e.version}")
            waiting.set()
        elif isinstance(e, (ev.Committed, ev.Aborted)):
            waiting.set()

    unsubscribe = txn.events.subscribe(watch, replay=False)
    fut = txn.commit_async()
    fut.add_done_callback(lambda _f: waiting.set())
    waiting.wait()
    unsubscribe()
    if fut.done():
        return fut, None
    try:  # a short wait may already resolve
        fut.exception(timeout=wait_s)
        return fut, None
    except TimeoutError:
        return fut, note[0] if note else "waiting for another transaction"


STATE = KernelState()
atexit.register(STATE.shutdown)
