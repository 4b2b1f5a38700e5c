"""Where LakeVilla keeps its own objects in a warehouse: outside the tables' folders, except the
Spark engine's short-lived staging folder.

```
<warehouse>/
  <table>/_delta_log/<v:020d>.json            Delta commits, each written once (put-if-absent), never changed
  <table>/<data files>                         data files, named part-<txn>-<step>-<attempt>-<n>.parquet,
                                               or Spark's own names inside one folder per write,
                                               part-<txn>-<step>-<attempt>-s<id>/ (lv_core.engine.spark_io)
  <table>/_lv_staging/                         Spark's change data output before it gets its names
                                               (deleted after each write)
  _lakevilla/markers/<table>/<v:020d>.json     marker reserving Delta version v of <table> (mutable)
  _lakevilla/txns/<txn>/lease.json             heartbeat: owner, expiry (overwritten by the owner)
  _lakevilla/txns/<txn>/sublog/<step:06d>.json one sublog entry per operation (a redo overwrites it)
  _lakevilla/txns/<txn>/decision.json          commit decision of a multi-table commit
  _lakevilla/txns/<txn>/edges.json             LV[CT]: its outgoing DAG edges and the markers it holds
                                               (overwritten by the owner when it learns an edge)
  _lakevilla/gvl/<n:020d>.json                 global version log (lv_core.protocol.gvl)
  _lakevilla/validation.lock                   validation key (lv_core.protocol.vlock)
```
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid

LV_ROOT = "_lakevilla"
TXNS = f"{LV_ROOT}/txns/"


def new_txn_id() -> str:
    """A transaction id unique across processes and machines: UTC time + 64 random bits."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:16]


def short_id(txn_id: str) -> str:
    """A transaction id as people read it, the one short form everywhere (messages, ``%lv``, widgets):
    the first 8 characters of its random part."""
    tail = txn_id.rsplit("-", 1)[-1]
    return (tail or txn_id)[:8]


#: A full transaction id (:func:`new_txn_id`) inside a text.
TXN_ID_RE = re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{16}\b")


def display_name(txn_id: str, name: str | None = None) -> str:
    """Another client's transaction as people read it: ``NAME (short-id)`` when its owner named it
    (the name its markers carry), else the short id."""
    return f"{name} ({short_id(txn_id)})" if name else short_id(txn_id)


def client_label() -> str:
    """Host and pid of this client, for humans reading markers (no secrets)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def txn_prefix(txn: str) -> str:
    return f"{TXNS}{txn}/"


def lease_key(txn: str) -> str:
    return f"{TXNS}{txn}/lease.json"


def sublog_prefix(txn: str) -> str:
    return f"{TXNS}{txn}/sublog/"


def sublog_key(txn: str, step: int) -> str:
    return f"{TXNS}{txn}/sublog/{step:06d}.json"


def decision_key(txn: str) -> str:
    return f"{TXNS}{txn}/decision.json"


def edges_key(txn: str) -> str:
    """Where a transaction exposes its outgoing dependency edges (rule II, :mod:`lv_core.protocol.edges`)."""
    return f"{TXNS}{txn}/edges.json"


def commit_key(table: str, version: int) -> str:
    return f"{table}/_delta_log/{version:020d}.json"


MARKERS = f"{LV_ROOT}/markers/"


def marker_key(table: str, version: int) -> str:
    """Where the marker reserving ``table``'s Delta version ``version`` lives (outside ``_delta_log``)."""
    return f"{MARKERS}{table}/{version:020d}.json"


def markers_prefix(table: str) -> str:
    return f"{MARKERS}{table}/"


_TXN_IN_NAME = re.compile(r"(?:^|/)part-(\d{8}T\d{6}-[0-9a-f]{16})-")


def writer_of(path: str) -> str | None:
    """The transaction whose name a data path carries (``part-<txn>-...``, or inside a write folder
    ``part-<txn>-...-s<id>/``), None for other names."""
    m = _TXN_IN_NAME.search(path)
    return m.group(1) if m is not None else None
