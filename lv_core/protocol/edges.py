"""Rule II in one object per transaction: its outgoing dependency edges and the markers it holds.

A transaction that learns new edges (a table whose marker lands behind others', a marker shift)
overwrites ``_lakevilla/txns/<txn>/edges.json`` once (one PUT, whatever the number of tables it
holds); a transaction looking for cycles (rule III) reads the edges of each transaction it follows
there (one GET per transaction on the path). ``holds`` (table -> marker version) lets a reader drop
an edge that points at a marker the owner has since moved (a shift). Only the owner writes it; it
is deleted with the transaction's other objects after it ends (`lv recover` removes leftovers).

Markers written before this object existed carried the edges themselves (``predecessors``): a
reader still takes them into account.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lv_core.errors import LvError
from lv_core.protocol.dag import Edge, edges_from_json
from lv_core.protocol.layout import edges_key
from lv_core.storage.base import ObjectStore

__all__ = ["TxnEdges", "read_edges", "write_edges"]


@dataclass(frozen=True)
class TxnEdges:
    """What a transaction's edges object says."""

    txn: str
    edges: tuple[Edge, ...] = ()
    holds: Mapping[str, int] = field(default_factory=dict)  # table -> version of the marker it holds

    def from_marker(self, table: str, version: int) -> list[Edge]:
        """Its edges as seen from its marker at ``table@version``: none once it no longer holds that
        marker (it moved it in a shift), else all of them."""
        held = self.holds.get(table)
        return [] if held is not None and held != version else list(self.edges)


def encode_edges(txn: str, edges: Iterable[Edge], holds: Mapping[str, int]) -> bytes:
    return json.dumps({"kind": "edges", "txn": txn, "predecessors": [e.to_json() for e in edges],
                       "holds": dict(sorted(holds.items()))}).encode()


def write_edges(store: ObjectStore, txn: str, edges: Iterable[Edge], holds: Mapping[str, int]) -> None:
    """Overwrite ``txn``'s edges object (only its owner writes it)."""
    store.put(edges_key(txn), encode_edges(txn, edges, holds))


def decode_edges(txn: str, data: bytes) -> TxnEdges | None:
    """The edges object's content; None when malformed or another transaction's."""
    try:
        d: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(d, dict) or d.get("kind") != "edges" or d.get("txn") != txn:
        return None
    preds, holds = d.get("predecessors"), d.get("holds")
    if not isinstance(preds, list) or not isinstance(holds, dict):
        return None
    held = {t: v for t, v in holds.items() if isinstance(t, str) and isinstance(v, int) and not isinstance(v, bool)}
    return TxnEdges(txn, tuple(edges_from_json(txn, (p for p in preds if isinstance(p, dict)))), held)


def read_edges(store: ObjectStore, txn: str) -> TxnEdges | None:
    """``txn``'s edges (one GET); None when it exposed none (or ended) or the object is unreadable."""
    try:
        got = store.get(edges_key(txn))
    except LvError:  # NotFound included
        return None
    return decode_edges(txn, got.data)
