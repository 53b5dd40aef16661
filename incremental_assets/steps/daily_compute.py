"""What the event-day steps compute (docs/rules.md 6-7); `steps/daily.py` writes it.

- `aggregate_days`: daily_aggregates of a range of event days, each from all its filtered
  rows; the ledger rows that say so (written after the table: the completion marker); and the
  users whose rows of these days the rebuild changes (a daily row or a state added, removed or
  different), queued for attributes (written before the table and the states: a crash in
  between only queues a user twice).
  With declared attributes, also their states for these days (written before the table).
- `attributes_update`: attributes as of a day. Recomputed in full when there is no table yet,
  the day moved, the declared attributes changed, or `run_type=full`; otherwise only the
  queued users (`incremental`), or the window metrics of everyone, and the new and the
  queued users whole (`last_n_days`). A declared attribute new to the table first gets the states of every day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from incremental_assets.names import (
    ATTRIBUTE_STATES,
    ATTRIBUTES,
    DAILY_AGGREGATES,
    FILTERED_EVENTS,
    USERS_TO_REFRESH,
)
from incremental_assets.planning.attribute_declarations import VERSIONS_COLUMN, AttributeDeclaration
from incremental_assets.planning.default_attributes import (
    AS_OF_COLUMN,
    KEY_COLUMN,
    from_daily,
    from_states,
    held_attribute_keys,
    recorded_versions,
)
from incremental_assets.state.day_ledger import ledger_state
from incremental_assets.state.users_to_refresh import queued
from incremental_assets.transforms.attribute_states import (
    attribute_states,
    check_properties,
    declared_values,
    with_declared_attributes,
)
from incremental_assets.transforms.attributes import (
    periodic,
    refresh_window_metrics,
    user_attributes,
    users_an_as_of_move_changes,
    users_with_changed_rows,
)
from incremental_assets.transforms.daily_aggregates import daily_aggregates, rows_by_day_and_load_day
from resources.materialized import materialized
from resources.tables import TableStore
from resources.warehouse import WarehouseResource


@dataclass
class DailyResults:
    daily: DataFrame
    ledger: DataFrame
    states: DataFrame | None = None  # the states of these days (of the attributes daily_aggregates does not hold)
    declared: tuple[AttributeDeclaration, ...] = ()


def aggregate_days(warehouse: WarehouseResource, first_day: date, end_day: date, run_id: str) -> DailyResults:
    tables = warehouse.tables
    # One snapshot for the daily rows, the states and the ledger: the ledger is computed when it
    # is written, after the table, and an unpinned Spark read would see the rows an hourly run
    # committed meanwhile (recorded as aggregated, the day would never be rebuilt for them).
    filtered = tables.read_path_range(tables.path(FILTERED_EVENTS), "event_date", first_day, end_day,
                                      version=tables.version(FILTERED_EVENTS))
    declared = from_states(warehouse.settings.declared_attributes())
    check_properties(filtered.schema, declared)
    daily = materialized(daily_aggregates(filtered))
    ledger = rows_by_day_and_load_day(filtered).select(
        "event_date", "load_date", "rows_aggregated",
        F.lit(0).cast("long").alias("rows_pending"),
        F.lit(datetime.now(timezone.utc)).alias("last_rebuilt_at"),
        F.lit(run_id).alias("last_rebuilt_run_id"), "digest_aggregated")

    # Read twice: by the comparison of `users_to_refresh`, then by the write.
    states = materialized(attribute_states(filtered, declared)) if declared else None
    return DailyResults(daily=daily, ledger=ledger, states=states, declared=tuple(declared))


def users_to_refresh(tables: TableStore, results: DailyResults, first_day: date, end_day: date,
                     run_id: str) -> DataFrame:
    """The queue rows of the users whose rows of these days the rebuild changes: read from the
    tables as they are before the rebuild is written."""
    changed = _changed(tables, DAILY_AGGREGATES, results.daily, first_day, end_day)
    if results.states is not None:
        keys = sorted({d.state_key for d in results.declared})  # states no declared attribute reads are left out
        changed = changed.unionByName(_changed(tables, ATTRIBUTE_STATES, results.states, first_day, end_day,
                                               F.col("attribute").isin(keys)))
    return queued(changed.distinct(), run_id)


def _changed(tables: TableStore, table: str, rows: DataFrame, first_day: date, end_day: date,
             where: Column | None = None) -> DataFrame:
    """The users whose stored rows of `table` on days [first_day, end_day) (those `where` keeps)
    differ from `rows`, their rebuild; every user of both when the table does not hold the
    rebuild's columns yet."""
    if not tables.exists(table):
        return rows.select(KEY_COLUMN)
    stored = tables.read_range(table, "event_date", first_day, end_day)
    if set(rows.columns) - set(stored.columns):
        return rows.select(KEY_COLUMN).unionByName(stored.select(KEY_COLUMN))
    return users_with_changed_rows(stored if where is None else stored.where(where), rows)


@dataclass
class DayFigures:
    """One rebuilt event day: the UI's per-partition numbers."""

    rows: int = 0  # daily_aggregates rows (one per active user)
    rows_aggregated: int = 0  # filtered rows the day is built from
    aggregated_before: int = 0  # as the daily manifest recorded them before this rebuild
    pending_before: int = 0  # late rows held back (below min_rows_to_process)
    unaccounted_before: int = 0  # filtered - aggregated - pending: new, late or removed rows

    @property
    def reason(self) -> str:
        """Why the day was rebuilt, in words, from the daily manifest as it stood."""
        parts = []
        if self.unaccounted_before > 0:
            parts.append(f"{self.unaccounted_before} new or late rows")
        elif self.unaccounted_before < 0:
            parts.append(f"{-self.unaccounted_before} rows removed by a rerun")
        if self.pending_before:
            parts.append(f"{self.pending_before} pending rows")
        if not parts:
            return "no change recorded since the last rebuild (manual or repeated run)"
        return ", ".join(parts) + (" (first build)" if not self.aggregated_before else "")


def figures_by_day(warehouse: WarehouseResource, results: DailyResults, first_day: date,
                   end_day: date) -> dict[date, DayFigures]:
    """Per event day of [first_day, end_day): its rows now and the manifest's account before the
    rebuild (call before the daily manifest is rewritten)."""
    days = [date.fromordinal(n) for n in range(first_day.toordinal(), end_day.toordinal())]
    figures = {day: DayFigures() for day in days}
    filtered, aggregated, pending = ledger_state(warehouse.settings)
    for (day, _), n in filtered.items():
        if day in figures:
            figures[day].unaccounted_before += n
    for (day, _), n in aggregated.items():
        if day in figures:
            figures[day].aggregated_before += n
            figures[day].unaccounted_before -= n
    for (day, _), n in pending.items():
        if day in figures:
            figures[day].pending_before += n
            figures[day].unaccounted_before -= n
    # One pass over the materialized daily rows: a user-day's `events` are its filtered rows, so their
    # sum is what the daily manifest records as aggregated (its ledger would re-read them).
    for row in results.daily.groupBy("event_date").agg(F.count(F.lit(1)).alias("rows"),
                                                       F.sum("events").alias("aggregated")).collect():
        figure = figures.setdefault(row.event_date, DayFigures())
        figure.rows, figure.rows_aggregated = row.rows, row.aggregated or 0
    return figures


@dataclass
class AttributesUpdate:
    rows: DataFrame
    full: bool  # overwrite the table; else replace the rows of `keys`
    keys: DataFrame | None
    consumed: tuple[str, ...]  # append ids of the queue rows this update covers
    how: str  # in words, for the materialization
    declared: tuple[AttributeDeclaration, ...] = ()
    backfill: DataFrame | None = None  # every day's states of the attributes new to the table
    backfilled: tuple[str, ...] = ()  # the state keys `backfill` holds
    new: tuple[AttributeDeclaration, ...] = ()  # the declared attributes the table did not hold


@dataclass
class _Stored:
    as_of: date | None  # None: no attributes table yet
    versions: str | None  # the declared attributes it holds (VERSIONS_COLUMN)


def _stored(warehouse: WarehouseResource) -> _Stored:
    if not warehouse.tables.exists(ATTRIBUTES):
        return _Stored(None, None)
    table = warehouse.tables.read(ATTRIBUTES)
    columns = ["attributes_as_of", *([VERSIONS_COLUMN] if VERSIONS_COLUMN in table.columns else [])]
    row = table.select(*columns).limit(1).first()
    if row is None:
        return _Stored(None, None)
    return _Stored(row[0], row[1] if len(columns) == 2 else None)


def last_event_day(warehouse: WarehouseResource) -> date | None:
    """The latest event day daily_aggregates holds rows of (None while it holds none), from the
    daily manifest (delta-rs, a small table) rather than a scan of daily_aggregates."""
    _, aggregated, _ = ledger_state(warehouse.settings)
    return max((day for (day, _), rows in aggregated.items() if rows), default=None)


@dataclass
class _DeclaredStates:
    states: DataFrame | None  # the states the attributes merged from states read (None: there are none)
    backfill: DataFrame | None  # every day's states of `backfilled`
    backfilled: tuple[str, ...]  # state keys no attribute the table holds reads: computed from every day
    new: tuple[AttributeDeclaration, ...] = ()  # the declared attributes the table does not hold


def _declared_states(warehouse: WarehouseResource, declared: tuple[AttributeDeclaration, ...],
                     stored: _Stored) -> _DeclaredStates:
    """The states the values merge: those stored, and every day's states of the state keys no
    attribute the table holds reads (computed from every filtered row, late rows still pending
    included). A new attribute that reads the same rows as one the table holds (another
    period or aggregation of them) finds its states kept already. States no declared attribute
    reads stay until table maintenance drops them. The attributes computed from daily_aggregates
    have no states: they are new when the table does not hold them."""
    tables = warehouse.tables
    held = held_attribute_keys(stored.versions) if stored.as_of is not None else set()
    new_from_daily = tuple(d for d in from_daily(declared) if d.key not in held)
    merged = from_states(declared)
    if not merged:
        return _DeclaredStates(None, None, (), new_from_daily)
    have_states = tables.exists(ATTRIBUTE_STATES)
    held_with_states = held if have_states else set()
    new = tuple(d for d in merged if d.key not in held_with_states)
    kept = {d.state_key for d in merged if d.key in held_with_states}
    missing = tuple({d.state_key: d for d in new if d.state_key not in kept}.values())
    backfilled = tuple(d.state_key for d in missing)
    backfill = None
    if missing:
        filtered = tables.read(FILTERED_EVENTS)
        check_properties(filtered.schema, missing)
        backfill = materialized(attribute_states(filtered, missing))
    states = None
    if have_states:
        states = tables.read(ATTRIBUTE_STATES).where(~F.col("attribute").isin(list(backfilled)))
    if backfill is not None:
        states = backfill if states is None else states.unionByName(backfill)
    return _DeclaredStates(states, backfill, backfilled, (*new_from_daily, *new))


def _with_declared(rows: DataFrame, states: DataFrame | None, declared: tuple[AttributeDeclaration, ...],
                   as_of: date, users: DataFrame | None = None) -> DataFrame:
    """`rows` (`user_attributes`: the attributes computed from daily_aggregates) with the others
    merged from `states` (of `users` only when given), and the versions they were computed with."""
    merged = from_states(declared)
    if merged:
        values = None  # declared, but nothing aggregated yet: every value is its default
        if states is not None:
            if users is not None:
                states = states.join(users, KEY_COLUMN, "left_semi")
            values = declared_values(states, merged, as_of=as_of)
        rows = with_declared_attributes(rows, values, merged)
    return _ordered(rows, declared)


def _ordered(rows: DataFrame, declared: tuple[AttributeDeclaration, ...]) -> DataFrame:
    """The user, the attributes in their declared order, the as-of day, and the versions (none
    for the default declaration alone)."""
    versions = recorded_versions(declared)
    return rows.select(KEY_COLUMN, *[d.name for d in declared], AS_OF_COLUMN,
                       *([F.lit(versions).alias(VERSIONS_COLUMN)] if versions is not None else []))


def _with_changed_declarations(stored_rows: DataFrame, daily: DataFrame, found: _DeclaredStates,
                               declared: tuple[AttributeDeclaration, ...], as_of: date) -> DataFrame:
    """The stored rows with the attributes new to the table (added, or changed: a new version)
    computed for every user, and those no longer declared dropped."""
    new_keys = {d.key for d in found.new}
    unchanged = {d.name for d in declared if d.key not in new_keys}
    rows = stored_rows.select(KEY_COLUMN, AS_OF_COLUMN, *[c for c in stored_rows.columns if c in unchanged])
    new_from_daily, new_merged = from_daily(found.new), from_states(found.new)
    if new_from_daily:
        values = user_attributes(daily, as_of=as_of, declared=new_from_daily).drop(AS_OF_COLUMN)
        rows = with_declared_attributes(rows, values, new_from_daily)
    if new_merged:
        rows = with_declared_attributes(rows, declared_values(found.states, new_merged, as_of=as_of), new_merged)
    return _ordered(rows, declared)


def attributes_update(warehouse: WarehouseResource, as_of: date, run_type: str,
                      in_progress: Callable[[str], bool] = lambda _append_id: False) -> AttributesUpdate:
    """`in_progress(append_id)`: whether the daily run that queued those rows may still commit
    (its rows are left queued: the daily rows they announce are not readable yet)."""
    tables = warehouse.tables
    declared = warehouse.settings.declared_attributes()
    queue = tables.read(USERS_TO_REFRESH) if tables.exists(USERS_TO_REFRESH) else None
    appended = sorted(r.append_id for r in queue.select("append_id").distinct().collect()) if queue else []
    waiting = [append_id for append_id in appended if in_progress(append_id)]
    consumed = tuple(append_id for append_id in appended if append_id not in waiting)
    if queue is not None and waiting:
        queue = queue.where(~F.col("append_id").isin(waiting))
    # Read after the queue was judged: the daily runs whose rows are consumed have committed.
    daily = tables.read(DAILY_AGGREGATES)
    stored = _stored(warehouse)
    found = _declared_states(warehouse, declared, stored)
    extra = {"declared": declared, "backfill": found.backfill, "backfilled": found.backfilled, "new": found.new}
    if (run_type == "incremental" and stored.as_of is not None and stored.as_of < as_of
            and stored.versions == recorded_versions(declared)):
        rows = _as_of_moved_rows(tables, daily, queue, found, declared, stored.as_of, as_of)
        return AttributesUpdate(rows, True, None, consumed,
                                f"attributes_as_of moved from {stored.as_of}: the users with a day entering the "
                                "attributes or leaving a window recomputed, the others carried", **extra)
    if run_type == "full" or stored.as_of is None or stored.as_of != as_of:
        reason = ("run_type=full" if run_type == "full" else "no table yet" if stored.as_of is None
                  else f"attributes_as_of moved from {stored.as_of}")
        rows = _with_declared(user_attributes(daily, as_of=as_of, declared=declared), found.states, declared, as_of)
        return AttributesUpdate(rows, True, None, consumed, f"every user recomputed ({reason})", **extra)
    if stored.versions != recorded_versions(declared):
        # Only the attributes that changed are computed for every user; the queued users whole.
        rows = _with_changed_declarations(tables.read(ATTRIBUTES), daily, found, declared, as_of)
        how = "the declared attributes changed: the new ones computed for every user"
        if queue is not None:
            users = queue.select("domain_userid").distinct()
            computed = user_attributes(daily.join(users, KEY_COLUMN, "left_semi"), as_of=as_of, declared=declared)
            fresh = _with_declared(computed, found.states, declared, as_of, users)
            rows = rows.join(users, "domain_userid", "left_anti").unionByName(fresh)
            how += ", the users whose daily rows or states changed recomputed"
        return AttributesUpdate(rows, True, None, consumed, how, **extra)
    if run_type == "last_n_days":
        rows = _last_n_days_rows(tables, daily, queue, found, declared, as_of)
        return AttributesUpdate(rows, True, None, consumed, "window metrics of every user recomputed, "
                                "new users and those whose daily rows or states changed added whole", **extra)
    if queue is None:
        users = daily.select("domain_userid").limit(0)
        how = "no user changed"
    else:
        users = queue.select("domain_userid").distinct()
        how = "the users whose daily rows or states changed recomputed"
    rows = _with_declared(user_attributes(daily.join(users, KEY_COLUMN, "left_semi"), as_of=as_of, declared=declared),
                          found.states, declared, as_of, users)
    return AttributesUpdate(rows, False, users, consumed, how, **extra)


def _as_of_moved_rows(tables: TableStore, daily: DataFrame, queue: DataFrame | None, found: _DeclaredStates,
                      declared: tuple[AttributeDeclaration, ...], stored_as_of: date, as_of: date) -> DataFrame:
    """Every user's row when the as-of day moved on (after midnight): the users with a day
    entering the attributes or leaving a window, and those queued, recomputed; the others carried."""
    window_days = {d.period_days for d in declared if d.period_days}
    users = users_an_as_of_move_changes(daily, stored_as_of, as_of, window_days)
    if queue is not None:
        users = users.unionByName(queue.select("domain_userid")).distinct()
    carried = (tables.read(ATTRIBUTES).join(users, "domain_userid", "left_anti")
               .withColumn("attributes_as_of", F.lit(as_of)))
    computed = user_attributes(daily.join(users, KEY_COLUMN, "left_semi"), as_of=as_of, declared=declared)
    return carried.unionByName(_with_declared(computed, found.states, declared, as_of, users))


def _last_n_days_rows(tables: TableStore, daily: DataFrame, queue: DataFrame | None, found: _DeclaredStates,
                      declared: tuple[AttributeDeclaration, ...], as_of: date) -> DataFrame:
    """Every user's row with run_type last_n_days: the window metrics of everyone recomputed,
    new users and the queued ones whole (their queue rows are consumed, so no later run would
    correct the lifetime values their changed days left stale)."""
    queued_users = queue.select(KEY_COLUMN).distinct() if queue is not None else None
    stored_rows = tables.read(ATTRIBUTES)
    if queued_users is not None:
        stored_rows = stored_rows.join(queued_users, KEY_COLUMN, "left_anti")
    longest = max((d.period_days for d in periodic(declared)), default=None)
    window = daily if longest is None else daily.where(F.col("event_date") >= F.lit(as_of - timedelta(days=longest)))
    new_users = window.select(KEY_COLUMN).distinct().join(stored_rows, KEY_COLUMN, "left_anti")
    if queued_users is not None:
        new_users = new_users.unionByName(queued_users).distinct()
    new_rows = user_attributes(daily.join(new_users, KEY_COLUMN, "left_semi"), as_of=as_of, declared=declared)
    return _with_declared(refresh_window_metrics(stored_rows, window, new_rows, as_of=as_of, declared=declared),
                          found.states, declared, as_of)
