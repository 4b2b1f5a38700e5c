"""Spark tier, issue 20 item 3: a table with 400 partition values. SELECT, INSERT, UPDATE, DELETE and
MERGE in SQL, each checked against what delta-rs reads; on a local folder and on the S3 test servers. On moto
(an S3 server in Python: 4 minutes here, most of the test's time) it runs in the slow tier: `make test` runs
it on a local folder and on SeaweedFS, the real S3 server."""

from __future__ import annotations

from typing import Any

import deltalake
import pytest

from tests.conftest import s3_variants

pytestmark = pytest.mark.spark

N_PARTS = 400


def _delta_rows(lh: Any) -> list[tuple]:
    opts = lh.store.storage_options_for_deltalake() if lh.kind == "s3" else None
    t = deltalake.DeltaTable(lh.store.url("t"), storage_options=opts).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["p"].to_pylist(), t["v"].to_pylist(), strict=True))


def _ours(lh: Any) -> list[tuple]:
    return sorted(tuple(r) for r in lh.sql("SELECT id, p, v FROM t").collect())


def _partitions(lh: Any) -> set[int]:
    opts = lh.store.storage_options_for_deltalake() if lh.kind == "s3" else None
    return {int(pv) for pv in deltalake.DeltaTable(lh.store.url("t"), storage_options=opts)
            .get_add_actions(flatten=True).column("partition.p").to_pylist()}


@pytest.mark.parametrize("engine_lh", s3_variants("local", slow_on=("moto",)), indirect=True)
def test_400_partition_values(engine_lh: Any) -> None:
    lh = engine_lh
    lh.sql("CREATE TABLE t (id BIGINT, p INT, v DOUBLE) PARTITIONED BY (p)")
    lh.sql(f"INSERT INTO t SELECT id, CAST(id % {N_PARTS} AS INT), CAST(id AS DOUBLE) FROM range({3 * N_PARTS})")
    expected = sorted((i, i % N_PARTS, float(i)) for i in range(3 * N_PARTS))
    assert _delta_rows(lh) == expected == _ours(lh)
    assert len(_partitions(lh)) == N_PARTS

    # SELECT with a partition filter and an aggregate over every partition
    got = lh.sql("SELECT p, count(*) AS n, sum(v) AS s FROM t GROUP BY p ORDER BY p").collect()
    assert [(r["p"], r["n"]) for r in got] == [(p, 3) for p in range(N_PARTS)]
    assert [r[0] for r in lh.sql("SELECT id FROM t WHERE p = 17 ORDER BY id").collect()] == [17, 417, 817]

    # UPDATE touching 58 partitions (p % 7 = 0)
    assert lh.sql("UPDATE t SET v = v + 0.5 WHERE p % 7 = 0").collect()[0][0] == 3 * len(range(0, N_PARTS, 7))
    expected = sorted((i, p, v + 0.5 if p % 7 == 0 else v) for i, p, v in expected)
    assert _delta_rows(lh) == expected == _ours(lh)

    # DELETE of whole partitions and of single rows in others
    lh.sql("DELETE FROM t WHERE p >= 390 OR id = 5")
    expected = [r for r in expected if not (r[1] >= 390 or r[0] == 5)]
    assert _delta_rows(lh) == expected == _ours(lh)
    assert _partitions(lh) == set(range(390))

    # MERGE: updates 20 rows in 20 partitions, inserts 20 rows into the deleted partitions 390..399
    lh.sql(f"""MERGE INTO t USING (SELECT id, CAST(id % {N_PARTS} AS INT) AS p, -1.0 AS v FROM range(1170, 1210)) s
               ON t.id = s.id
               WHEN MATCHED THEN UPDATE SET v = s.v
               WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, s.p, s.v)""")
    merged = {i: (i, i % N_PARTS, -1.0) for i in range(1170, 1210)}
    expected = sorted([r for r in expected if r[0] not in merged] + list(merged.values()))
    assert _delta_rows(lh) == expected == _ours(lh)
    assert _partitions(lh) == set(range(N_PARTS))

    # INSERT ... VALUES into existing and new partition values, then a transaction over two statements
    lh.sql("INSERT INTO t VALUES (5000, 3, 1.0), (5001, 400, 2.0), (5002, 401, 3.0)")
    with lh.transaction("serializable") as txn:
        txn.sql("UPDATE t SET v = 9.0 WHERE p = 400")
        txn.sql("DELETE FROM t WHERE p = 401")
    expected = sorted([*expected, (5000, 3, 1.0), (5001, 400, 9.0)])
    assert _delta_rows(lh) == expected == _ours(lh)
