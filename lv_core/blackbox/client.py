"""One list-append client process (started by :mod:`lv_core.blackbox.runner`)::

    python -m lv_core.blackbox.client WAREHOUSE SPEC_JSON CLIENT INCARNATION OUT START_SEQ [STORAGE_OPTIONS_JSON]

Store faults of the spec are injected here (every request this client makes); a clock skew comes
from ``LV_TEST_CLOCK_SKEW_S`` in its environment.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lv_core.blackbox.workload import Spec, run_client
from lv_core.lakehouse import Lakehouse
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.uri import open_store


def main(argv: list[str]) -> int:
    warehouse, spec_json, client, incarnation, out, start = argv[:6]
    options = json.loads(argv[6]) if len(argv) > 6 and argv[6] else None
    spec = Spec.from_json(spec_json)
    store = open_store(warehouse, options)
    rate = spec.fault_rate + spec.lost_response_rate
    if rate or spec.latency_s:
        store = InstrumentedStore(store, latency=spec.latency_s or None, fault_rate=rate,
                                  fault_after_rate=spec.lost_response_rate / rate if rate else 0.0,
                                  seed=hash((spec.seed, int(client), int(incarnation))) & 0xFFFF_FFFF)
    lh = Lakehouse(store, lease_s=spec.lease_s)
    try:
        run_client(lh, spec, int(client), int(incarnation), Path(out), start_seq=int(start))
    finally:
        lh.close()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Every record is written and flushed, and the lakehouse is closed. Skip the interpreter's teardown:
    # pyarrow's thread pools can abort it ("terminate called without an active exception", exit -6,
    # apache/arrow#34314) after all work is done, which the runner would count as a crashed client.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
