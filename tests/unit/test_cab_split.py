"""benchmarks/cab.py's accounting (issue 38, CAB): the metadata phase split into LakeVilla's own work,
waiting for other transactions and statements redone inside the commit, from a transaction's events;
every preset running the same operations; the targets table judging LakeVilla's own share. No Spark."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import cab  # noqa: E402
from lv_core import events as ev  # noqa: E402

T = "t1"


def test_waits_on_two_tables_at_once_count_once() -> None:
    got = cab.commit_split([
        ev.Waiting(T, table="a", version=3, on_txn="x", ts=10.1),
        ev.Waiting(T, table="b", version=5, on_txn="y", ts=10.2),
        ev.WaitEnded(T, table="a", version=3, on_txn="x", outcome="committed", ts=10.5),
        ev.WaitEnded(T, table="b", version=5, on_txn="y", outcome="committed", ts=10.7),
    ], 10.0, 11.0)
    assert got["wait_s"] == pytest.approx(0.6)
    assert got["key_wait_s"] == 0 and got["redo_s"] == 0
    assert got["protocol_s"] == pytest.approx(0.4)


def test_a_redo_lasts_until_the_next_event_and_key_waits_until_validated() -> None:
    """The redo emits nothing itself (Progress aside): it ran until the transaction's next event."""
    got = cab.commit_split([
        ev.OperationDone(T, step=0, op="update", table="a", sublog="logical", ts=9.0),  # before commit(): data
        ev.ConflictFound(T, table="a", version=4, step=0, ts=10.1),
        ev.Redo(T, from_step=0, attempt=1, ts=10.1),
        ev.Progress(T, statement=1, stage="running", done=1, total=2, elapsed_s=1.0, ts=11.0),
        ev.Waiting(T, table="validation lock", version=-1, on_txn="z", ts=13.1),
        ev.Waiting(T, table="validation lock", version=-1, on_txn="w", ts=13.2),
        ev.Validated(T, compatible=True, gvl_version=7, tables={}, ts=13.4),
        ev.Committed(T, versions={"a": 5}, redo_count=1, elapsed_s=3.5, ts=13.5),
    ], 10.0, 13.5)
    assert got["redo_s"] == pytest.approx(3.0)
    assert got["key_wait_s"] == pytest.approx(0.3)
    assert got["wait_s"] == 0
    assert got["protocol_s"] == pytest.approx(0.2)


def test_a_wait_cut_short_lasts_until_the_end() -> None:
    got = cab.commit_split([ev.Waiting(T, table="a", version=3, on_txn="x", ts=10.5)], 10.0, 12.0)
    assert got["wait_s"] == pytest.approx(1.5) and got["protocol_s"] == pytest.approx(0.5)


def _sample(preset: str, op: str, meta: tuple[float, float, float, float], data: float) -> dict[str, Any]:
    begin, protocol, wait, redo = meta
    return {"mode": "concurrent", "preset": preset, "kind": "write", "op": op, "begin_s": begin,
            "commit_s": protocol + wait + redo, "metadata_s": begin + protocol + wait + redo, "data_s": data,
            "total_s": begin + protocol + wait + redo + data, "protocol_s": protocol, "wait_s": wait,
            "key_wait_s": 0.0, "redo_s": redo, "requests": 5}


def test_summary_splits_the_metadata_share() -> None:
    samples = [_sample("serializable", "update t", (0.0, 0.1, 0.0, 4.0), 4.0),
               _sample("serializable", "insert t", (0.0, 0.01, 1.9, 0.0), 0.09)]
    r = cab.summarize(samples, ["serializable"])["concurrent"]["serializable"]["write"]
    assert r["metadata_share"] == pytest.approx(6.01 / 10.1, abs=1e-4)
    assert r["split"]["protocol"] == pytest.approx(0.11 / 10.1, abs=1e-4)
    assert r["split"]["waiting"] == pytest.approx(1.9 / 10.1, abs=1e-4)
    assert r["split"]["redo"] == pytest.approx(4.0 / 10.1, abs=1e-4)
    assert r["by_op"]["insert"]["protocol_share"] == pytest.approx(0.005, abs=1e-4)
    table = "\n".join(cab.report_section({"params": {
        "scale": 0.1, "ops_per_stream": 1, "rounds": 1, "presets": ["serializable"], "readers": 0, "writers": 1,
        "reads": [], "same_ops_per_preset": True}, "summary": cab.summarize(samples, ["serializable"]),
        "samples": samples}, "results"))
    assert "| 59.5% | 1.1% / 18.8% / 39.6% |" in table


def test_every_preset_runs_the_same_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    streams = cab.Streams.__new__(cab.Streams)
    streams.seed = 42
    streams.pools = {t: pa.table({key: list(range(50))}) for t, (_, key) in cab.UPDATES.items()}
    for t in cab.TABLES:
        streams.pools.setdefault(t, pa.table({"k": list(range(50))}))
    monkeypatch.setattr(cab, "one_txn", lambda lh, preset, tables, work: {})
    ran: dict[str, list[str]] = {}
    for preset in ("delta", "serializable", "LV[I]"):
        out: list[dict[str, Any]] = []
        streams.stream(None, "write", preset, 12, f"con-2-0-{preset}", out, "con-2-0")
        ran[preset] = [o["op"] for o in out]
    assert ran["delta"] == ran["serializable"] == ran["LV[I]"]
    assert any(op.startswith("update") for op in ran["delta"])


def test_targets_judge_lakevillas_own_share_and_show_the_whole_phase(tmp_path: Path) -> None:
    from benchmarks.report_targets import targets

    samples = [_sample("serializable", "update t", (0.0, 0.1, 0.0, 4.0), 4.0)]
    params = {"scale": 0.1, "presets": ["serializable"]}
    (tmp_path / "cab-new.json").write_text(json.dumps({"params": params,
                                                       "summary": cab.summarize(samples, ["serializable"])}))
    old = [dict(s, **{k: 0.0 for k in ()}) for s in samples]
    for s in old:
        for k in ("protocol_s", "wait_s", "key_wait_s", "redo_s"):
            s.pop(k)
    (tmp_path / "cab.json").write_text(json.dumps({"params": params, "summary": cab.summarize(old, ["serializable"])}))
    rows = [r for r in targets(tmp_path) if r[0].startswith("CAB write")]
    assert len(rows) == 1 and rows[0][4] == "`cab-new.json`"
    assert rows[0][3] == "met" and rows[0][2].startswith("at most 1.2% (concurrent serializable)")
    assert "as Figure 11 counts it: at most 50.6%" in rows[0][2] and "statements redone 49.4%" in rows[0][2]
    assert "earlier runs without the split, whole phase: `cab.json` 50.6%" in rows[0][2]


def test_catch_up_reads_every_table_once_more_after_an_abort_and_only_for_lv_i() -> None:
    """Before a phase with LV[I], every table is read serializably; a read that aborts (R1: commits the
    global log does not know, made by the preset before) is read again, and then commits."""
    from lv_core.errors import TransactionAborted

    begun: list[str] = []
    stale = {"orders"}

    class Txn:
        state = "active"

        def sql(self, text: str) -> Any:
            self.table = text.split()[-1]
            return self

        def collect(self) -> None:
            pass

        def commit(self) -> None:
            if self.table in stale:
                stale.discard(self.table)
                raise TransactionAborted("R1", "a commit the log does not know changed what it read")

    class Lh:
        def begin(self, preset: str, timeout_s: float) -> Txn:
            begun.append(preset)
            return Txn()

    assert cab.catch_up_log(Lh(), "delta") == {} and cab.catch_up_log(Lh(), "LV[R]") == {} and not begun
    assert cab.catch_up_log(Lh(), "LV[I]") == {"orders": 1}
    assert begun == ["serializable"] * (len(cab.TABLES) + 1)
