"""``lv doctor`` on a local folder, the store checks' verdicts on broken stores (in-process fakes of the
two failures, since a local folder cannot be made to ignore O_EXCL), and ``%lv doctor`` in a real shell.
The S3 side (moto, SeaweedFS, a proxy that drops the headers) is tests/integration/test_doctor_s3.py."""

from __future__ import annotations

import pytest

from lv_core.cli import main as lv
from lv_core.doctor import Status, run_checks
from lv_core.storage.base import CREATE, IfMatch, ObjectStore
from lv_core.storage.local import LocalStore


def test_lv_doctor_passes_on_a_local_folder_and_leaves_nothing(tmp_path, capsys):
    assert lv(["doctor", str(tmp_path / "wh")]) == 0
    out = capsys.readouterr().out
    for name in ("put-if-absent", "put-if-absent-concurrent", "if-match-stale", "read-after-write",
                 "list-after-write", "delete", "clock"):
        assert f"PASS  {name}" in out
    assert "latency (median ms)" in out and "every check passed" in out
    assert list(LocalStore(tmp_path / "wh").list("")) == []  # the scratch prefix is gone


class _IgnoresConditions(LocalStore):
    """A local folder that ignores put modes, as an S3 server that drops If-None-Match / If-Match does
    (a stand-in: the real thing, through an HTTP proxy, is tested in tests/integration/test_doctor_s3.py)."""

    def __init__(self, root, *, ignore_create: bool = True, ignore_match: bool = True) -> None:
        super().__init__(root)
        self.ignore_create, self.ignore_match = ignore_create, ignore_match

    def put(self, key, data, *, mode="overwrite"):
        if (mode == CREATE and self.ignore_create) or (isinstance(mode, IfMatch) and self.ignore_match):
            mode = "overwrite"
        return super().put(key, data, mode=mode)


@pytest.mark.parametrize(("create", "match", "failed"), [
    (True, True, {"put-if-absent", "put-if-absent-concurrent", "if-match-stale", "if-match-missing"}),
    (False, True, {"if-match-stale", "if-match-missing"}),
])
def test_checks_name_what_a_broken_store_gets_wrong(tmp_path, create, match, failed):
    store: ObjectStore = _IgnoresConditions(tmp_path / "wh", ignore_create=create, ignore_match=match)
    report = run_checks(store, rounds=3)
    assert {c.name for c in report.failed} == failed
    assert not report.ok and all(c.means for c in report.failed)  # each says what LakeVilla cannot promise
    assert {c.name for c in report.checks if c.status is Status.PASS} >= {"read-after-write", "delete"}


def test_percent_lv_doctor_shows_the_checks(tmp_path, monkeypatch):
    from IPython.testing.globalipapp import get_ipython, start_ipython

    import lv_core
    from lv_magic.state import STATE

    ip = start_ipython() or get_ipython()
    ip.run_line_magic("load_ext", "lv_magic")
    lv_core.connect(str(tmp_path / "wh"))
    ip.run_line_magic("lv", f"connect {tmp_path / 'wh'} --lazy")
    shown: list = []
    monkeypatch.setattr("lv_magic.cmd.admin.display", shown.append)  # what the cell would show
    try:
        ip.run_line_magic("lv", "doctor")
        html = "".join(o.data for o in shown)
        assert "put-if-absent-concurrent" in html and "every check passed" in html
    finally:
        STATE.shutdown()
        STATE.txns.clear()
        STATE.lh = None
