"""How the ``lv_files`` data source packs files into read partitions (pure: no Spark)."""

from __future__ import annotations

from lv_core.engine.pyds import MAX_PARTITION_BYTES, OPEN_COST, pack

MB = 1 << 20


def _sizes(groups: list[list[int]], sizes: list[int]) -> list[int]:
    return [sum(sizes[i] + OPEN_COST for i in g) for g in groups]


def test_small_files_fill_one_partition_per_core() -> None:
    sizes = [2 * MB] * 40
    groups = pack(sizes, parallelism=2)
    assert len(groups) == 2  # 40 tasks of 2 MB each would cost 20 task startups per core
    assert sorted(i for g in groups for i in g) == list(range(40))  # every file exactly once
    assert max(_sizes(groups, sizes)) - min(_sizes(groups, sizes)) <= 2 * MB + OPEN_COST


def test_partitions_stay_below_the_split_size_on_big_tables() -> None:
    sizes = [100 * MB] * 30
    groups = pack(sizes, parallelism=2)
    assert len(groups) == 30  # a file per partition: two 100 MB files exceed 128 MB
    many = pack([10 * MB] * 100, parallelism=2)
    assert all(s <= MAX_PARTITION_BYTES for s in _sizes(many, [10 * MB] * 100))
    assert len(many) == 12  # 9 files of 10 + 4 MB fit in 128 MB, 10 do not


def test_a_cluster_gets_a_partition_per_core_down_to_one_file_each() -> None:
    groups = pack([3 * MB] * 40, parallelism=16)  # total / 16 = 17.5 MB a partition: 2 files of 3 + 4 MB
    assert 16 <= len(groups) <= 24 and all(len(g) <= 2 for g in groups)
    assert len(pack([3 * MB] * 40, parallelism=400)) == 40  # never more partitions than files


def test_caps_and_empty_scans() -> None:
    assert pack([], parallelism=4) == [[]]  # Spark needs at least one partition
    assert len(pack([200 * MB] * 50, parallelism=8, max_partitions=10)) == 10
    assert pack([0, 0], parallelism=1) == [[0, 1]]
