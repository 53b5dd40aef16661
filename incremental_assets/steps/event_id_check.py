"""The event_id_unique check of base_events and filtered_events (docs/rules.md 3): no event_id
twice within dedupe_lookback_days of loading, never null; one result per load hour.

It runs inside the hourly step, on the rows the step is about to write and the rows each table
will keep around them, before anything is written: a failure fails the step with nothing
written (its manifest items FAILED, its hours due again), so it blocks for real, and the daily
run never sees the rows. Its results still show as the assets' checks in the UI.
"""

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from dagster import AssetCheckKey, AssetCheckSpec, AssetKey, MetadataValue
from pyspark.sql import DataFrame

from incremental_assets.names import BASE_EVENTS, FILTERED_EVENTS
from incremental_assets.partitions import hourly_partitions
from incremental_assets.planning.hours import hour_key
from incremental_assets.transforms.event_id_copies import (
    COUNT_NAMES,
    compared_rows,
    counts_by_hour,
    in_range,
)
from resources.tables import RowRange, no_rows
from resources.warehouse import WarehouseResource

CHECK_NAME = "event_id_unique"
CHECKED_TABLES = (BASE_EVENTS, FILTERED_EVENTS)
EVENT_ID_CHECK_SPECS = [
    AssetCheckSpec(CHECK_NAME, asset=table, partitions_def=hourly_partitions, blocking=True,
                   description=f"Each event_id of {table} at most once within dedupe_lookback_days and never "
                               "null (the first-loaded copy wins); one result per load hour. Computed in the "
                               "hourly step before it writes: a failure fails the step and nothing is written.")
    for table in CHECKED_TABLES]


class DuplicateEventIdsError(RuntimeError):
    """The rows a step was about to write hold an event_id twice within the look-back, or none;
    `counts` are the check's counts per table and hour (`copies_once_written`)."""

    def __init__(self, message: str, counts: dict[str, dict[datetime, dict[str, int]]]):
        super().__init__(message)
        self.counts = counts


@dataclass(frozen=True)
class PendingWrite:
    """The rows a step is about to write to a table over its window, and the stored rows the
    write replaces besides the window's."""

    table: str
    rows: DataFrame
    replaced: Sequence[RowRange] = ()


def copies_once_written(warehouse: WarehouseResource, window_rows: RowRange, writes: Sequence[PendingWrite], *,
                        few_rows: bool = True) -> dict[str, dict[datetime, dict[str, int]]]:
    """Per table and load hour of the window: the counts the tables will show once the writes
    are done (rows checked, duplicate event_ids, null event_ids), computed before them, in one
    query. `window_rows`: the window's rows the writes replace (a catch-up run's: its apps').
    Hours without rows have none. `few_rows`: the window's rows are few enough to broadcast
    their ids (an hour's are; a week's backfill at 10M events is not)."""
    start, end = window = window_rows.start, window_rows.end
    lookback, tables = warehouse.settings.dedupe_lookback, warehouse.tables
    near, in_window = RowRange("load_tstamp", start - lookback, end + lookback), window_rows
    compared = None
    for write in writes:
        keys = sorted({r.key for r in [in_window, *write.replaced] if r.key} - {"event_id"})
        columns = ["event_id", "load_tstamp", *keys]
        stored = (tables.read_range(write.table, "load_tstamp", near.start, near.end, columns=columns)
                  if tables.exists(write.table) else
                  no_rows(warehouse.spark, ", ".join(
                      ["event_id string", "load_tstamp timestamp", *(f"{key} string" for key in keys)])))
        new = write.rows.select(*columns)
        rows = compared_rows(write.table, new.where(in_range(in_window)), stored, new.where(in_range(near)),
                             [in_window, *write.replaced], broadcast_ids=few_rows)
        compared = rows if compared is None else compared.unionByName(rows)
    counts = {write.table: {} for write in writes}
    for row in counts_by_hour(compared, lookback, window).collect():
        # Spark returns UTC here (session and process zone)
        counts[row["table"]][row["hour"].replace(tzinfo=timezone.utc)] = {n: int(row[n] or 0) for n in COUNT_NAMES}
    return counts


def outcome(counts: dict[str, int], scope: str) -> dict:
    """A check evaluation's fields (checks.evaluation_events) from one hour's counts."""
    return dict(
        passed=counts["duplicate_event_ids"] == 0 and counts["null_event_ids"] == 0,
        metadata={**{k: MetadataValue.int(v) for k, v in counts.items()}, "scope": MetadataValue.text(scope)},
        description=f"{counts['duplicate_event_ids']} duplicate and {counts['null_event_ids']} null "
                    f"event_id(s) in {counts['rows_checked']} rows ({scope})")


def outcomes_by_check(counts: dict[str, dict[datetime, dict[str, int]]],
                      hours: Sequence[datetime]) -> dict[AssetCheckKey, list[dict]]:
    """One outcome per table and load hour (an hour without rows passes with zeros)."""
    return {AssetCheckKey(AssetKey(table), CHECK_NAME): [
        {**outcome(by_hour.get(hour, dict.fromkeys(COUNT_NAMES, 0)), f"loads of {hour_key(hour)}"),
         "partition": hour_key(hour)} for hour in hours] for table, by_hour in counts.items()}


def failures(counts: dict[str, dict[datetime, dict[str, int]]]) -> list[str]:
    """Each table and hour that fails, in words (the step's error names them)."""
    return [f"{table} {hour_key(hour)}: {c['duplicate_event_ids']} duplicate and {c['null_event_ids']} null event_id(s)"
            for table, by_hour in counts.items() for hour, c in sorted(by_hour.items())
            if c["duplicate_event_ids"] or c["null_event_ids"]]
