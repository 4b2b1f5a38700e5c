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
SUMMARY_KEY = "lakevilla"  # output metadata: {"lakevilla": {"summary": {...}}}


def run(notebook: Path, out_dir: Path, workdir: Path, *, timeout: int = 600,
        env: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """Execute ``notebook``; write ``<out_dir>/<name>.ipynb`` and ``.html``; return the executed notebook.

    ``env``: the kernel's whole environment (default: this process's).
    """
    nb = nbformat.read(notebook, as_version=4)
    workdir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}},
                            store_widget_state=True)
    try:
        client.execute(**({} if env is None else {"env": env}))
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
    """The machine-readable summary of a tutorial: the ``lakevilla.summary`` metadata of the last output
    that carries one (tutorials show a sentence and keep the numbers out of sight there); an older
    notebook's printed ``LV-SUMMARY {json}`` line is still read."""
    for cell in reversed(nb.cells):
        for out in reversed(cell.get("outputs", [])):
            found = (out.get("metadata") or {}).get(SUMMARY_KEY, {}).get("summary")
            if isinstance(found, dict):
                return dict(found)
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if line.startswith("LV-SUMMARY "):
                    return dict(json.loads(line[len("LV-SUMMARY "):]))
    return {}


if __name__ == "__main__":
    nb_path = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    run(nb_path, out, out / "work")
