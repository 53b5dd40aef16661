"""Which load hours the source table's files hold, from its Delta log only (no Spark, no data read).

A file's hours come from its min/max `load_tstamp` statistics; rows without a `load_tstamp`
count in the hour of their `collector_tstamp` (the load time rule of
`sources.schema.load_time`). Without usable statistics the file's `load_date`
partition stands for all its hours, and without either the file may hold any hour.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pyarrow as pa
from deltalake import DeltaTable

from incremental_assets.partitions import HOUR, floor_hour


def source_hours(table: DeltaTable, since: datetime, until: datetime) -> dict[datetime, str]:
    """Each load hour in [since, until) that source files may hold rows of, with a fingerprint
    of those files (it changes when a file holding the hour is added or removed)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return {}

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows

    files_by_hour: dict[datetime, list[str]] = {}
    for path, day, low, high, nulls, c_low, c_high in zip(
            column("path"), column("partition.load_date"), column("min.load_tstamp"),
            column("max.load_tstamp"), column("null_count.load_tstamp"),
            column("min.collector_tstamp"), column("max.collector_tstamp")):
        if day is not None and datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(days=1) <= since:
            continue  # a load day before the window: skip it without looking further
        first, last = file_hours(day, low, high, nulls, c_low, c_high)
        hour = max(first or since, floor_hour(since))
        stop = min(last + HOUR if last else until, until)
        while hour < stop:
            files_by_hour.setdefault(hour, []).append(path)
            hour += HOUR
    return {hour: hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()[:12]
            for hour, paths in files_by_hour.items()}


def file_hours(day, low, high, nulls, c_low, c_high) -> tuple[datetime | None, datetime | None]:
    """First and last load hour a file may hold; None where unknown."""
    if low is not None and high is not None and nulls == 0:
        return floor_hour(low), floor_hour(high)
    if low is not None and high is not None and c_low is not None and c_high is not None:
        return floor_hour(min(low, c_low)), floor_hour(max(high, c_high))  # null load_tstamps too
    if day is not None:
        start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        return start, start + timedelta(hours=23)
    return None, None



def source_fingerprints(source: str, since: datetime, until: datetime) -> tuple[int, dict[datetime, str]] | None:
    """The source table's version and `source_hours`; None when `source` is no Delta table."""
    if not DeltaTable.is_deltatable(source):
        return None
    table = DeltaTable(source)
    return table.version(), source_hours(table, since, until)
