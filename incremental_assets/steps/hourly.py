"""The hourly step: one transaction over load hours [start, end) for the four load-hour assets.

Claim, compute (`hourly_compute.compute`), check (`event_id_check`), the writes in the order of
`HOURLY_STEP`, close, ledger markers. A crash anywhere leaves what the next run needs to redo
it: the changed sessions stay queued until their filtered rows are written, a catch-up's hours
are due again for every app before its first write, and the hours' ledger rows, which the
planners read, come last.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from incremental_assets.names import (
    BASE_EVENTS,
    EVENT_COPIES,
    FILTERED_COUNTS,
    FILTERED_EVENTS,
    HOUR_LEDGER,
    HOURLY_ASSETS,
    HOURLY_TURN,
    LIFECYCLE,
    PREVIEW_ROWS,
    QUARANTINED,
    REJECTED_EVENTS,
    SESSIONS_TO_REFILTER,
    TABLE_PARTITIONS,
)
from incremental_assets.planning.app_units import RecordedHour, joined
from incremental_assets.planning.hours import hours_between
from incremental_assets.sources.reader import require_source
from incremental_assets.state import hour_ledger
from incremental_assets.state.progress import unit_items_fail_locked
from incremental_assets.state.start_moved import remove_rows_before_start
from incremental_assets.steps.event_id_check import (
    DuplicateEventIdsError,
    PendingWrite,
    copies_once_written,
    failures,
)
from incremental_assets.steps.hourly_compute import (
    HourFigures,
    HourlyResults,
    compute,
    figures_by_hour,
    filtered_counts,
)
from resources.manifest_io_manager import StepDeclaration, StepTransaction
from resources.materialized import release
from resources.tables import RowRange, WriteResult, rows_collected_at_most
from resources.warehouse import WarehouseResource

HOURLY_STEP = StepDeclaration(
    name="hourly", assets=HOURLY_ASSETS, turn=HOURLY_TURN,
    writes=(
        (HOUR_LEDGER, BASE_EVENTS),  # a catch-up's hours due again for every app, before its first write
        (EVENT_COPIES, BASE_EVENTS),
        (REJECTED_EVENTS, BASE_EVENTS),
        (BASE_EVENTS, BASE_EVENTS),
        (SESSIONS_TO_REFILTER, LIFECYCLE),  # the changed sessions, queued before their rows change
        (LIFECYCLE, LIFECYCLE),
        (QUARANTINED, QUARANTINED),
        (FILTERED_EVENTS, FILTERED_EVENTS),
        (FILTERED_COUNTS, FILTERED_EVENTS),
        (SESSIONS_TO_REFILTER, FILTERED_EVENTS),  # taken off the queue once their filtered rows are written
        (HOUR_LEDGER, FILTERED_EVENTS),  # later hours whose copies are decided again: due again
    ),
    # The hours' own ledger rows, then the hours only source maintenance rewrote, recorded as
    # processed from their files as they are now (the plan then reads no commit for them again).
    markers=((HOUR_LEDGER, FILTERED_EVENTS), (HOUR_LEDGER, FILTERED_EVENTS)),
)
LEDGER_KEY = ("load_hour_tstamp",)


@dataclass
class HourlyOutcome:
    """What the step did, for the assets' metadata and the run's log."""

    results: HourlyResults
    figures: dict[datetime, HourFigures]
    copies: dict  # the event_id check's counts per table and hour (event_id_check)
    written: dict[str, dict[str, WriteResult]]  # per asset: the tables written for it
    quarantined_preview: list  # the first quarantined sessions' rows (Row), collected


def run_hourly_step(context, warehouse: WarehouseResource, app_ids: tuple[str, ...] | None,
                    limits: str) -> HourlyOutcome:
    """The step over the run's partition window; with `app_ids`, a catch-up run (its unit's items,
    those apps' rows alone). Raises DuplicateEventIdsError (with its counts) when the rows about
    to be written fail the event_id check: nothing is written and the items are FAILED."""
    window = context.partition_time_window
    # No source table is a precondition, checked before the claim: nothing is left fail-locked.
    # A source that is there but unreadable fails inside the claim, as any failed read does.
    require_source(warehouse.settings.source)
    with StepTransaction(context, warehouse, HOURLY_STEP, unit=None if app_ids is None else joined(app_ids)) as step:
        if (moved := remove_rows_before_start(warehouse, context.run_id)) is not None:
            context.log.info(f"start_date moved later: removed what {moved.hours} load hour(s) and {moved.days} "
                             f"event day(s) before {moved.first_hour:%Y-%m-%d %H:%M} left in the tables")
        recorded = hour_ledger.recorded_hours(warehouse.settings) if app_ids is not None else {}
        if app_ids is None:
            _resolve_catch_ups(context, warehouse, window)
        results = compute(warehouse, window.start, window.end, app_ids=app_ids)
        try:
            copies = _check_copies(warehouse, results)
            figures = figures_by_hour(window.start, window.end, read=results.read, kept=results.kept,
                                      rejected=results.rejected, filtered=results.filtered)
            _commit(step, warehouse, results, figures, context.run_id, limits, recorded)
            # The sets are released below: the preview the materialization shows is taken first.
            preview = results.quarantined.limit(PREVIEW_ROWS).collect()
        finally:  # written, refused by the check, or failed
            for df in results.materialized:
                release(df)
    return HourlyOutcome(results, figures, copies, step.written, preview)


def _check_copies(warehouse: WarehouseResource, results: HourlyResults) -> dict:
    """The blocking check, on the rows about to be written: a failure leaves the tables as they were."""
    copies = copies_once_written(warehouse, results.window_rows, [
        PendingWrite(BASE_EVENTS, results.kept, [results.dominated]),
        PendingWrite(FILTERED_EVENTS, results.filtered, [results.dominated, results.changed])],
        few_rows=results.few_rows)
    if failed := failures(copies):
        raise DuplicateEventIdsError(
            f"{len(failed)} load hour(s) would hold an event_id twice within dedupe_lookback_days or a null "
            f"one, so nothing was written: {'; '.join(failed[:5])}. The hours stay FAILED until resolved "
            "(`incremental-assets manifest resolve`) once the cause is found (docs/operations.md, Checks)",
            counts=copies)
    return copies


def _commit(step: StepTransaction, warehouse: WarehouseResource, results: HourlyResults,
            figures: dict[datetime, HourFigures], run_id: str, limits: str,
            recorded: dict[datetime, RecordedHour]) -> None:
    """The writes in HOURLY_STEP's order, the close, the ledger markers."""
    start, end, app_ids = results.start, results.end, results.app_ids
    within = {} if app_ids is None else {"key": "app_id", "values": app_ids}
    source_rows = sum(f.read for f in figures.values())  # the cost model's (`planning.estimates`)
    # An hour's rows are few: the table store may collect them rather than stage files.
    small = source_rows <= rows_collected_at_most(len(results.kept.columns))
    spark, settings = warehouse.spark, warehouse.settings
    run_again = {"digest": settings.rules_digest(), "run_id": run_id, "now": datetime.now(timezone.utc)}
    if app_ids is not None:
        step.merge(HOUR_LEDGER, hour_ledger.run_again_rows(spark, hours_between(start, end), **run_again),
                   keys=LEDGER_KEY, small=True)
    step.replace(EVENT_COPIES, results.copies, rows=[RowRange("load_tstamp", start, end)],
                 partition_by=TABLE_PARTITIONS[EVENT_COPIES], small=small)
    step.replace(REJECTED_EVENTS, results.rejected, rows=[RowRange("load_hour_tstamp", start, end, **within)],
                 small=small)
    step.replace(BASE_EVENTS, results.kept, rows=[results.window_rows, results.dominated],
                 partition_by=TABLE_PARTITIONS[BASE_EVENTS], small=small)
    if results.changed.values:
        step.append(SESSIONS_TO_REFILTER, results.to_refilter, small=True)
    step.replace_keys(LIFECYCLE, results.lifecycle, key="domain_sessionid", keys=results.touched, small=small)
    step.replace_keys(QUARANTINED, results.quarantined, key="domain_sessionid", keys=results.touched, small=small)
    step.replace(FILTERED_EVENTS, results.filtered, rows=[results.window_rows, results.dominated, results.changed],
                 partition_by=TABLE_PARTITIONS[FILTERED_EVENTS], small=small)
    # Counts per (load hour, event day): few, whatever the window.
    step.replace(FILTERED_COUNTS, filtered_counts(warehouse, results),
                 rows=[RowRange("load_hour_tstamp", *results.counts_range)], small=True)
    if results.refiltered:
        step.delete(SESSIONS_TO_REFILTER, column="append_id", values=results.refiltered)
    if results.revived:
        step.merge(HOUR_LEDGER, hour_ledger.run_again_rows(spark, results.revived, **run_again),
                   keys=LEDGER_KEY, small=True)
    step.close({"limits": limits, "source_rows": source_rows})
    step.replace(HOUR_LEDGER, hour_ledger.processed_rows(
        spark, settings, hours_between(start, end), snapshot=results.snapshot, read_at=results.read_at, run_id=run_id,
        app_ids=app_ids, recorded=recorded), rows=[RowRange("load_hour_tstamp", start, end)], small=True)
    if (verdicts := hour_ledger.maintenance_verdict_rows(spark, settings, (start, end))) is not None:
        step.merge(HOUR_LEDGER, verdicts, keys=LEDGER_KEY, small=True)


def _resolve_catch_ups(context, warehouse: WarehouseResource, window) -> None:
    """A run of every app processes every declared app's rows of its hours, and removes the
    others': the failed catch-ups of those hours (fail-locked, for any app ids, declared or taken
    out since) have nothing left to do, and are resolved rather than left locked for good."""
    items = unit_items_fail_locked(warehouse.manifest, hours_between(window.start, window.end))
    if items:
        warehouse.manifest.resolve(items, note="a run of the hour for every app processes it", run_id=context.run_id)
        context.log.info(f"resolved {len(items)} failed catch-up item(s) of these hours: {items[0]} ...")
