"""`make demo`: run the quickstart notebook headless against the embedded default and summarise."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_notebook import ROOT, run, summary_of

NOTEBOOK = ROOT / "notebooks" / "01_quickstart.ipynb"


def main() -> int:
    out = ROOT / "build"
    work = out / "demo"
    shutil.rmtree(work, ignore_errors=True)  # a fresh ./lakehouse each time
    t0 = time.monotonic()
    print(f"demo: executing {NOTEBOOK.relative_to(ROOT)} (starts a local Spark Connect server; ~1 min)")
    try:
        nb = run(NOTEBOOK, out, work)
    except Exception as e:  # report and fail
        print(f"demo: FAILED: {e}", file=sys.stderr)
        print(f"demo: the partially executed notebook is {out / NOTEBOOK.name}", file=sys.stderr)
        return 1
    s = summary_of(nb)
    print(f"demo: done in {time.monotonic() - t0:.0f}s")
    for key, value in s.items():
        if key != "lakehouse":
            print(f"  {key}: {value}")
    print(f"  executed notebook: {out / NOTEBOOK.name}")
    print(f"  HTML copy:         {out / (NOTEBOOK.stem + '.html')}")
    lakehouse = s.get("lakehouse", "?")  # the notebook works in a fresh temporary folder
    print(f"  the lakehouse:     {lakehouse}  (plain Delta tables: open them with deltalake)")
    print("  more: `make lab` opens JupyterLab on notebooks/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
