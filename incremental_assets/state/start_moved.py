"""`start_date` moved later: what was processed before the new start leaves every table.

Only load hours from start_date's hour on exist (docs/rules.md 1), so after the move no run can
reach the hours before it: they are outside the partitions and outside every plan. The move
changes the rules digest, so every processed hour from the new start runs again; the first
hourly step after it (any range) first removes what lies before the start, in an order that a
crash anywhere only repeats:

1. the sessions that began before the start are queued (`sessions_to_refilter`, from the start's
   hour): the step derives them again from their events left, or removes them when none is;
2. the hour-keyed rows loaded before the start: base_events, event_copies (a copy before the
   start drops nothing any more), rejected_events, filtered_events and their counts;
3. the daily rows and the attribute states of event days before start_date's day, their users
   queued for attributes (before and again after the deletes: an attributes run that takes the
   first queue rows in between still sees the second; the users are those of either table, so
   a crash between the two deletes queues them again);
4. last, the ledger rows before the start (the day ledger's, then the hour ledger's): the
   marker that the removal is due, kept until everything above is done (`progress.before_start`
   reads it; when no hour is due otherwise, the plan runs the start's first hour for it).
"""

from __future__ import annotations

import uuid
from datetime import date

from pyspark.sql import functions as F

from incremental_assets.names import (
    DAY_LEDGER,
    HOUR_LEDGER,
    LIFECYCLE,
    SESSIONS_TO_REFILTER,
    USERS_TO_REFRESH,
)
from incremental_assets.state.contract import RowsBeforeStart, tables_removed_before_start
from incremental_assets.state.progress import BeforeStart, before_start
from incremental_assets.state.users_to_refresh import queued
from resources.warehouse import WarehouseResource

# Tables keyed by load time, and the column their rows are removed by; tables keyed by event
# day whose rows feed the attributes (the states after the daily rows): `state.contract`.
LOAD_TIME_TABLES = tables_removed_before_start(RowsBeforeStart.LOAD_TIME)
DAY_TABLES = tuple(name for name, _ in tables_removed_before_start(RowsBeforeStart.EVENT_DAY))


def _remove_before(warehouse: WarehouseResource, name: str, column: str, end) -> None:
    tables = warehouse.tables
    if tables.exists(name):
        tables.replace_range(name, tables.read(name).limit(0), column=column, start=None, end=end)


def _remove_days_before(warehouse: WarehouseResource, name: str, first_day: date) -> None:
    """Delete the event days before `first_day` by their values: an empty replace, read back
    from the table, is refused by delta-rs for the states (Spark reads their list of structs
    back as nullable, which the table's schema is not)."""
    tables = warehouse.tables
    if tables.exists(name):
        days = tables.read_range(name, "event_date", None, first_day, columns=["event_date"]).distinct().collect()
        tables.delete_where_in(name, "event_date", [r.event_date for r in days])


def _users_of_days_before(warehouse: WarehouseResource, first_day: date) -> list[str]:
    """The users with a daily row or an attribute state on an event day before `first_day`."""
    tables = warehouse.tables
    found: set[str] = set()
    for name in DAY_TABLES:
        if tables.exists(name):
            rows = tables.read_range(name, "event_date", None, first_day, columns=["domain_userid"]).distinct()
            found.update(r.domain_userid for r in rows.collect())
    return sorted(found)


def remove_rows_before_start(warehouse: WarehouseResource, run_id: str) -> BeforeStart | None:
    """Remove what lies before the start (the module's steps 1-4); None when nothing does."""
    settings, tables, spark = warehouse.settings, warehouse.tables, warehouse.spark
    found = before_start(settings)
    if found is None:
        return None
    start = found.first_hour
    if tables.exists(LIFECYCLE):
        began_before = (tables.read(LIFECYCLE, columns=["domain_sessionid", "first_load_tstamp"])
                        .where(F.col("first_load_tstamp") < F.lit(start))
                        .select("domain_sessionid", F.lit(start).alias("changed_from"),
                                F.lit(uuid.uuid4().hex).alias("append_id")))
        tables.append(SESSIONS_TO_REFILTER, began_before)
    for name, column in LOAD_TIME_TABLES:
        _remove_before(warehouse, name, column, start)
    names = _users_of_days_before(warehouse, found.first_day)
    if names:
        users = spark.createDataFrame([(u,) for u in names], "domain_userid string")
        tables.append(USERS_TO_REFRESH, queued(users, run_id))
        for name in DAY_TABLES:
            _remove_days_before(warehouse, name, found.first_day)
        tables.append(USERS_TO_REFRESH, queued(users, f"{run_id}-after"))
    _remove_before(warehouse, DAY_LEDGER, "event_date", found.first_day)
    _remove_before(warehouse, HOUR_LEDGER, "load_hour_tstamp", start)
    return found
