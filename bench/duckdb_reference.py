"""DuckDB baselines: what a full backfill computes, from the same source files, in one DuckDB process.

What a user would otherwise run on one machine: the same source Parquet files (the active
files of the source Delta table), the same rules (bench/duckdb_rules.py, one SQL definition
per rule), no incremental state. Two baselines:

- `duckdb_tables`: the two final tables (daily_aggregates, attributes), in memory, from the
  source columns the rules read;
- `duckdb_write_tables`: every table a full backfill writes with real row volume
  (WRITTEN_TABLES: base_events with all its columns, event_copies, rejected_events, the
  session tables, filtered_events, daily_aggregates, attributes), written as Parquet: one
  directory per table, hive-partitioned where the pipeline partitions the table, else one
  file. Its time is what "the same tables" costs DuckDB, writes included.

Left out of the written tables: the pipeline's bookkeeping, small and of no use to a one-shot
rebuild: filtered_events_counts (rows per load hour and event day), processed_load_hours
(one row per hour), daily_aggregation_manifest (per event day and load day),
processing_manifest (claims and results); and two queues a rebuild leaves empty
(sessions_to_refilter, attributes_users_to_refresh).

Where DuckDB cannot give the same values: Spark breaks ties between copies of an event loaded
at the same instant with the same collector_tstamp (but different contents) by xxhash64 of the
row, which DuckDB does not have; it uses its own row hash, so such a tie may keep another copy,
and event_copies.copy_hash and filtered_events.row_digest hold other numbers (bench/table_diff.py
leaves them out).
"""

from __future__ import annotations

import datetime
import shutil
import time
from pathlib import Path

import pyarrow as pa

from bench.duckdb_rules import RULE_COLUMNS, connect, create_all, quote
from incremental_assets.names import (
    ATTRIBUTES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    EVENT_COPIES,
    FILTERED_EVENTS,
    LIFECYCLE,
    QUARANTINED,
    REJECTED_EVENTS,
)

# (table, the pipeline's partition column or None), in the order they are written. Each name
# is the view or table of duckdb_rules that computes it; every partition column is a date.
WRITTEN_TABLES = (
    (BASE_EVENTS, "load_date"),
    (EVENT_COPIES, "load_date"),
    (REJECTED_EVENTS, None),
    (LIFECYCLE, None),
    (QUARANTINED, None),
    (FILTERED_EVENTS, "event_date"),
    (DAILY_AGGREGATES, "event_date"),
    (ATTRIBUTES, None),
)
SINGLE_FILE = "data.parquet"  # the one file of an unpartitioned table


def duckdb_tables(source_path: str, settings, as_of: datetime.date,
                  threads: int | None = None) -> tuple[pa.Table, pa.Table]:
    """(daily_aggregates, attributes) of a full backfill of the source at `source_path`, in memory.

    `settings` is an incremental_assets.settings.Settings; `as_of` the attributes' as-of day
    (the pipeline's settings.as_of_date(now)); `threads` caps DuckDB's threads.
    """
    con = connect(threads)
    try:
        create_all(con, source_path, settings, as_of, columns=RULE_COLUMNS)
        daily = con.sql(f"SELECT * FROM {DAILY_AGGREGATES} ORDER BY event_date, domain_userid").to_arrow_table()
        return daily, con.sql(f"SELECT * FROM {ATTRIBUTES} ORDER BY domain_userid").to_arrow_table()
    finally:
        con.close()


def duckdb_write_tables(source_path: str, settings, as_of: datetime.date, out_dir: str,
                        threads: int | None = None, memory_limit: str | None = None) -> dict:
    """Every table of WRITTEN_TABLES, as a full backfill of the source at `source_path` computes
    it, written as Parquet under `out_dir`/<table>/ (`out_dir` must not hold them yet).
    `threads`, `memory_limit`: see duckdb_rules.connect (base_events is held in memory whole,
    about 1 KB a row; what outgrows the limit spills to `out_dir`/.duckdb_tmp).

    Returns {"seconds": time from connecting to the last file written, "rows": {table: rows written}}.
    """
    out = Path(out_dir)
    spill = out / ".duckdb_tmp"
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    con = connect(threads, temp_directory=str(spill), memory_limit=memory_limit)
    try:
        create_all(con, source_path, settings, as_of)
        rows = {name: _write(con, name, partition_by, out / name) for name, partition_by in WRITTEN_TABLES}
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    return {"seconds": time.perf_counter() - started, "rows": rows}


def _write(con, name: str, partition_by: str | None, target: Path) -> int:
    """COPY one view or table to `target` (a hive-partitioned directory, or a directory with one
    file); the rows written."""
    if partition_by:
        sql = f"COPY {name} TO {quote(str(target))} (FORMAT parquet, PARTITION_BY ({partition_by}))"
    else:
        target.mkdir()
        sql = f"COPY {name} TO {quote(str(target / SINGLE_FILE))} (FORMAT parquet)"
    (rows,) = con.execute(sql).fetchone()
    return rows


def read_written(out_dir: str, name: str, columns: list[str] | None = None,
                 limit: int | None = None) -> pa.Table | None:
    """A table duckdb_write_tables wrote under `out_dir` (these columns, else all; at most
    `limit` rows), with its partition column; None when it wrote no file (a partitioned table
    without rows)."""
    partition_by = dict(WRITTEN_TABLES)[name]
    files = sorted(str(p) for p in (Path(out_dir) / name).rglob("*.parquet"))
    if not files:
        return None
    hive = (f"hive_partitioning = true, hive_types = {{'{partition_by}': 'DATE'}}" if partition_by
            else "hive_partitioning = false")
    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    con = connect()
    try:
        limited = "" if limit is None else f" LIMIT {int(limit)}"
        return con.sql(f"SELECT {selected} FROM read_parquet([{', '.join(quote(f) for f in files)}], {hive})"
                       f"{limited}").to_arrow_table()
    finally:
        con.close()
