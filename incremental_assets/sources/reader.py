"""Reading the source events table (Delta, or plain Parquet) by load time.

Spark reads the Parquet files natively; for a Delta source the file list comes from the
Delta log (delta-rs), pruned on the `load_date` partition when the table has one, so an
hourly run reads the files of one or two load days, not the whole lake.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.sources.schema import PARTITION_COLUMN, conform_to_atomic, load_time, load_time_in


class SourceError(RuntimeError):
    """The source table is missing or unreadable; the message says what to do."""


def is_delta_table(path: str) -> bool:
    try:
        return DeltaTable.is_deltatable(path)
    except Exception:  # noqa: BLE001 - unreachable storage reads as "not a Delta table"
        return False


def require_source(path: str) -> None:
    """SourceError, saying what to set, when there is no table at the source path (nothing
    there, or a local directory with neither a Delta log nor a Parquet file)."""
    if "://" in path:
        return
    if not os.path.exists(path):
        raise SourceError(f"source table not found at {path!r}: set INCREMENTAL_SOURCE_PATH to a Delta "
                          "or Parquet table of atomic events (or run `make demo` to generate a sample)")
    if os.path.isdir(path) and not is_delta_table(path) and not any(
            name.endswith(".parquet") for _, _, names in os.walk(path) for name in names):
        raise SourceError(f"source at {path!r} is neither a Delta table nor readable Parquet: it holds no "
                          "_delta_log and no .parquet file; set INCREMENTAL_SOURCE_PATH to the events table")


def read_source(tables, path: str, load_start: datetime | None = None,
                load_end: datetime | None = None, version: int | None = None,
                partition_days: tuple[date, date] | None = None, undated_folders: bool = False) -> DataFrame:
    """Source rows whose load time (load_tstamp, else collector_tstamp) is in [load_start, load_end).

    `tables` is the warehouse's table store: a Delta source is read like any of our tables
    (Spark on the files the Delta log lists, with the table's schema, no footer scan), at
    `version` when given. `partition_days` (a `SourceSnapshot`'s) are the `load_date` folders
    the plan found the hours in; without them, the UTC dates of the load times. `undated_folders`
    (a `SourceSnapshot`'s): the folders without a date (null, or text that is no date) hold rows
    of the window too.
    """
    require_source(path)
    if is_delta_table(path):
        df = _read_delta(tables, path, load_start, load_end, version, partition_days, undated_folders)
    else:
        try:
            df = tables.spark.read.option("mergeSchema", "true").parquet(path)
        except Exception as exc:  # noqa: BLE001
            raise SourceError(f"source at {path!r} is neither a Delta table nor readable Parquet: "
                              f"{_java_message(exc)}") from exc
    df = conform_to_atomic(df)
    return df if load_start is None and load_end is None else df.where(load_time_in(load_start, load_end))


def without_load_hours(rows: DataFrame, hours) -> DataFrame:
    """`rows` but those whose load hour is one of `hours` (hours an operator skipped)."""
    hours = sorted(hours)
    return rows.where(~F.date_trunc("hour", load_time()).isin(hours)) if hours else rows


def _read_delta(tables, path: str, load_start, load_end, version: int | None,
                partition_days: tuple[date, date] | None, undated_folders: bool) -> DataFrame:
    table = DeltaTable(path, version=version)
    if PARTITION_COLUMN not in table.metadata().partition_columns:
        # Without the load_date partition every file is read; the load-time filter follows
        # (rows without a load_tstamp included: their load time is their collector_tstamp).
        return tables.read_path(path, version=version)
    first_day = load_start.date() if load_start is not None else None
    end_day = ((load_end - timedelta(microseconds=1)).date() + timedelta(days=1)) if load_end is not None else None
    if partition_days is not None:  # the folders the plan placed the hours in, if they reach further
        first_day = min(first_day, partition_days[0]) if first_day is not None else None
        end_day = max(end_day, partition_days[1] + timedelta(days=1)) if end_day is not None else None
    if _holds_dates(table) and not undated_folders:
        return tables.read_path_range(path, PARTITION_COLUMN, first_day, end_day, version=version)
    # A load_date held as text, or folders without a date that hold rows of the window: a
    # condition on the folders' values alone, by which Spark still reads only those folders.
    return tables.read_path(path, version=version).where(_in_folders(first_day, end_day, undated_folders))


def _holds_dates(table: DeltaTable) -> bool:
    return pa.types.is_date(pa.schema(table.schema().to_arrow()).field(PARTITION_COLUMN).type)


def _in_folders(first_day: date | None, end_day: date | None, undated: bool):
    """The rows of the load_date folders in [first_day, end_day), and of those without a date
    (null, or text that is no date) when `undated`."""
    value = F.col(PARTITION_COLUMN)
    # The planner's rule (sources.load_hours.ISO_DATE): other text is no date, whatever a cast makes of it.
    day = F.when(value.cast("string").rlike(r"^\d{4}-\d{2}-\d{2}$"), value.try_cast("date"))
    condition = F.lit(True)
    if first_day is not None:
        condition = condition & (day >= F.lit(first_day))
    if end_day is not None:
        condition = condition & (day < F.lit(end_day))
    return (condition | day.isNull()) if undated else condition


def _java_message(exc: Exception) -> str:
    """The first line of what the JVM said, rather than py4j's "An error occurred while calling ..."."""
    java = getattr(exc, "java_exception", None)
    text = java.getMessage() if java is not None else str(exc)
    return (text or str(exc)).strip().splitlines()[0]
