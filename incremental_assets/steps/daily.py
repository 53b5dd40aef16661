"""The event-day steps: daily_aggregates over a range of event days, and attributes.

Each is one transaction (`StepTransaction`): claim, compute (`daily_compute`), the writes in the
declared order, close, and for the days their ledger rows last. The queue of users to refresh
comes before the rows it describes: a crash in between only queues a user twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from incremental_assets.names import (
    ATTRIBUTE_STATES,
    ATTRIBUTES,
    DAILY_AGGREGATES,
    DAY_LEDGER,
    TABLE_PARTITIONS,
    USERS_TO_REFRESH,
)
from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.steps.daily_compute import (
    AttributesUpdate,
    DailyResults,
    DayFigures,
    aggregate_days,
    attributes_update,
    figures_by_day,
    users_to_refresh,
)
from resources.manifest import abandoned_lock_check
from resources.manifest_io_manager import StepDeclaration, StepTransaction
from resources.manifest_items import split_item_id
from resources.materialized import release
from resources.tables import RowRange, WriteResult, rows_collected_at_most
from resources.warehouse import WarehouseResource

DAILY_STEP = StepDeclaration(
    name="daily", assets=(DAILY_AGGREGATES,),
    writes=(
        (USERS_TO_REFRESH, DAILY_AGGREGATES),  # first: it compares the days' rows as stored with their rebuild
        (ATTRIBUTE_STATES, DAILY_AGGREGATES),
        (DAILY_AGGREGATES, DAILY_AGGREGATES),
    ),
    markers=((DAY_LEDGER, DAILY_AGGREGATES),),
)
ATTRIBUTES_STEP = StepDeclaration(
    name="attributes", assets=(ATTRIBUTES,),
    writes=(
        # The states of attributes new to the table first (any rows a daily run wrote of them
        # since they were declared are replaced): a crash before the table's commit leaves the
        # table with the versions it held, so the next run computes the same states again.
        (ATTRIBUTE_STATES, ATTRIBUTES),
        (ATTRIBUTE_STATES, ATTRIBUTES),
        (ATTRIBUTES, ATTRIBUTES),
        (USERS_TO_REFRESH, ATTRIBUTES),  # the queue rows the update consumed
    ),
)


@dataclass
class DailyOutcome:
    results: DailyResults
    figures: dict[date, DayFigures]
    written: dict[str, dict[str, WriteResult]]


def run_daily_step(context, warehouse: WarehouseResource) -> DailyOutcome:
    """daily_aggregates of the run's event days, each rebuilt from all its filtered rows."""
    window = context.partition_time_window
    first_day, end_day = window.start.date(), window.end.date()
    days = RowRange("event_date", first_day, end_day)
    with StepTransaction(context, warehouse, DAILY_STEP) as step:
        results = aggregate_days(warehouse, first_day, end_day, context.run_id)
        try:
            figures = figures_by_day(warehouse, results, first_day, end_day)
            # A few days' rows, and the queue's and ledger's (narrow): the table store may collect them.
            small = sum(f.rows for f in figures.values()) <= rows_collected_at_most(len(results.daily.columns))
            step.append(USERS_TO_REFRESH, users_to_refresh(warehouse.tables, results, first_day, end_day,
                                                           context.run_id), small=True)
            if results.states is not None:
                step.replace(ATTRIBUTE_STATES, results.states, rows=[days],
                             partition_by=TABLE_PARTITIONS[ATTRIBUTE_STATES])
            step.replace(DAILY_AGGREGATES, results.daily, rows=[days],
                         partition_by=TABLE_PARTITIONS[DAILY_AGGREGATES], small=small)
            step.close({"days": f"{first_day}..{end_day - timedelta(days=1)}"})
            step.replace(DAY_LEDGER, results.ledger, rows=[days], small=True)
        finally:
            for df in (results.daily, results.states):
                if df is not None:
                    release(df)
    return DailyOutcome(results, figures, step.written)


def run_attributes_step(context, warehouse: WarehouseResource,
                        as_of: date) -> tuple[AttributesUpdate, dict[str, dict[str, WriteResult]]]:
    """attributes as of `as_of`: the queued users', or everyone's when the update is full."""
    with StepTransaction(context, warehouse, ATTRIBUTES_STEP) as step:
        running = _daily_runs_in_progress(context, warehouse)
        update = attributes_update(warehouse, as_of, warehouse.settings.run_type, in_progress=running.__contains__)
        try:
            if update.backfill is not None:
                step.delete(ATTRIBUTE_STATES, column="attribute", values=update.backfilled)
                step.append(ATTRIBUTE_STATES, update.backfill, partition_by=TABLE_PARTITIONS[ATTRIBUTE_STATES])
            if update.full:
                step.overwrite(ATTRIBUTES, update.rows)
            else:  # the queued users' rows are few after an hour (more after a backfill: the store stages them)
                step.replace_keys(ATTRIBUTES, update.rows, key="domain_userid", keys=update.keys, small=True)
            if update.consumed:
                step.delete(USERS_TO_REFRESH, column="append_id", values=update.consumed)
            step.close({})
        finally:
            if update.backfill is not None:
                release(update.backfill)
    return update, step.written


def _daily_runs_in_progress(context, warehouse: WarehouseResource) -> set[str]:
    """The daily runs that may still commit: those holding a daily_aggregates item the manifest's
    lock rules do not count as abandoned (a run whose process died, or that Dagster reports
    finished, holds nothing: its queue rows are consumed)."""
    abandoned = abandoned_lock_check(context.instance, warehouse.settings.max_lock_age_hours)
    return {state.open_lock.run_id for item, state in warehouse.manifest.unsettled_states().items()
            if state.status is ItemStatus.LOCKED and split_item_id(item)[0] == DAILY_AGGREGATES
            and abandoned(state.open_lock) is None}
