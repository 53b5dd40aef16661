"""Delta file statistics (row count, null counts, min/max) read from a Parquet file's footer,
for files that Spark wrote and delta-rs commits without reading their rows."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq


def file_stats(file: Path, columns: list[str]) -> dict[str, Any]:
    """Delta file statistics from a Parquet footer: numRecords, and nullCount and min/max
    values of `columns` (timestamps, dates or integers)."""
    metadata = pq.ParquetFile(file).metadata
    # Leaf columns by their path: a nested column before a wanted one has several leaves, so
    # Arrow field positions are not Parquet column positions.
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    null_count: dict[str, int] = {}
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    for name in columns:
        index = leaves.get(name)
        if index is None:  # not in the file (a partition column) or not a plain column
            continue
        nulls, low, high, complete = 0, None, None, True
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if stats is None or not stats.has_null_count:
                complete = False
                break
            nulls += stats.null_count
            if stats.has_min_max:
                low = stats.min if low is None else min(low, stats.min)
                high = stats.max if high is None else max(high, stats.max)
        if not complete:
            continue
        null_count[name] = nulls
        if low is not None:
            min_values[name] = _stat_value(low, round_up=False)
            max_values[name] = _stat_value(high, round_up=True)
    return {
        "numRecords": metadata.num_rows,
        "minValues": min_values,
        "maxValues": max_values,
        "nullCount": null_count,
    }


def _stat_value(value: Any, *, round_up: bool) -> Any:
    """A bound in the Delta log's JSON form."""
    if isinstance(value, datetime):
        # The Delta log keeps timestamps to the millisecond: round bounds outwards so a
        # file is never skipped for a row it holds.
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        extra = value.microsecond % 1000
        value -= timedelta(microseconds=extra)
        if round_up and extra:
            value += timedelta(milliseconds=1)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, date):
        return value.isoformat()
    return value
