"""Issue 21 before/after in one run: LakeVilla's cost per transaction next to plain Delta.

    python -m benchmarks.protocol_speed --base /path/to/old/checkout [--rounds 2] [--ops 120] [--only ycsb]

The harness of :mod:`benchmarks.immutable_log` (child processes per source tree, interleaved round by
round, a store with 20 ms per request): YCSB A with 1 and 8 client processes for ``delta``, LV[R] and
``serializable`` (throughput, aborts, requests per operation) and a sequential mix per preset (exact
requests per transaction, commit latency). Writes ``benchmarks/results/protocol_speed.json`` and
``.png`` and prints, per tree, LV[R] and ``serializable`` throughput as a ratio of plain ``delta``'s
measured in the same run, and their requests per operation as a ratio of ``delta``'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import immutable_log

HERE = Path(__file__).resolve().parents[1]
OUT = HERE / "benchmarks" / "results" / "protocol_speed.json"


def versus_delta(summary: dict[str, Any]) -> dict[str, Any]:
    """Per tree and client count: LV[R] and serializable ops/s and requests/op over delta's."""
    out: dict[str, Any] = {}
    for c in (1, 8):
        d = summary["ycsb"][f"delta, {c} client(s)"]
        for system in ("LV[R]", "serializable"):
            s = summary["ycsb"][f"{system}, {c} client(s)"]
            for tree in ("before", "after"):
                out[f"{system} / delta, {c} client(s), {tree}"] = {
                    "ops_s": immutable_log._ratio(s[tree]["ops_s"], d[tree]["ops_s"]),
                    "requests_per_op": immutable_log._ratio(s[tree]["requests_per_op"], d[tree]["requests_per_op"]),
                }
    return out


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--out" not in argv:
        argv += ["--out", str(OUT)]
    immutable_log.main(argv)
    out = Path(argv[argv.index("--out") + 1])
    data = json.loads(out.read_text())
    data["versus_delta"] = versus_delta(data["summary"])
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["versus_delta"], indent=1))


if __name__ == "__main__":
    main()
