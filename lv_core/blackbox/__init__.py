"""Black-box isolation checking, after Jepsen's Elle list-append workload.

Clients record what each transaction read and appended (:mod:`.history`); :func:`check` infers the
dependencies between transactions from those values alone and reports anomalies (:mod:`.checker`).
"""

from __future__ import annotations

from lv_core.blackbox.checker import ALWAYS_FORBIDDEN, KINDS, LEVELS, Anomaly, Edge, Report, check
from lv_core.blackbox.history import HistoryError, MicroOp, OpKind, Outcome, Txn, dump_history, load_history

__all__ = ["ALWAYS_FORBIDDEN", "KINDS", "LEVELS", "Anomaly", "Edge", "HistoryError", "MicroOp", "OpKind",
           "Outcome", "Report", "Txn", "check", "dump_history", "load_history"]
