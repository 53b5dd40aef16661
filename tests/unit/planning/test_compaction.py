"""Which partitions maintenance compacts (planning.compaction)."""

import pytest

from incremental_assets.planning.compaction import (
    OLDER_PARTITION_MIN_FILES,
    files_after_compaction,
    merges_small_files,
    partitions_to_compact,
)

MB = 1024 * 1024
TARGET = 100 * MB
RECENT = "2026-01-08"


def chosen(files):
    return partitions_to_compact(files, recent_from=RECENT, target_bytes=TARGET)


def test_recent_partitions_with_two_small_files_are_compacted():
    files = {"2026-01-08": [1 * MB, 2 * MB], "2026-01-09": [3 * MB], "2026-01-10": [5 * MB] * 24}
    assert chosen(files) == ["2026-01-08", "2026-01-10"]


def test_a_rebuilds_days_are_compacted_once_and_then_left_alone():
    # A rebuild writes one ~7 MB file per Spark task into every day it covers.
    rebuilt = {f"2026-01-0{day}": [7 * MB] * 8 for day in range(1, 6)}
    assert chosen(rebuilt) == sorted(rebuilt)
    # Compacted, each day is one 56 MB file: nothing left to do however often maintenance runs.
    assert chosen({day: [56 * MB] for day in rebuilt}) == []


def test_an_older_day_waits_for_late_files_to_pile_up_before_its_rewrite():
    compacted_day = [56 * MB]
    for late_files in range(1, OLDER_PARTITION_MIN_FILES - 1):
        assert chosen({"2026-01-02": compacted_day + [20_000] * late_files}) == [], late_files
    assert chosen({"2026-01-02": compacted_day + [20_000] * (OLDER_PARTITION_MIN_FILES - 1)}) == ["2026-01-02"]
    # The same files in a recent day are merged at once.
    assert chosen({RECENT: compacted_day + [20_000]}) == [RECENT]


def test_an_older_day_is_rewritten_only_when_that_at_least_halves_its_small_files():
    # Eight 40 MB files hold 320 MB: four 100 MB files at the fewest.
    assert files_after_compaction([40 * MB] * 8, TARGET) == 4
    assert chosen({"2026-01-02": [40 * MB] * 8}) == ["2026-01-02"]
    assert chosen({"2026-01-02": [60 * MB] * 8}) == []  # 480 MB: five files at the fewest, 8 < 10
    # Files of the target size or more are not small: they never count, nor are rewritten.
    assert chosen({"2026-01-02": [TARGET, 2 * TARGET, 5 * MB, 5 * MB]}) == []
    assert chosen({"2026-01-02": [TARGET] * 4 + [5 * MB] * 4}) == ["2026-01-02"]


def test_the_null_partition_is_left_to_whole_table_compaction():
    assert chosen({None: [MB] * 10, "2026-01-02": [MB] * 10}) == ["2026-01-02"]


def test_a_target_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="target_bytes=0"):
        partitions_to_compact({}, recent_from=RECENT, target_bytes=0)


def test_compaction_merges_something_only_where_a_group_holds_two_small_files():
    assert not merges_small_files([], TARGET)
    assert not merges_small_files([[5 * MB], [7 * MB, 300 * MB], [TARGET, TARGET]], TARGET)
    assert merges_small_files([[5 * MB], [300 * MB, 7 * MB, TARGET - 1]], TARGET)
