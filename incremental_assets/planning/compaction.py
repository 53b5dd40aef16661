"""Which partitions table maintenance compacts.

Hourly writes leave small files in the partitions of recent days, and those are merged every
night. Older partitions get files too: a rebuild writes one file per Spark task into every day
it covers, and an event-day partition takes a file each hour that a late event of that day
arrives. Rewriting an older day is paid in bytes, and its files cost every read of it, so an
older day is compacted only when that at least halves its small files and removes a few: a day
compacted once that gains one late file is left alone until more pile up, not rewritten each
night.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

# Small files an older partition holds before it is rewritten (and they must be at least twice
# the files compaction would leave).
OLDER_PARTITION_MIN_FILES = 4


def files_after_compaction(small_file_bytes: Sequence[int], target_bytes: int) -> int:
    """How many files compaction leaves of these small files, filled to `target_bytes` each."""
    return max(1, math.ceil(sum(small_file_bytes) / target_bytes))


def partitions_to_compact(file_bytes: Mapping[str | None, Sequence[int]], *, recent_from: str,
                          target_bytes: int) -> list[str]:
    """The partitions (values of the table's first partition column, as text; None for null)
    whose files compaction should merge, sorted.

    A file of `target_bytes` or more is not small and never rewritten. A partition of
    `recent_from` or later is compacted when it holds two small files or more; an older one when
    it holds at least OLDER_PARTITION_MIN_FILES and at least twice the files compaction would
    leave of them. The null partition is never chosen (it is compacted with the whole table only).
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes={target_bytes!r} is not accepted; it must be positive")
    chosen = []
    for partition, sizes in file_bytes.items():
        small = [size for size in sizes if size < target_bytes]
        if partition is None or len(small) < 2:
            continue
        if partition >= recent_from:
            chosen.append(partition)
        elif len(small) >= max(OLDER_PARTITION_MIN_FILES, 2 * files_after_compaction(small, target_bytes)):
            chosen.append(partition)
    return sorted(chosen)


def merges_small_files(file_bytes: Iterable[Sequence[int]], target_bytes: int) -> bool:
    """Whether compaction has anything to merge: some group (a partition's files, or a whole
    unpartitioned table's) holds two files smaller than `target_bytes`. A single small file is
    never rewritten alone, so without such a group compaction changes nothing."""
    return any(sum(size < target_bytes for size in sizes) >= 2 for sizes in file_bytes)
