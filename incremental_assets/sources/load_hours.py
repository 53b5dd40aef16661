"""Which load hours the source table's files hold, and a fingerprint of each hour's files, from
metadata only (no Spark, no data read).

Delta source: a file's hours come from its min/max `load_tstamp` statistics in the Delta log;
rows without a `load_tstamp` count in the hour of their `collector_tstamp` (the load time rule
of `sources.schema.load_time`). Without usable statistics the file's `load_date` partition
stands for all its hours, and without either the file may hold any hour. An hour's fingerprint
covers the path, size and row count of every file that may hold it: it changes when such a
file is added, removed or rewritten.

Parquet source (no Delta log): files are listed; a `load_date=...` directory stands for its
day's hours, other files for every hour. Coarser (a new file re-runs its whole day), still exact.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable

from incremental_assets.partitions import HOUR, floor_hour
from incremental_assets.sources.schema import PARTITION_COLUMN


@dataclass(frozen=True)
class SourceSnapshot:
    """The source as one run sees it: its Delta version (None for Parquet) and each load hour's
    fingerprint, for the hours asked for."""

    path: str
    version: int | None
    fingerprints: dict[datetime, str]
    columns: dict[str, str] | None = None  # name -> type, from the Delta schema (None for Parquet)


@dataclass(frozen=True)
class _File:
    key: str  # what identifies this file's content: path, size, rows (or mtime)
    first: datetime | None  # first load hour the file may hold; None: unknown
    last: datetime | None


def source_snapshot(path: str, since: datetime, until: datetime) -> SourceSnapshot | None:
    """The load hours in [since, until) that source files may hold, with their fingerprints;
    None when there is no table at `path`."""
    if DeltaTable.is_deltatable(path):
        table = DeltaTable(path)
        columns = {field.name: str(field.type) for field in pa.schema(table.schema().to_arrow())}
        return SourceSnapshot(path, table.version(), _fingerprints(_delta_files(table), since, until), columns)
    files = _parquet_files(path)
    if files is None:
        return None
    return SourceSnapshot(path, None, _fingerprints(files, since, until))


def _fingerprints(files: list[_File], since: datetime, until: datetime) -> dict[datetime, str]:
    keys_by_hour: dict[datetime, list[str]] = {}
    for file in files:
        if file.last is not None and file.last < since:
            continue
        hour = max(file.first or since, floor_hour(since))
        stop = min(file.last + HOUR if file.last else until, until)
        while hour < stop:
            keys_by_hour.setdefault(hour, []).append(file.key)
            hour += HOUR
    return {hour: hashlib.sha1("\n".join(sorted(keys)).encode()).hexdigest()[:16]
            for hour, keys in keys_by_hour.items()}


def _delta_files(table: DeltaTable) -> list[_File]:
    actions = pa.table(table.get_add_actions(flatten=True))

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows

    files = []
    for path, size, rows, day, low, high, nulls, c_low, c_high, c_nulls in zip(
            column("path"), column("size_bytes"), column("num_records"), column(f"partition.{PARTITION_COLUMN}"),
            column("min.load_tstamp"), column("max.load_tstamp"), column("null_count.load_tstamp"),
            column("min.collector_tstamp"), column("max.collector_tstamp"), column("null_count.collector_tstamp")):
        if holds_no_load_time(rows, nulls, c_nulls):
            continue  # its rows have no load hour: never read (docs/rules.md 1)
        first, last = file_hours(day, low, high, nulls, c_low, c_high)
        files.append(_File(f"{path}|{size}|{rows}", first, last))
    return files


def holds_no_load_time(rows, nulls, c_nulls) -> bool:
    """Whether the statistics say every row of the file lacks both load_tstamp and collector_tstamp."""
    return rows is not None and rows > 0 and nulls == rows and c_nulls == rows


def file_hours(day, low, high, nulls, c_low, c_high) -> tuple[datetime | None, datetime | None]:
    """First and last load hour a Delta file may hold; None where unknown."""
    if low is not None and high is not None and nulls == 0:
        return floor_hour(low), floor_hour(high)
    if low is not None and high is not None and c_low is not None and c_high is not None:
        return floor_hour(min(low, c_low)), floor_hour(max(high, c_high))  # null load_tstamps too
    if day is not None:
        return _day_hours(day)
    return None, None


def _day_hours(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    return start, start + timedelta(hours=23)


def _parquet_files(path: str) -> list[_File] | None:
    """Every Parquet file under `path` (a local or object-store directory); None if it does not exist."""
    filesystem, root = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return None
    listing = filesystem.get_file_info(pafs.FileSelector(root, recursive=True)) \
        if info.type == pafs.FileType.Directory else [info]
    files = []
    for entry in listing:
        if entry.type != pafs.FileType.File or not entry.path.endswith(".parquet"):
            continue
        relative = os.path.relpath(entry.path, root)
        day = _partition_day(relative)
        first, last = _day_hours(day) if day else (None, None)
        files.append(_File(f"{relative}|{entry.size}|{entry.mtime_ns}", first, last))
    return files


def _partition_day(relative_path: str) -> date | None:
    for part in relative_path.split("/")[:-1]:
        name, _, value = part.partition("=")
        if name == PARTITION_COLUMN:
            try:
                return date.fromisoformat(value)
            except ValueError:
                return None
    return None
