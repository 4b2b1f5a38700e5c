"""Static HTML for notebooks converted without a widget frontend (nbconvert).

Our widgets put ``text/html`` (and ``text/plain``) next to the widget view in their display bundle,
and nbconvert's HTML exporter falls back to it when the notebook holds no saved widget state: that
shows each widget as it was when displayed. An executed notebook (``nbclient`` saves widget state
by default) would instead show the widget views through a widget manager loaded from a CDN.
:func:`make_static` replaces every widget view by static HTML rebuilt from the saved state (the
widgets' *final* state, e.g. a transaction that committed after its cell ran), else by the bundled
``text/html``, and drops the saved state when no widget view is left:

    jupyter nbconvert --to html --HTMLExporter.preprocessors='["widgets.nbstatic.StaticWidgetsPreprocessor"]' NB
"""

from __future__ import annotations

import html
import re
from typing import Any, Mapping

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SAVED_KEY = "lv_inspector_saved"  # output metadata of a widget's static copy (widgets.inspector)
_SAVED_STYLE = re.compile(r"<style data-lv-saved-style>.*?</style>", re.S)
_BOXES = {"VBoxModel": "column", "HBoxModel": "row", "BoxModel": "row"}

try:  # nbconvert is only needed for the preprocessor class
    from nbconvert.preprocessors import Preprocessor as _Base
except ImportError:  # pragma: no cover - the function below still works
    _Base = object  # type: ignore[assignment,misc]


def widget_html(model_id: str, states: Mapping[str, Any], _depth: int = 0) -> str | None:
    """Static HTML of a saved widget (HTML/Label widgets inside boxes; buttons dropped), or None."""
    model = states.get(model_id)
    if not isinstance(model, Mapping) or _depth > 20:
        return None
    st = model.get("state") or {}
    name = model.get("model_name", "")
    classes = " ".join(html.escape(str(c)) for c in st.get("_dom_classes") or ())
    if name in ("HTMLModel", "HTMLMathModel"):
        inner = str(st.get("value") or "")
    elif name == "LabelModel":
        inner = html.escape(str(st.get("value") or ""))
    elif name in _BOXES:
        parts = []
        for ref in st.get("children") or ():
            child = widget_html(str(ref).removeprefix("IPY_MODEL_"), states, _depth + 1)
            if child:
                parts.append(child)
        style = f"display:flex;flex-direction:{_BOXES[name]};gap:4px"
        return f'<div class="{classes}" style="{style}">{"".join(parts)}</div>'
    elif name == "ButtonModel":
        return ""  # nothing to press in a static page
    else:
        return None
    return f'<div class="{classes}">{inner}</div>'


def _drop_saved_twins(cell: Any) -> int:
    """Drop the widget views that display their own static copy (the lakehouse inspector: an output with
    ``metadata[SAVED_KEY]`` = the widget's model id, updated as the widget changed), and the copy's
    style that switches between the two in a browser; returns how many views were dropped."""
    outputs = cell.get("outputs") or []
    twins = {str((o.get("metadata") or {}).get(SAVED_KEY)) for o in outputs if (o.get("metadata") or {}).get(SAVED_KEY)}
    if not twins:
        return 0
    keep = []
    for out in outputs:
        view = (out.get("data") or {}).get(WIDGET_VIEW)
        if view is not None and str(view.get("model_id", "")) in twins:
            continue
        if (out.get("metadata") or {}).get(SAVED_KEY) and "text/html" in (out.get("data") or {}):
            body = out["data"]["text/html"]
            body = "".join(body) if isinstance(body, list) else str(body)
            out["data"]["text/html"] = _SAVED_STYLE.sub("", body)
        keep.append(out)
    dropped = len(outputs) - len(keep)
    cell["outputs"] = keep
    return dropped


def make_static(nb: Any) -> int:
    """Replace widget views in ``nb`` (an nbformat notebook, modified in place); returns how many."""
    saved = ((nb.get("metadata") or {}).get("widgets") or {}).get(WIDGET_STATE) or {}
    states = saved.get("state") or {}
    done = left = 0
    for cell in nb.get("cells", ()):
        done += _drop_saved_twins(cell)
        for out in cell.get("outputs", ()) or ():
            data = out.get("data")
            if not data or WIDGET_VIEW not in data:
                continue
            model_id = str((data[WIDGET_VIEW] or {}).get("model_id", ""))
            static = widget_html(model_id, states) if states else None
            if static is None:
                static = data.get("text/html")
            if static is None:
                left += 1
                continue
            data["text/html"] = static
            del data[WIDGET_VIEW]
            done += 1
    if done and not left and states:
        widgets_meta = nb["metadata"]["widgets"]
        del widgets_meta[WIDGET_STATE]  # no widget left: no widget manager (from a CDN) needed
        if not widgets_meta:
            del nb["metadata"]["widgets"]
    return done


class StaticWidgetsPreprocessor(_Base):
    """nbconvert preprocessor running :func:`make_static`."""

    def preprocess(self, nb: Any, resources: Any) -> tuple[Any, Any]:
        make_static(nb)
        return nb, resources


__all__ = ["StaticWidgetsPreprocessor", "make_static", "widget_html"]
