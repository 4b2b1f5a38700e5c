"""Browser tier, the editor: SQL highlighting of ``%%lvtxn`` / ``%%lvsql`` cell bodies (the prebuilt
JupyterLab extension in ``lv_magic/labextensions``, loaded by the test server) and Tab completion of
table names in JupyterLab's completer popup (the kernel-side matcher in ``lv_magic.complete``).

Real JupyterLab and headless Chromium (fixtures in conftest.py); the notebook is
``notebooks/editor_sql.ipynb``, no Spark. Screenshots land in ``test-artifacts/browser/editor-*.png``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

WAIT_MS = 30_000  # generous: 2 shared cores
NOTEBOOK = "editor_sql.ipynb"
SQL_CELL, PY_CELL, EMPTY_SQL_CELL, LVSQL_CELL = 1, 2, 3, 4

# How the editor of cell ``index`` shows each word: the computed style of the element holding the
# word's text (a highlighted token's span, or the line itself for an unstyled name), compared with
# JupyterLab's CodeMirror theme colours (its CSS variables resolved on a probe element).
_STYLES = """([index, words]) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[index];
  const editor = cell && cell.querySelector('.cm-editor');
  if (!editor) return null;
  const probe = document.createElement('span');
  document.body.appendChild(probe);
  const resolve = (name) => {
    probe.style.color = `var(--jp-mirror-editor-${name}-color)`;
    return getComputedStyle(probe).color;
  };
  const theme = {keyword: resolve('keyword'), comment: resolve('comment'), variable: resolve('variable')};
  probe.remove();
  const out = {};
  for (const word of words) {
    const walk = document.createTreeWalker(editor.querySelector('.cm-content'), NodeFilter.SHOW_TEXT);
    const re = new RegExp(`(^|[^\\\\w-])${word.replace(/[-]/g, '\\\\$&')}($|[^\\\\w])`);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!re.test(n.textContent)) continue;
      const el = n.parentElement, style = getComputedStyle(el);
      out[word] = {color: style.color, weight: style.fontWeight, token: !el.classList.contains('cm-line'),
                   keyword: style.color === theme.keyword, comment: style.color === theme.comment};
      break;
    }
  }
  return {theme, words: out, sqlCell: editor.classList.contains('lv-sql-cell')};
}"""

# True once every word in ``words`` of cell ``index`` is (``want`` = true) or is not a keyword.
_KEYWORDS_ARE = "([index, words, want]) => { const s = (" + _STYLES + """)([index, words]);
  return !!s && words.every(w => s.words[w] && s.words[w].keyword === want);
}"""


def _styles(page: Any, index: int, words: list[str]) -> dict[str, Any]:
    return page.evaluate(_STYLES, [index, words])


def _wait_keywords(page: Any, index: int, words: list[str], want: bool) -> None:
    try:
        page.wait_for_function(_KEYWORDS_ARE, arg=[index, words, want], timeout=WAIT_MS, polling=100)
    except Exception as e:  # say what the editor shows instead
        raise AssertionError(f"cell {index}: {words} keyword={want}? {_styles(page, index, words)}") from e


def test_sql_magic_cells_are_highlighted_as_sql(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook(NOTEBOOK)
    page = nb.page
    cells = page.locator(".jp-Notebook .jp-Cell")
    words = ["SELECT", "FROM", "UPDATE", "SET", "WHERE"]
    # The %%lvtxn cell's body: SQL keywords in the theme's keyword colour (bold), its "--" a comment.
    _wait_keywords(page, SQL_CELL, words, True)
    sql = _styles(page, SQL_CELL, [*words, "one more", "--name", "acct"])
    assert sql["sqlCell"], sql
    for w in words:
        assert sql["words"][w]["token"] and int(sql["words"][w]["weight"]) >= 600, sql
    assert sql["words"]["one more"]["comment"], sql  # "-- one more": a SQL comment (in Python: operators)
    assert not sql["words"]["--name"]["comment"], sql  # the magic's line is not SQL
    assert not sql["words"]["acct"]["keyword"], sql
    nb.screenshot("editor-1-sql-cell", cells.nth(SQL_CELL))
    # The same words in a Python cell: plain names.
    py = _styles(page, PY_CELL, ["SELECT", "UPDATE", "WHERE"])
    assert not py["sqlCell"], py
    for w in ("SELECT", "UPDATE", "WHERE"):
        assert not py["words"][w]["keyword"], py
    nb.screenshot("editor-1-python-cell", cells.nth(PY_CELL))
    _wait_keywords(page, LVSQL_CELL, ["DELETE", "FROM", "WHERE"], True)  # %%lvsql too
    # Editing the first line switches: "#%%lvtxn" is a Python comment line, the body Python again.
    first = cells.nth(SQL_CELL).locator(".cm-line").first
    first.click()
    page.keyboard.press("Control+Home")
    page.keyboard.type("#")
    assert nb.source(SQL_CELL).startswith("#%%lvtxn"), nb.source(SQL_CELL)
    _wait_keywords(page, SQL_CELL, ["SELECT", "UPDATE", "WHERE"], False)
    expect(cells.nth(SQL_CELL).locator(".cm-editor")).not_to_have_class(re.compile(r"\blv-sql-cell\b"))
    assert not _styles(page, SQL_CELL, ["one more"])["words"]["one more"]["comment"]
    nb.screenshot("editor-1-first-line-edited", cells.nth(SQL_CELL))
    page.keyboard.press("Backspace")  # "%%lvtxn" again: SQL again
    _wait_keywords(page, SQL_CELL, words, True)
    assert nb.source(SQL_CELL).startswith("%%lvtxn --name T1\n")
    page.keyboard.press("Escape")


def test_tab_completes_table_names_in_a_sql_cell(notebook: Any) -> None:
    from playwright.sync_api import expect

    nb = notebook(NOTEBOOK)
    page = nb.page
    nb.run_cell(0)  # the warehouse (acct, acct_b, orders) and `%lv connect`
    nb.wait_cells_done([0], timeout_s=60)
    assert nb.errors() == [], nb.errors()
    cell = page.locator(".jp-Notebook .jp-Cell").nth(EMPTY_SQL_CELL)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+End")  # the empty line under "%%lvtxn --name Q"
    page.keyboard.type("SELECT * FROM ac")
    page.keyboard.press("Tab")
    popup = page.locator(".jp-Completer")
    expect(popup).to_be_visible(timeout=WAIT_MS)
    items = popup.locator(".jp-Completer-item")
    expect(items.first).to_be_visible()
    labels = [t.strip() for t in items.locator(".jp-Completer-match").all_inner_texts()]
    assert "acct" in labels and "acct_b" in labels, labels
    assert "orders" not in labels, labels
    nb.screenshot("editor-2-completer", popup)
    nb.screenshot("editor-2-completer-page")
    items.filter(has_text="acct_b").first.click()
    expect(popup).to_be_hidden(timeout=WAIT_MS)
    assert nb.source(EMPTY_SQL_CELL) == "%%lvtxn --name Q\nSELECT * FROM acct_b", nb.source(EMPTY_SQL_CELL)
