"""The daily ledger: filtered rows per (load hour, event day), and per event day the rows
aggregated and the rows pending. The late-day plan's inputs are read here and its pending
counts written here, with delta-rs only (small tables, no Spark).

Invariant: for every event day, rows aggregated + rows pending = filtered rows.
"""

from __future__ import annotations

from datetime import date, datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from incremental_assets.names import DAILY_MANIFEST, FILTERED_COUNTS
from incremental_assets.planning.late_days import LateDaysPlan, conservation_check, days_to_process
from incremental_assets.settings import Settings
from resources.tables import read_delta_arrow


def plan_late_days(settings: Settings, load_start: datetime, load_end: datetime) -> LateDaysPlan:
    """Which event days to rebuild after filtered_events landed for loads in [load_start, load_end).

    Inputs are derived, so a rerun plans the same: new rows = the window's filtered rows per
    (event day, load day); a day's stored skipped count = its filtered rows outside the window
    that no rebuild has aggregated yet. Days not rebuilt get their pending count recorded.
    """
    counts = read_delta_arrow(settings.table_path(FILTERED_COUNTS))
    if counts is None or counts.num_rows == 0:
        return LateDaysPlan(days=[], skipped={})
    new_rows: dict[tuple[date, date], int] = {}
    total: dict[date, int] = {}
    new_total: dict[date, int] = {}
    for row in counts.to_pylist():
        day = row["event_date"]
        total[day] = total.get(day, 0) + row["rows"]
        if load_start <= row["load_hour_tstamp"] < load_end:
            key = (day, row["load_date"])
            new_rows[key] = new_rows.get(key, 0) + row["rows"]
            new_total[day] = new_total.get(day, 0) + row["rows"]
    aggregated = aggregated_by_day(settings)
    skipped = {day: max(0, total[day] - new_total[day] - aggregated.get(day, 0)) for day in new_total}
    plan = days_to_process(new_rows, {d: n for d, n in skipped.items() if n}, reprocess_days=settings.reprocess_days,
                           min_rows_to_process=settings.min_rows_to_process,
                           start_date=settings.start_date.date())
    pending = {day: total[day] - aggregated.get(day, 0) for day in new_total if day not in plan.days
               and day >= settings.start_date.date()}
    record_pending(settings, pending)
    return plan


def aggregated_by_day(settings: Settings) -> dict[date, int]:
    table = read_delta_arrow(settings.table_path(DAILY_MANIFEST), ["event_date", "rows_aggregated"])
    if table is None:
        return {}
    return {row["event_date"]: row["rows_aggregated"] for row in table.to_pylist()}


def record_pending(settings: Settings, pending: dict[date, int]) -> None:
    """Store each day's pending (late, not yet aggregated) row count in daily_aggregation_manifest."""
    if not pending:
        return
    source = pa.table({
        "event_date": pa.array(list(pending), pa.date32()),
        "rows_aggregated": pa.array([0] * len(pending), pa.int64()),
        "rows_pending": pa.array(list(pending.values()), pa.int64()),
        "last_rebuilt_at": pa.array([None] * len(pending), pa.timestamp("us", tz="UTC")),
        "last_rebuilt_run_id": pa.array([None] * len(pending), pa.string()),
    })
    path = settings.table_path(DAILY_MANIFEST)
    if not DeltaTable.is_deltatable(path):
        write_deltalake(path, source, mode="append")
        return
    (DeltaTable(path).merge(source, predicate="t.event_date = s.event_date", source_alias="s",
                            target_alias="t")
     .when_matched_update({"rows_pending": "s.rows_pending"})
     .when_not_matched_insert_all()
     .execute())


def days_loaded_between(settings: Settings, start: datetime, end: datetime) -> set[date]:
    """The event days of the filtered rows loaded in [start, end)."""
    counts = read_delta_arrow(settings.table_path(FILTERED_COUNTS), ["event_date", "load_hour_tstamp"])
    if counts is None:
        return set()
    return {row["event_date"] for row in counts.to_pylist() if start <= row["load_hour_tstamp"] < end}


def rows_accounted_for(settings: Settings) -> dict:
    """Per event day, filtered rows against rows aggregated + rows pending, and the days where
    they differ (`broken`: filtered - aggregated - pending)."""
    filtered: dict = {}
    counts = read_delta_arrow(settings.table_path(FILTERED_COUNTS), ["event_date", "rows"])
    for row in counts.to_pylist() if counts is not None else []:
        filtered[row["event_date"]] = filtered.get(row["event_date"], 0) + row["rows"]
    aggregated, pending = {}, {}
    ledger = read_delta_arrow(settings.table_path(DAILY_MANIFEST), ["event_date", "rows_aggregated", "rows_pending"])
    for row in ledger.to_pylist() if ledger is not None else []:
        aggregated[row["event_date"]] = row["rows_aggregated"] or 0
        pending[row["event_date"]] = row["rows_pending"] or 0
    return {"filtered": filtered, "aggregated": aggregated, "pending": pending,
            "broken": conservation_check(filtered, aggregated, pending)}
