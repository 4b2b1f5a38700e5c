"""A client for crash tests: one transfer ``kv[1] -= 1, kv2[1] += 1`` in one transaction.

    python -m tests.reliability.crashworker WAREHOUSE LEASE PRESET [FEATURES] [warm]

Run with ``LV_TEST_PAUSE_AT=<point>`` it prints ``LV-PAUSED <point>`` and blocks there, so the test
can SIGKILL it at that protocol step. FEATURES is e.g. ``R`` (empty: the preset's own). ``warm``: a
transaction adding 0 to both rows commits first (not paused), so this client released the validation
lock last and the transfer takes it with its plan in one request (the fast path of LV[I]).
"""

from __future__ import annotations

import json
import os
import sys

import lv_core
from tests.helpers.bank import add_kv


def main(argv: list[str]) -> None:
    wh, lease, preset = argv[0], float(argv[1]), argv[2]
    features = set(argv[3].split(",")) if len(argv) > 3 and argv[3] else None
    lh = lv_core.connect(wh, lease_s=lease)
    if len(argv) > 4 and argv[4] == "warm":
        point = os.environ.pop("LV_TEST_PAUSE_AT", None)
        warm = lh.begin(preset, features=features, timeout_s=60)
        add_kv(warm, "kv", 1, 0)
        add_kv(warm, "kv2", 1, 0)
        warm.commit()
        if point is not None:
            os.environ["LV_TEST_PAUSE_AT"] = point
    txn = lh.begin(preset, features=features, timeout_s=60)
    add_kv(txn, "kv", 1, -1)
    add_kv(txn, "kv2", 1, +1)
    res = txn.commit()
    print(json.dumps({"versions": res.versions}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
