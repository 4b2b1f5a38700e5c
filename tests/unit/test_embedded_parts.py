"""A small LV[CT] multi-table commit without a decision record (issue 21): every part carries the
others' actions (``lakevilla.siblingActions``), the markers are named in the edges object before any part is
written, so any part in the log is the decision and a recoverer rolls the others forward from it."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

import lv_core
from lv_core.cli import main as lv_main
from lv_core.errors import LvError
from lv_core.protocol import recovery
from lv_core.protocol.edges import read_edges
from lv_core.protocol.markers import KEY, read_version
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.txn import cleaner
from tests.helpers import oracle as O
from tests.reliability.anomalies import setup_tables

pytestmark = pytest.mark.usefixtures("log_immutability")

LEASE = 1.0


def _three(tmp_path, tuning=None):
    plain = lv_core.connect(str(tmp_path / "wh"), lease_s=LEASE)
    setup_tables(plain, {"a": [(1, 100.0)], "b": [(1, 100.0)], "c": [(1, 100.0)]}, register=False)
    store = InstrumentedStore(plain.store)
    return plain, store, lv_core.Lakehouse(store, lease_s=LEASE, tuning=tuning)


def _info(lh, table: str, version: int) -> dict:
    """The LakeVilla commitInfo of ``table@version``."""
    st = read_version(lh.store, table, version)
    for line in st.raw.decode().splitlines():
        ci = json.loads(line).get("commitInfo")
        if ci and KEY in ci:
            return ci
    raise AssertionError(f"no LakeVilla commitInfo at {table}@{version}")


def _payload(lh, table: str, version: int) -> dict:
    return _info(lh, table, version)[KEY]


def _without_siblings(info: dict) -> dict:
    return {**info, KEY: {k: v for k, v in info[KEY].items() if k not in ("siblingActions", "siblingsIct")}}


def _transfer(lh, tables=("a", "b", "c")):
    txn = lh.begin("repeatable_read", timeout_s=20)
    for i, t in enumerate(tables):
        O.run_op(txn, O.add(t, 1, 10.0 * (i + 1)))
    return txn


def _commit_fails(tmp_path, key_contains: str, times: int):
    """A transfer over a, b and c whose part writes to keys with ``key_contains`` keep failing: its
    commit raises. Returns (a plain lakehouse, the transaction) once the owner's lease ran out."""
    plain, store, lh = _three(tmp_path)
    txn = _transfer(lh)
    store.fail("PUT-create", key_contains=key_contains, times=times)
    with pytest.raises(LvError):
        txn.commit()
    time.sleep(LEASE + 0.2)  # the owner's lease runs out (nothing to await: it is gone)
    return plain, txn


def test_parts_carry_each_other_and_no_decision_is_written(tmp_path):
    plain, store, lh = _three(tmp_path)
    txn = _transfer(lh)
    fault = store.fail("PUT", key_contains="decision.json")  # a decision write would fail the commit
    res = txn.commit()
    assert not fault.fired
    for t, v in res.versions.items():
        lv = _payload(plain, t, v)
        assert lv["at"] == res.versions
        assert sorted(lv["siblingActions"]) == sorted(set(res.versions) - {t}) and "siblings" not in lv
        for o, data in lv["siblingActions"].items():  # exactly the other part's actions (no commitInfo)
            lines = [json.loads(x) for x in data.splitlines()]
            landed = [json.loads(x) for x in read_version(plain.store, o, res.versions[o]).raw.decode().splitlines()]
            assert lines == [x for x in landed if "commitInfo" not in x]
            # what a recoverer writes for it: those actions, with this part's commitInfo less the siblings
            rebuilt = [json.loads(x) for x in recovery._sibling_commit(_info(plain, t, v), o).decode().splitlines()]
            assert rebuilt[:-1] == lines
            assert rebuilt[-1]["commitInfo"] == _without_siblings(_info(plain, o, res.versions[o]))
    assert [O.table_rows(plain.store.url(t)) for t in "abc"] == [[(1, 110.0)], [(1, 120.0)], [(1, 130.0)]]
    assert cleaner.drain(30)
    assert read_edges(plain.store, txn.id) is None  # deleted with the transaction's other objects


def test_a_part_in_the_log_is_rolled_forward_without_a_decision(tmp_path):
    """The part of c cannot be written (the store keeps failing): the owner ends undecided, since a
    and b may be in the log. Once its lease ran out, the next writer of c finds the parts through the
    edges object and writes c's part from what a carries: the transfer is all there."""
    plain, txn = _commit_fails(tmp_path, "c/_delta_log/", 10)
    assert txn.state == "unknown"
    assert O.table_rows(plain.store.url("a")) == [(1, 110.0)]  # a's part landed: decided
    assert O.table_rows(plain.store.url("c")) == [(1, 100.0)]
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=LEASE)
    t = other.begin("repeatable_read", timeout_s=20)
    O.run_op(t, O.add("c", 1, 1.0))
    t.commit()
    assert O.table_rows(plain.store.url("c")) == [(1, 131.0)]
    assert [O.table_rows(plain.store.url(x)) for x in "ab"] == [[(1, 110.0)], [(1, 120.0)]]
    assert lv_main(["recover", str(tmp_path / "wh"), "--grace", "0", "--lease", str(LEASE)]) == 0
    assert not list(plain.store.list("_lakevilla/txns/"))


def test_recover_rolls_the_missing_part_forward(tmp_path):
    plain, txn = _commit_fails(tmp_path, "b/_delta_log/", 10)
    rep = lv_core.connect(str(tmp_path / "wh")).recover(lease_grace_s=0)
    assert [(t, x) for t, _v, x in rep.rolled_forward] == [("b", txn.id)]
    assert [O.table_rows(plain.store.url(x)) for x in "abc"] == [[(1, 110.0)], [(1, 120.0)], [(1, 130.0)]]


def test_without_a_part_in_the_log_the_markers_are_freed(tmp_path):
    """No part landed (every part write failed): nothing is rolled forward, the markers are freed."""
    plain, txn = _commit_fails(tmp_path, "/_delta_log/", 1000)
    assert all(read_version(plain.store, t, v).pending for t, v in txn.marker_versions().items())
    rep = lv_core.connect(str(tmp_path / "wh")).recover(lease_grace_s=0)
    assert not rep.rolled_forward and len(rep.freed) == 3
    assert [O.table_rows(plain.store.url(x)) for x in "abc"] == [[(1, 100.0)]] * 3


def test_big_commits_record_the_decision_first(tmp_path):
    plain, store, lh = _three(tmp_path, lv_core.Tuning(embed_max=10))
    txn = _transfer(lh)
    fault = store.fail("PUT", key_contains="decision.json", after=True)  # lands; the response is lost
    res = txn.commit()  # it reads the decision back
    assert fault.fired
    for t, v in res.versions.items():
        assert "siblings" not in _payload(plain, t, v) and "siblingActions" not in _payload(plain, t, v)


@pytest.mark.parametrize("failing", ["i", "a"])
def test_parts_roll_forward_across_tables_with_and_without_in_commit_timestamps(tmp_path, failing):
    """A part carries its siblings' actions only; the commitInfo a recoverer gives the missing one is
    the part's own, less the siblings and its in-commit timestamp, stamped again for the table it
    lands in when that table has in-commit timestamps (``i``) and without one when not (``a``)."""
    from lv_core.engine import arrow_ops as ops
    from tests.helpers import feature_fixtures as ff

    plain, store, lh = _three(tmp_path)
    ff.in_commit_timestamp_table(tmp_path / "wh" / "i", ict=1_000)
    new = [{"id": 9, "v": "z"}]
    txn = lh.begin("repeatable_read", timeout_s=20)
    O.run_op(txn, O.add("a", 1, 10.0))
    txn.execute(ops.append("i", pa.Table.from_pylist(new, schema=ff.SCHEMA)))
    store.fail("PUT-create", key_contains=f"{failing}/_delta_log/", times=10)
    with pytest.raises(LvError):
        txn.commit()
    time.sleep(LEASE + 0.2)  # the owner's lease runs out (nothing to await: it is gone)
    rep = lv_core.connect(str(tmp_path / "wh")).recover(lease_grace_s=0)
    assert [(t, x) for t, _v, x in rep.rolled_forward] == [(failing, txn.id)]
    assert O.table_rows(plain.store.url("a")) == [(1, 110.0)]
    assert ff.delta_rows(tmp_path / "wh" / "i") == ff.ROWS + new
    v = txn.marker_versions()[failing]
    first, *_ = read_version(plain.store, failing, v).raw.decode().split("\n")
    info = _info(plain, failing, v)
    assert "siblingActions" not in info[KEY]
    if failing == "i":  # stamped, and its commitInfo first
        assert json.loads(first)["commitInfo"] == info and info["inCommitTimestamp"] > 1_000
    else:
        assert "inCommitTimestamp" not in info


def test_parts_written_before_sibling_actions_still_roll_forward():
    """Parts written by an earlier version carry each sibling's whole commit (``siblings``): a recoverer
    writes that commit as it is; anything else is not a part it can roll forward."""
    whole = '{"add":{"path":"x.parquet"}}\n{"commitInfo":{"lakevilla":{"kind":"commit","txn":"t1"}}}'
    info = {"timestamp": 1, KEY: {"kind": "commit", "txn": "t1", "at": {"a": 3, "b": 4}, "siblings": {"b": whole}}}
    assert recovery._sibling_commit(info, "b") == whole.encode()
    assert recovery._sibling_commit({"timestamp": 1, KEY: {"kind": "commit", "txn": "t1"}}, "b") is None
