"""The log-immutability checker itself (tests/helpers/immutability.py) catches rewrites and deletions."""

from __future__ import annotations

from tests.helpers.immutability import LogWatcher


def test_watcher_reports_rewritten_and_vanished_log_files_only(tmp_path):
    log = tmp_path / "wh" / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text('{"commitInfo":{}}\n')
    (log / "00000000000000000001.json").write_text('{"commitInfo":{"a":1}}\n')
    (log / "_last_checkpoint").write_text('{"version":0}')
    (tmp_path / "wh" / "t" / "part-0.parquet").write_text("data")
    w = LogWatcher(root=tmp_path)
    w.observe()
    assert len(w.seen) == 2 and not w.violations
    (log / "_last_checkpoint").write_text('{"version":1}')  # a hint Delta writers replace: allowed
    (tmp_path / "wh" / "t" / "part-0.parquet").write_text("other")  # not a log file
    (log / "00000000000000000002.json").write_text('{"commitInfo":{}}\n')  # a new version: fine
    w.observe()
    assert not w.violations and len(w.seen) == 3
    (log / "00000000000000000001.json").write_text('{"commitInfo":{"a":2}}\n')  # rewritten
    (log / "00000000000000000000.json").unlink()  # gone
    w.observe()
    assert sorted(w.violations) == ["changed: wh/t/_delta_log/00000000000000000001.json",
                                    "disappeared: wh/t/_delta_log/00000000000000000000.json"]


def test_watcher_polls_in_the_background(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    f = log / "00000000000000000000.json"
    f.write_text("a\n")
    with LogWatcher(root=tmp_path, interval_s=0.005) as w:
        while w.polls < 3:
            pass
        f.write_text("b\n")
    assert w.violations == ["changed: _delta_log/00000000000000000000.json"]
