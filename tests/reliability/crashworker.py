"""A client for crash tests: one transfer ``kv[1] -= 1, kv2[1] += 1`` in one transaction.

    python -m tests.reliability.crashworker WAREHOUSE LEASE PRESET [FEATURES]

Run with ``LV_TEST_PAUSE_AT=<point>`` it prints ``LV-PAUSED <point>`` and blocks there, so the test
can SIGKILL it at that protocol step. FEATURES is e.g. ``R`` (empty: the preset's own).
"""

from __future__ import annotations

import json
import sys

import lv_core
from tests.helpers.bank import add_kv


def main(argv: list[str]) -> None:
    wh, lease, preset = argv[0], float(argv[1]), argv[2]
    features = set(argv[3].split(",")) if len(argv) > 3 and argv[3] else None
    lh = lv_core.connect(wh, lease_s=lease)
    txn = lh.begin(preset, features=features, timeout_s=60)
    add_kv(txn, "kv", 1, -1)
    add_kv(txn, "kv2", 1, +1)
    res = txn.commit()
    print(json.dumps({"versions": res.versions}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
