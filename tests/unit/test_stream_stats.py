"""The stream path's writer computes a file's Delta stats batch by batch (lv_core.engine.pyds.merge_stats):
merged, they equal the stats of the whole file, except that a bound one batch had to leave out (a
string maximum longer than the stats prefix, NaN) is left out for the whole file (never a wrong bound)."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from lv_core.delta.stats import compute_stats
from lv_core.engine.pyds import merge_stats

SCHEMA = pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("t", pa.timestamp("us", tz="UTC")),
                    ("d", pa.date32()), ("m", pa.decimal128(10, 2)),
                    ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])), ("l", pa.list_(pa.int64()))])


def _rows(rng: random.Random, n: int, strings: list[str]) -> pa.Table:
    def maybe(v: object) -> object:
        return None if rng.random() < 0.3 else v

    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)

    rows = [{"i": maybe(rng.randint(-5, 5)), "f": maybe(rng.choice([1.5, -2.0, float("nan"), 3.25])),
             "s": maybe(rng.choice(strings)),
             "t": maybe(t0 + dt.timedelta(microseconds=rng.randint(0, 10**9))),
             "d": maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 500))),
             "m": maybe(Decimal(rng.randint(-999, 999)) / 100),
             "st": None if rng.random() < 0.2 else {"x": maybe(rng.randint(0, 9)), "y": maybe(rng.choice(strings))},
             "l": maybe([1, 2])} for _ in range(n)]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _merged(t: pa.Table, cuts: list[int]) -> dict:
    out = None
    for a, b in zip([0, *cuts], [*cuts, t.num_rows], strict=True):
        out = merge_stats(out, json.loads(compute_stats(t.slice(a, b - a))))
    assert out is not None
    return out


@pytest.mark.parametrize("seed", range(40))
def test_batch_stats_merge_to_the_whole_file_stats(seed: int) -> None:
    rng = random.Random(seed)
    t = _rows(rng, rng.randint(1, 40), ["a", "zz", "c", "b" * 32])
    cuts = sorted(rng.sample(range(1, t.num_rows), min(3, t.num_rows - 1))) if t.num_rows > 1 else []
    assert _merged(t, cuts) == json.loads(compute_stats(t))


def test_a_bound_left_out_by_one_batch_is_left_out_for_the_file() -> None:
    t = pa.table({"s": ["z" * 40, "a", "b"], "f": [float("nan"), 1.0, 2.0]})
    merged = _merged(t, [1])
    assert "s" not in merged["maxValues"] and merged["minValues"]["s"] == "a"
    assert "f" not in merged["minValues"] and "f" not in merged["maxValues"]
    assert merged["numRecords"] == 3 and merged["nullCount"] == {"s": 0, "f": 0}
