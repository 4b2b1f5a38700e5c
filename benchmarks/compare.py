"""Before/after in one run: the exact request counts of ``reqcount`` for two source trees.

    python -m benchmarks.compare --base /path/to/old/checkout [--out benchmarks/results/compare.json]

Each tree runs ``benchmarks.reqcount.run`` in its own subprocess (its own ``lv_core`` on
``PYTHONPATH``), one after the other in the same run; request counts are exact, so the two columns
differ only where the code differs. Prints a table per system and scenario (reads, writes, total)
and writes both raw results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SCENARIOS = ("read", "write")
K_SCENARIOS = ("read_k", "write_k", "contended_write_k")


def _run_tree(tree: Path, ks: str) -> dict[str, Any]:
    code = ("import json, sys; from benchmarks import reqcount; "
            f"print(json.dumps(reqcount.run(ks=tuple(int(k) for k in {ks!r}.split(',')))))")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rows(res: dict[str, Any]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for system, row in res["systems"].items():
        for scen in SCENARIOS:
            out[(system, scen)] = row[scen]["total"]
        for scen in K_SCENARIOS:
            for k, v in row.get(scen, {}).items():
                out[(system, f"{scen}[{k}]")] = v["total"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the 'before' source tree (a checkout or git worktree)")
    ap.add_argument("--head", default=str(HERE), help="the 'after' source tree (default: this one)")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--out", default=str(HERE / "benchmarks" / "results" / "compare_reqcount.json"))
    args = ap.parse_args(argv)
    before = _run_tree(Path(args.base).resolve(), args.ks)
    after = _run_tree(Path(args.head).resolve(), args.ks)
    b, a = _rows(before), _rows(after)
    print(f"{'system':<28} {'scenario':<22} {'before':>7} {'after':>7} {'diff':>6}")
    for key in sorted(set(b) | set(a)):
        x, y = b.get(key), a.get(key)
        diff = "" if x is None or y is None else f"{y - x:+d}"
        print(f"{key[0]:<28} {key[1]:<22} {x if x is not None else '-':>7} {y if y is not None else '-':>7} {diff:>6}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"base": args.base, "head": args.head, "before": before, "after": after},
                                         indent=1))


if __name__ == "__main__":
    main()
