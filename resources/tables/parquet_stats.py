"""The add action of a Parquet file Spark wrote into a table directory, with its Delta
statistics (row count, null counts, min/max) read from the footer: delta-rs commits such
files without reading their rows."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote

import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from resources.tables.delta_log import HIVE_NULL_PARTITION


def add_action(table_dir: Path, relative: str, partition_by: Sequence[str], stats_columns: Sequence[str]) -> AddAction:
    """The add action of `table_dir/relative`, a file in hive layout (`col=value/.../part.parquet`)."""
    file = table_dir / relative
    # Spark's local file system leaves a checksum file beside each data file; Delta never reads it.
    (file.parent / f".{file.name}.crc").unlink(missing_ok=True)
    values = {}
    for directory, column in zip(relative.split("/")[:-1], partition_by):
        value = unquote(directory.split("=", 1)[1])
        values[column] = None if value == HIVE_NULL_PARTITION else value
    stat = file.stat()
    return AddAction(path=relative, size=stat.st_size, partition_values=values,
                     modification_time=int(stat.st_mtime * 1000), data_change=True,
                     stats=json.dumps(file_stats(file, list(stats_columns))))


def file_stats(file: Path, columns: list[str]) -> dict[str, Any]:
    """Delta file statistics from a Parquet footer: numRecords, and nullCount and min/max
    values of `columns` (timestamps, dates or integers)."""
    metadata = pq.ParquetFile(file).metadata
    null_count: dict[str, int] = {}
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    for name, (nulls, low, high) in footer_bounds(metadata, columns).items():
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


def footer_bounds(metadata: pq.FileMetaData, columns: Sequence[str]) -> dict[str, tuple[int, Any, Any]]:
    """(null count, min, max) of each of `columns` (top-level leaf columns) over every row
    group of a Parquet footer; min and max are None when every value is null. A column the
    footer keeps no complete statistics of (some writers keep none for INT96 timestamps) or
    that the file does not hold is left out."""
    # Leaf columns by their path: a nested column before a wanted one has several leaves, so
    # Arrow field positions are not Parquet column positions.
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    bounds = {}
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
            elif stats.num_values:  # values without bounds: the bounds are unknown
                complete = False
                break
        if complete:
            bounds[name] = (nulls, low, high)
    return bounds


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
