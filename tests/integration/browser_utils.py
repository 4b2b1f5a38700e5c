"""A real JupyterLab server and headless Chromium for the browser tier (shared/design/BROWSER_TESTING.md).

- :class:`LabServer`: ``jupyter lab`` in its own process group, with fresh config/runtime/settings/
  workspace/data dirs, a kernelspec pointing at this venv's Python (``PYTHONPATH`` = the repo, so
  ``import lv_core, widgets`` works in the kernel), news and notebook windowing turned off, and the
  repo's prebuilt JupyterLab extension (``lv_magic/labextensions``: SQL highlighting of the magics'
  cells) loaded first, so the tests see the committed build whether or not it is installed.
- :func:`launch_chromium`: Debian's chromium through Playwright (``executable_path``), every request
  not to 127.0.0.1 aborted (hermetic).
- :class:`NotebookPage`: open a notebook, wait for the *kernel* to be idle (not the page), run cells
  without awaiting them, read execution counts and errors, keep screenshots.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]
LABEXTENSIONS = REPO / "lv_magic" / "labextensions"
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
KERNEL_DISPLAY_NAME = "Python 3 (ipykernel)"


def chromium_path() -> str | None:
    """Debian's chromium (``$LV_CHROMIUM`` overrides), or None when not installed."""
    env = os.environ.get("LV_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    return next((p for p in CHROMIUM_CANDIDATES if os.access(p, os.X_OK)), None)


def missing_requirements() -> str | None:
    """Why the browser tier cannot run here (None when it can)."""
    for mod in ("jupyterlab", "playwright", "ipywidgets", "ipykernel"):
        try:
            __import__(mod)
        except ImportError:
            return f"python package {mod} is not installed (pip install -e '.[test]')"
    if chromium_path() is None:
        return "chromium is not installed (apt-get install chromium; `make sysdeps` does it)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, body: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1))


class LabServer:
    """``jupyter lab`` serving ``root`` on a free loopback port, isolated under ``home``."""

    def __init__(self, root: Path, home: Path, *, log_path: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.root, self.home, self.extra_env = root, home, env or {}
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = log_path or home / "jupyter-lab.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, notebook: str, workspace: str | None = None) -> str:
        """The notebook in Lab; with ``workspace``, in that fresh workspace (nothing else restored)."""
        ws = f"workspaces/{workspace}/" if workspace else ""
        return f"{self.base}/lab/{ws}tree/{notebook}?reset&token={self.token}"

    def _prepare(self) -> dict[str, str]:
        dirs = {name: self.home / name for name in ("config", "runtime", "settings", "workspaces", "data", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # The kernel is this venv's Python with the repo importable.
        _write_json(dirs["data"] / "kernels" / "python3" / "kernel.json", {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": KERNEL_DISPLAY_NAME, "language": "python",
            "env": {"PYTHONPATH": str(REPO)}, "metadata": {"debugger": False}})
        settings = dirs["settings"]
        _write_json(settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings",
                    {"fetchNews": "false"})
        # Every cell in the DOM (no virtualised notebook): locators see widgets of all cells.
        _write_json(settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings",
                    {"windowingMode": "none"})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "AWS_"))}
        env.update({
            "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]), "IPYTHONDIR": str(dirs["ipython"]),
            "PYTHONPATH": str(REPO), "JUPYTER_PLATFORM_DIRS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        }, **self.extra_env)
        return env

    def start(self, timeout_s: float = 90.0) -> "LabServer":
        env = self._prepare()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               f"--LabApp.extra_labextensions_path={LABEXTENSIONS}"]
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout_s:g}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        """SIGINT twice (Jupyter asks for confirmation once), then kill what is left of our group."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for _ in range(2):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGINT)
                time.sleep(0.3)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # our own session: the server and its kernels
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


@contextlib.contextmanager
def lab_server(root: Path, home: Path, log_path: Path | None = None,
               env: dict[str, str] | None = None) -> Iterator[LabServer]:
    server = LabServer(root, home, log_path=log_path, env=env).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def launch_chromium(viewport: tuple[int, int] = (1400, 2200)) -> Iterator[Any]:
    """A hermetic browser context (requests to anything but 127.0.0.1 are aborted)."""
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise RuntimeError("chromium is not installed")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        blocked: list[str] = []

        def route(r: Any) -> None:
            if urlparse(r.request.url).hostname == "127.0.0.1":
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        context.blocked = blocked  # type: ignore[attr-defined]
        try:
            yield context
        finally:
            context.close()
            browser.close()


# ------------------------------------------------------------------------------ notebook page
# Every helper finds the notebook panel by its path (never "whatever is current").
_PANEL = """const panel = (path) => {
  if (!window.jupyterapp) return null;
  for (const w of window.jupyterapp.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.content.model) return w;
  }
  return null;
};"""
_KERNEL_IDLE = "(path) => {" + _PANEL + """
  const w = panel(path);
  if (!w || !w.sessionContext || !w.context.isReady) return false;
  const s = w.sessionContext.session, k = s && s.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""
_RUN = "([path, command, index]) => {" + _PANEL + """
  const w = panel(path);
  window.jupyterapp.shell.activateById(w.id);
  w.content.activeCellIndex = index;
  window.jupyterapp.commands.execute(command);  // not awaited: cells keep running while we look
  return true;
}"""
_DONE = "([path, indices]) => {" + _PANEL + """
  const w = panel(path);
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || k.status !== 'idle') return false;
  return indices.every(i => w.content.model.cells.get(i).executionCount != null);
}"""
_COUNTS = "(path) => {" + _PANEL + """
  const cells = panel(path).content.model.cells, out = [];
  for (let i = 0; i < cells.length; i++) {
    out.push(cells.get(i).type === 'code' ? cells.get(i).executionCount : null);
  }
  return out;
}"""
_ERRORS = "(path) => {" + _PANEL + """
  const cells = panel(path).content.model.cells, out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    for (let j = 0; j < c.outputs.length; j++) {
      const o = c.outputs.get(j).toJSON();
      if (o.output_type === 'error') out.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
      if (o.output_type === 'stream' && o.name === 'stderr') out.push(`cell ${i} stderr: ${o.text}`);
    }
  }
  return out;
}"""
_OUTPUTS = "([path, index]) => {" + _PANEL + """
  const outs = panel(path).content.model.cells.get(index).outputs, out = [];
  for (let j = 0; j < outs.length; j++) out.push(outs.get(j).toJSON());
  return out;
}"""
_SOURCE = "([path, index]) => {" + _PANEL + """
  return panel(path).content.model.cells.get(index).sharedModel.getSource();
}"""
_SAVE = "(path) => {" + _PANEL + """
  return panel(path).context.save().then(() => true);
}"""
_SHUTDOWN = "(path) => {" + _PANEL + """
  const w = panel(path);
  return w && w.sessionContext ? w.sessionContext.shutdown().then(() => true) : false;
}"""


class NotebookPage:
    """One notebook open in JupyterLab."""

    def __init__(self, context: Any, server: LabServer, notebook: str, artifacts: Path) -> None:
        self.server, self.notebook, self.artifacts = server, notebook, artifacts
        self.page = context.new_page()
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.shots: list[Path] = []

    def open(self, timeout_s: float = 90.0) -> "NotebookPage":
        """Load the notebook and wait until its kernel is connected and idle."""
        t0 = time.monotonic()
        workspace = f"lv-{Path(self.notebook).stem}-{secrets.token_hex(3)}"
        self.page.goto(self.server.url(self.notebook, workspace), wait_until="domcontentloaded",
                       timeout=timeout_s * 1000)
        self.wait_kernel_idle(timeout_s - (time.monotonic() - t0))
        self.opened_s = time.monotonic() - t0
        return self

    def wait_kernel_idle(self, timeout_s: float = 60.0) -> None:
        self.page.wait_for_function(_KERNEL_IDLE, arg=self.notebook, timeout=max(1.0, timeout_s) * 1000, polling=100)

    def run_all_above(self, index: int) -> None:
        """Run cells ``0 .. index-1`` (not awaited)."""
        self.page.evaluate(_RUN, [self.notebook, "notebook:run-all-above", index])

    def run_all(self) -> None:
        """Run every cell (not awaited)."""
        self.page.evaluate(_RUN, [self.notebook, "notebook:run-all-cells", 0])

    def run_cell(self, index: int) -> None:
        """Run cell ``index`` (not awaited, no re-run of any other cell)."""
        self.page.evaluate(_RUN, [self.notebook, "notebook:run-cell", index])

    def wait_cells_done(self, indices: list[int], timeout_s: float = 60.0) -> None:
        """Until every cell in ``indices`` has an execution count and the kernel is idle."""
        self.page.wait_for_function(_DONE, arg=[self.notebook, indices], timeout=timeout_s * 1000, polling=100)

    def execution_counts(self) -> list[int | None]:
        return self.page.evaluate(_COUNTS, self.notebook)

    def errors(self) -> list[str]:
        return self.page.evaluate(_ERRORS, self.notebook)

    def outputs(self, index: int) -> list[dict[str, Any]]:
        """Cell ``index``'s outputs as the frontend holds them (what saving writes to the file)."""
        return self.page.evaluate(_OUTPUTS, [self.notebook, index])

    def source(self, index: int) -> str:
        """Cell ``index``'s source as the frontend holds it (what the editor shows)."""
        return self.page.evaluate(_SOURCE, [self.notebook, index])

    def save(self) -> None:
        """Save the notebook to disk (as Ctrl+S; awaited)."""
        self.page.evaluate(_SAVE, self.notebook)

    def screenshot(self, name: str, locator: Any = None) -> Path:
        """Keep a screenshot under test-artifacts/browser/ (of ``locator``, else the page)."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"{name}.png"
        with contextlib.suppress(Exception):  # evidence, never the reason a test fails
            (locator or self.page).screenshot(path=str(path))
            self.shots.append(path)
        return path

    def close(self) -> None:
        """Shut the notebook's kernel down (frees the shared cores) and close the page."""
        with contextlib.suppress(Exception):
            self.page.evaluate(_SHUTDOWN, self.notebook)
        self.page.close()

    def save_console(self) -> None:
        self.artifacts.mkdir(parents=True, exist_ok=True)
        (self.artifacts / f"{Path(self.notebook).stem}-console.log").write_text("\n".join(self.console))


def copy_notebooks(src: Path, dst: Path) -> None:
    """Copy the test notebooks into the server's root (Lab writes checkpoints and may autosave)."""
    dst.mkdir(parents=True, exist_ok=True)
    for nb in src.glob("*.ipynb"):
        shutil.copy(nb, dst / nb.name)


__all__ = ["ARTIFACTS", "LABEXTENSIONS", "LabServer", "NotebookPage", "copy_notebooks", "lab_server", "launch_chromium",
           "missing_requirements"]
