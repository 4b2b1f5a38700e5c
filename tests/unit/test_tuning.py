"""lv_core.Tuning: the protocol's speed knobs, one frozen value from the lakehouse's options to every
transaction (defaults as the constants they replaced)."""

from __future__ import annotations

import pytest

import lv_core
from lv_core.errors import ConfigError
from lv_core.protocol.markers import Footprint
from lv_core.txn.ops import Operation, OpResult


def test_defaults_and_bounds() -> None:
    t = lv_core.Tuning()
    assert (t.silence_share, t.read_ahead, t.read_ahead_parallel, t.footprint_max, t.precedence_probes,
            t.gvl_linear_probes, t.queued_poll_s, t.contended_s, t.plan_attempts, t.embed_max) == (
        0.5, 32, 8, 256, 8, 4, 0.05, 2.0, 3, 64 * 1024)
    assert lv_core.Tuning(embed_max=0).embed_max == 0  # parts never carry each other: the decision is recorded
    for bad in ({"silence_share": 0.0}, {"read_ahead": 0}, {"footprint_max": True}, {"gvl_linear_probes": 1.5},
                {"queued_poll_s": 0.0}, {"contended_s": -1.0}, {"plan_attempts": 0}, {"embed_max": -1},
                {"embed_max": 1.0}):
        with pytest.raises(ValueError):
            lv_core.Tuning(**bad)  # type: ignore[arg-type]


def test_a_lakehouse_hands_its_tuning_to_every_transaction(tmp_path) -> None:
    with pytest.raises(ConfigError):
        lv_core.connect(str(tmp_path / "bad"), tuning={"footprint_max": 2})
    tuning = lv_core.Tuning(footprint_max=2, gvl_linear_probes=1, queued_poll_s=0.5, contended_s=0.0, plan_attempts=1)
    lh = lv_core.connect(str(tmp_path / "wh"), tuning=tuning)
    assert lh.global_log.linear_probes == 1
    vl = lh.validation_lock
    assert (vl.queued_poll_s, vl.contended_s, vl.plan_attempts) == (0.5, 0.0, 1)
    t = lh.begin("serializable")
    assert t.core.settings.tuning is lh.tuning
    reads = OpResult(reads={"t": {"a.parquet", "b.parquet"}})
    t.core.book.claiming = (Operation("read", ("t",), lambda ctx: OpResult(), exposed=True), reads)
    assert t.core.marker_info().footprint == Footprint({"t": frozenset({"a.parquet", "b.parquet"})}, {})
    t.core.book.claiming = (Operation("read", ("t",), lambda ctx: OpResult(), exposed=True),
                            OpResult(reads={"t": {"a.parquet", "b.parquet", "c.parquet"}}))
    assert t.core.marker_info().footprint is None  # over this lakehouse's bound: left out
    t.core.book.claiming = None
    t.rollback()
    lh.close()
