"""Execute a tutorial notebook headless (nbclient) and write the executed copy and an HTML page.

Used by `make demo` and by the notebook test tier. The notebook runs with its working directory set
to ``workdir`` (so `%lv connect` without arguments creates ./lakehouse there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def run(notebook: Path, out_dir: Path, workdir: Path, *, timeout: int = 600) -> nbformat.NotebookNode:
    """Execute ``notebook``; write ``<out_dir>/<name>.ipynb`` and ``.html``; return the executed notebook."""
    nb = nbformat.read(notebook, as_version=4)
    workdir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}},
                            store_widget_state=True)
    try:
        client.execute()
    finally:
        nbformat.write(nb, out_dir / notebook.name)
        write_html(nb, out_dir / (notebook.stem + ".html"))
    return nb


def write_html(nb: nbformat.NotebookNode, path: Path) -> None:
    """An HTML copy; widget views become the static HTML of their final state."""
    import copy

    from nbconvert import HTMLExporter

    nb = copy.deepcopy(nb)
    try:
        from widgets.nbstatic import make_static

        make_static(nb)  # in place
    except Exception:  # the HTML copy is a convenience
        pass
    body, _ = HTMLExporter().from_notebook_node(nb)
    path.write_text(body)


def summary_of(nb: nbformat.NotebookNode) -> dict:
    """The ``LV-SUMMARY {json}`` line a tutorial prints in its last cell, if any."""
    for cell in reversed(nb.cells):
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if line.startswith("LV-SUMMARY "):
                    return json.loads(line[len("LV-SUMMARY "):])
    return {}


if __name__ == "__main__":
    nb_path = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    run(nb_path, out, out / "work")
