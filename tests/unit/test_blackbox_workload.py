"""The list-append workload's client records (lv_core.blackbox.workload), in process: what a client
writes, how a killed client's records read back, and a one-client history the checker finds clean."""

from __future__ import annotations

import json

import lv_core
from lv_core.blackbox import Outcome, check
from lv_core.blackbox.listops import create_list_table, read_lists_plain
from lv_core.blackbox.workload import Spec, abort_stats, load_records, run_client, table_names


def test_one_client_history_reads_back_and_checks_clean(tmp_path):
    spec = Spec(preset="serializable", tables=2, keys=2, txns=12, seed=5)
    lh = lv_core.connect(str(tmp_path / "wh"))
    for t in table_names(spec):
        create_list_table(lh, t, spec.keys)
    out = tmp_path / "c0.jsonl"
    assert run_client(lh, spec, 0, 0, out) == 12
    history = load_records([out])
    assert len(history) == 12 and all(t.outcome is Outcome.OK for t in history)  # alone: nothing aborts
    final = {f"{t}/{k}": v for t in table_names(spec) for k, v in read_lists_plain(lh.store.url(t)).items()}
    report = check(history, final)
    assert not report.kinds, report.explain(1)
    appended = sorted(op.appended for t in history for op in t.ops if op.kind.value == "append")
    assert sorted(x for v in final.values() for x in v) == appended  # every append landed exactly once
    assert abort_stats(history)["abort_rate"] == 0.0


def test_a_killed_clients_transaction_in_flight_reads_as_unknown(tmp_path):
    """The invoke record without its done record (the client died in between), and a torn last line."""
    spec = Spec(preset="serializable", tables=1, keys=1, txns=2, seed=1)
    lh = lv_core.connect(str(tmp_path / "wh"))
    create_list_table(lh, "la0", 1)
    out = tmp_path / "c0.jsonl"
    run_client(lh, spec, 0, 0, out)
    lines = out.read_text().splitlines()
    assert [json.loads(x)["phase"] for x in lines] == ["invoke", "done", "invoke", "done"]
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:10])  # died after the second invoke
    history = {t.id: t for t in load_records([out])}
    assert history["c0.0-0"].outcome is Outcome.OK and history["c0.0-1"].outcome is Outcome.INFO
    assert all(op.value is None for op in history["c0.0-1"].ops if op.kind.value == "r")
