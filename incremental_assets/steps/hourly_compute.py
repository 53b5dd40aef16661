"""What the hourly step (`steps/hourly.py`) reads and computes over load hours [start, end)
(docs/rules.md 2-5); the step writes it.

1. The source's rows of the window, at the version its fingerprints were taken from, but
   those of erased users (`forget`) and of hours an operator skipped.
2. Valid copies and rejected rows; the window's copies join the event_copies index.
3. Kept copies: decided against the copies recorded in the dedupe look-back before the window.
   Stored copies after the window that a copy of the window, kept or not, now dominates are
   removed from base_events and filtered_events (an earlier copy that arrives later wins).
4. Sessions touched by the window (or by a removed copy, or by a row of an earlier run of the
   window that the source no longer holds) are recomputed from all their events.
5. filtered_events for the window, and again for every touched session whose row changed in
   a field filtered rows carry (all the session's historic events are processed again).
   Those sessions are queued (`sessions_to_refilter`) before the new session rows are written
   and taken off the queue once their filtered rows are: a crash in between leaves them
   queued, and the next run derives them again.
Everything here is derived from the tables as they are, so a rerun of the same hours, after a
crash anywhere, computes and writes the same.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from incremental_assets.names import (
    BASE_EVENTS,
    EVENT_COPIES,
    FILTERED_EVENTS,
    LIFECYCLE,
    SESSIONS_TO_REFILTER,
    TABLE_PARTITIONS,
)
from incremental_assets.planning.hours import floor_hour, hours_between
from incremental_assets.sources.load_hours import SourceSnapshot, source_snapshot
from incremental_assets.sources.reader import read_source, without_load_hours
from incremental_assets.sources.schema import load_time
from incremental_assets.state.erasure_requests import erased_ids
from incremental_assets.state.skipped_hours import skipped_hours
from incremental_assets.transforms.base_events import (
    BROADCAST_VERDICTS_MAX_ROWS,
    COPY_COLUMNS,
    ValidatedRows,
    copies,
    copies_gone,
    copy_verdicts,
    dominated_later,
    kept_copies,
    validate,
)
from incremental_assets.transforms.erasure import without_erased
from incremental_assets.transforms.filtered_events import ROW_DIGEST, filtered_events, rows_by_load_hour_and_day
from incremental_assets.transforms.sessions import (
    LIFECYCLE_COLUMNS,
    SESSION_EVENT_COLUMNS,
    changed_sessions,
    quarantined_sessions,
    session_lifecycle,
    sessions_needing_update,
)
from resources.materialized import MaterializedSets, held_in_memory, materialized_rows
from resources.spark import broadcasts_allowed
from resources.tables import RowRange, no_rows
from resources.warehouse import WarehouseResource

LIFECYCLE_SCHEMA = ("domain_sessionid string, domain_userid string, user_id string, app_id string, "
                    "domain_sessionidx int, start_tstamp timestamp, end_tstamp timestamp, event_count long, "
                    "first_load_tstamp timestamp, last_load_tstamp timestamp, is_quarantined boolean, "
                    "quarantined_at timestamp")
REFILTER_SCHEMA = "domain_sessionid string, changed_from timestamp, append_id string"
# Session ids or copy keys up to this many rows (tens of MB) are broadcast to the joins over
# stored events (docs/performance.md).
BROADCAST_KEYS_MAX_ROWS = 500_000
COPIES_SCHEMA = ("event_id string, load_tstamp timestamp, collector_tstamp timestamp, copy_hash long, "
                 "domain_sessionid string")


@dataclass
class HourlyResults:
    """What one hourly run writes. The DataFrames in `materialized` are computed; the others
    are lazy, built on them; the short lists are collected."""

    start: datetime
    end: datetime
    snapshot: SourceSnapshot | None
    read: DataFrame  # the window's source rows, checked (valid and rejected)
    copies: DataFrame
    rejected: DataFrame
    kept: DataFrame  # base_events rows of the window
    dominated: RowRange  # stored copies after the window that a kept copy now dominates
    touched: DataFrame  # domain_sessionid of every recomputed session
    lifecycle: DataFrame  # their new rows (a session without events left has none)
    quarantined: DataFrame
    filtered: DataFrame  # filtered rows of the window and of the changed sessions
    changed: RowRange  # the changed sessions' filtered rows, replaced
    to_refilter: DataFrame  # the changed sessions, queued until their filtered rows are written
    refiltered: tuple[str, ...]  # append ids of the queue rows the filtered write takes off
    counts_range: tuple[datetime, datetime | None]  # load hours whose filtered counts are recomputed (None: on)
    few_rows: bool  # the window's kept rows are few enough to broadcast their ids (the check)
    read_at: datetime  # when it read the skipped hours: its ledger rows' processed_at
    revived: tuple[datetime, ...] = ()  # later load hours whose copies are decided again: run again
    app_ids: tuple[str, ...] | None = None  # a catch-up run's apps (None: every app's rows of the window)
    materialized: list[DataFrame] = field(default_factory=list)  # released once written
    facts: dict = field(default_factory=dict)  # for metadata: scan_from, counts of changes

    @property
    def counts_from_window_rows(self) -> bool:
        """Only the window's rows changed, all of them in hand: its counts come from them (a
        catch-up run holds one app's rows: the counts are read back)."""
        return not self.dominated.values and not self.changed.values and self.app_ids is None

    @property
    def window_rows(self) -> RowRange:
        """The rows of the window a write replaces: all of them, or a catch-up run's apps'."""
        if self.app_ids is None:
            return RowRange("load_tstamp", self.start, self.end)
        return RowRange("load_tstamp", self.start, self.end, key="app_id", values=self.app_ids)


def _read_or_empty(warehouse: WarehouseResource, name: str, schema, column: str | None = None, start=None,
                   end=None, columns=None) -> DataFrame:
    """The table's rows (those with start <= column < end when `column` is given), or no rows
    with `schema` while the table does not exist yet."""
    tables = warehouse.tables
    if not tables.exists(name):
        return no_rows(warehouse.spark, schema)
    if column is None:
        return tables.read(name, columns=columns)
    return tables.read_range(name, column, start, end, columns=columns)


def _few_to_broadcast(count: int | None, warehouse: WarehouseResource) -> bool:
    """Keys are broadcast when the session allows it and they are few: `count` rows (counted
    before) up to BROADCAST_KEYS_MAX_ROWS, or None for an hour's set held in memory."""
    return broadcasts_allowed(warehouse.spark) and (count is None or count <= BROADCAST_KEYS_MAX_ROWS)


def _broadcast_if(rows: DataFrame, count: int, warehouse: WarehouseResource) -> DataFrame:
    """`rows` marked for broadcast when they are few (`count` of them, counted before)."""
    return F.broadcast(rows) if _few_to_broadcast(count, warehouse) else rows


def compute(warehouse: WarehouseResource, start: datetime, end: datetime,
            app_ids: tuple[str, ...] | None = None) -> HourlyResults:
    """The window's results; with `app_ids`, a catch-up run (planning.app_units): the rows of
    those apps alone are processed and replaced (an app no longer declared has none: its rows
    go), the other apps' rows of the window stay as they are. The sets it materialized are
    `results.materialized`; if it fails, they are released here (a big window's are files)."""
    held = MaterializedSets()
    try:
        return _compute(warehouse, start, end, app_ids, held)
    except BaseException:
        held.release()
        raise


@dataclass
class _Window:
    """The window's source rows, read once and checked."""

    snapshot: SourceSnapshot | None
    checked: DataFrame  # valid and rejected rows of every app
    all_valid: DataFrame  # every app's valid copies: the window's copies index
    valid: DataFrame  # the selected apps' valid copies
    rejected: DataFrame
    in_apps: Column
    wide_files: str | None  # where wide sets are written as files (None: checkpoints)
    read_at: datetime


@dataclass
class _Copies:
    """Dedupe's outcome: the kept copies of the window, the later copies they dominate."""

    kept: DataFrame
    few_ids: bool
    dominated: DataFrame
    dominated_count: int
    dominated_rows: RowRange
    revived: tuple[datetime, ...]


@dataclass
class _Sessions:
    """The touched sessions, their new rows, and those whose filtered rows change."""

    stored: DataFrame  # the stored rows of the sessions near the window
    queued: DataFrame
    touched: DataFrame
    stored_events: DataFrame  # the touched sessions' earlier events, less the replaced and dominated
    lifecycle: DataFrame
    changed: list  # rows of (domain_sessionid, changed_from)
    changed_rows: RowRange
    scan_from: datetime


def _compute(warehouse: WarehouseResource, start: datetime, end: datetime, app_ids: tuple[str, ...] | None,
             materialized: MaterializedSets) -> HourlyResults:
    settings = warehouse.settings
    window = _read_window(warehouse, start, end, app_ids, materialized)
    copies_ = _decide_copies(warehouse, window, start, end, materialized)
    sessions = _touched_sessions(warehouse, window, copies_, start, end, materialized)
    # filtered_events (rules 5): the window's rows with their sessions as they are now, and the
    # earlier rows of every changed session derived again.
    lifecycle, changed_rows = sessions.lifecycle, sessions.changed_rows
    current = sessions.stored.join(lifecycle.select("domain_sessionid"), "domain_sessionid", "left_anti") \
        .select(*LIFECYCLE_COLUMNS).unionByName(lifecycle.select(*LIFECYCLE_COLUMNS))
    filter_settings = dict(event_names=settings.event_names, start_date=settings.start_date,
                           max_session_days=settings.max_session_days)
    filtered = filtered_events(copies_.kept, current, **filter_settings)
    if changed_rows.values:
        again = sessions.stored_events.where(F.col("domain_sessionid").isin(list(changed_rows.values)))
        filtered = filtered.unionByName(filtered_events(again, lifecycle, **filter_settings))
    # In load-time order within each event day: a later hour's changed sessions, whose rows are
    # recent, then sit in the last files of the day, and only those are rewritten (TableStore.replace).
    filtered = materialized(filtered.sortWithinPartitions(*TABLE_PARTITIONS[FILTERED_EVENTS], "load_tstamp"),
                            files_under=window.wide_files, partition_by=TABLE_PARTITIONS[FILTERED_EVENTS])

    to_refilter, append_id = queue_rows(warehouse, sessions.changed)
    first_count_hour = min(start, floor_hour(changed_rows.start)) if changed_rows.values else start
    # A changed session's filtered rows are replaced in every load hour from changed_from on,
    # later hours included (processed before this window when hours run out of order): their
    # counts follow, to the end of the table.
    counts_end = None if changed_rows.values else end + settings.dedupe_lookback \
        if copies_.dominated_rows.values else end
    queued_ids = {r.append_id for r in sessions.queued.select("append_id").distinct().collect()}
    return HourlyResults(
        start=start, end=end, snapshot=window.snapshot, read=window.checked, copies=copies(window.all_valid),
        app_ids=app_ids, rejected=window.rejected, kept=copies_.kept, dominated=copies_.dominated_rows,
        touched=sessions.touched, lifecycle=lifecycle, quarantined=quarantined_sessions(lifecycle),
        filtered=filtered, changed=changed_rows, to_refilter=to_refilter,
        refiltered=tuple(sorted(queued_ids | ({append_id} if sessions.changed else set()))),
        counts_range=(first_count_hour, counts_end), few_rows=copies_.few_ids, read_at=window.read_at,
        revived=copies_.revived, materialized=materialized.frames,
        facts={"scan_from": sessions.scan_from.isoformat(),
               "wide_rows_held_as": "files" if window.wide_files else "checkpoints",
               "copies_dominated": len(copies_.dominated_rows.values),
               "sessions_changed": len(changed_rows.values), "later_hours_to_rerun": len(copies_.revived)})


def _read_window(warehouse: WarehouseResource, start: datetime, end: datetime, app_ids: tuple[str, ...] | None,
                 materialized: MaterializedSets) -> _Window:
    """The source's rows of the window, checked, read once."""
    settings, tables = warehouse.settings, warehouse.tables
    snapshot = source_snapshot(settings.source, start, end)
    rows = read_source(tables, settings.source, start, end, version=snapshot.version if snapshot else None,
                       partition_days=snapshot.partition_days if snapshot else None,
                       undated_folders=snapshot.undated_folders if snapshot else False)
    # Read as if the source never held them (rules 1): erased users' rows, skipped hours' rows.
    # A skip recorded after `read_at` is one this run did not see: its ledger rows carry this
    # time, not their own, so the hour runs again (planning.reconcile.skipped_hours_run_again).
    read_at = datetime.now(timezone.utc)
    rows = without_erased(rows, erased_ids(settings))
    rows = without_load_hours(rows, [hour for hour in skipped_hours(settings) if start <= hour < end])
    validated = validate(rows, days_late_allowed=settings.days_late_allowed,
                         allow_null_dvce_tstamps=settings.allow_null_dvce_tstamps, app_ids=settings.app_ids)
    # The window's wide sets (source rows, kept copies, filtered rows): checkpointed, or written
    # as files when the window's rows would not fit in memory (resources.materialized).
    wide_files = None if held_in_memory(snapshot.rows_estimate if snapshot else None, len(validated.checked.columns),
                                        settings.checkpoint_values_max) else tables.root
    validated = ValidatedRows(materialized(validated.checked, files_under=wide_files))  # the source is read once
    # The copies index of the window is every selected app's (a catch-up run writes it whole).
    in_apps = F.lit(True) if app_ids is None else F.col("app_id").isin(list(app_ids))
    return _Window(snapshot=snapshot, checked=validated.checked, all_valid=validated.valid,
                   valid=validated.valid.where(in_apps), rejected=validated.rejected.where(in_apps), in_apps=in_apps,
                   wide_files=wide_files, read_at=read_at)


def _decide_copies(warehouse: WarehouseResource, window: _Window, start: datetime, end: datetime,
                   materialized: MaterializedSets) -> _Copies:
    """Dedupe (rules 3): against the copies recorded before the window; then the stored copies
    after it that the window's copies dominate; and the later hours to decide again."""
    lookback = warehouse.settings.dedupe_lookback
    earlier = _read_or_empty(warehouse, EVENT_COPIES, COPIES_SCHEMA, "load_tstamp", start - lookback, start,
                             columns=list(COPY_COLUMNS))
    verdicts = materialized(copy_verdicts(window.valid, earlier, lookback=lookback))
    few = broadcasts_allowed(warehouse.spark) and verdicts.count() <= BROADCAST_VERDICTS_MAX_ROWS
    # As files, laid out as the tables they are written to: their writes take these files (TableStore.replace).
    kept = materialized(kept_copies(window.valid, verdicts, broadcast_verdicts=few), files_under=window.wide_files,
                        partition_by=TABLE_PARTITIONS[BASE_EVENTS])
    # The check broadcasts the window's ids when they are few: an hour's, held in memory, or a big
    # window's kept rows, written as files and counted, up to the bound (a big window's ids took
    # longer broadcast than joined, and could run short of driver heap).
    few_ids = _few_to_broadcast(materialized_rows(kept), warehouse)
    later = _read_or_empty(warehouse, EVENT_COPIES, COPIES_SCHEMA, "load_tstamp", end, end + lookback,
                           columns=list(COPY_COLUMNS))
    # Every valid copy of the window dominates the later copies within the look-back, a dropped
    # one too (rules 3): a copy loaded 20 days after a kept one still drops the copy 20 days later.
    dominated = materialized(dominated_later(window.valid, later, lookback=lookback))
    dominated_copies = dominated.select("event_id").collect()
    dominated_ids = sorted({r.event_id for r in dominated_copies})
    # Copies an earlier run of the window recorded that the source no longer holds may have
    # dropped later copies, which must be decided again: their load hours run again.
    recorded = _read_or_empty(warehouse, EVENT_COPIES, COPIES_SCHEMA, "load_tstamp", start, end,
                              columns=list(COPY_COLUMNS)).select(*COPY_COLUMNS)
    gone = copies_gone(recorded, window.all_valid.select(*COPY_COLUMNS))
    revived = tuple(sorted({r.hour.replace(tzinfo=timezone.utc) for r in later.join(gone, "event_id", "left_semi")
                            .select(F.date_trunc("hour", "load_tstamp").alias("hour")).distinct().collect()}))
    return _Copies(kept=kept, few_ids=few_ids, dominated=dominated, dominated_count=len(dominated_copies),
                   dominated_rows=RowRange("load_tstamp", end, end + lookback, key="event_id",
                                           values=tuple(dominated_ids)), revived=revived)


def _touched_sessions(warehouse: WarehouseResource, window: _Window, copies_: _Copies, start: datetime,
                      end: datetime, materialized: MaterializedSets) -> _Sessions:
    """Sessions (rules 4): the window's, those of removed copies, and those of the rows a re-run
    of the window replaces (rows gone from the source since: deleted, erased, filtered out),
    recomputed from all their events."""
    settings, kept, dominated = warehouse.settings, copies_.kept, copies_.dominated
    queued = materialized(_read_or_empty(warehouse, SESSIONS_TO_REFILTER, REFILTER_SCHEMA))
    replaced = _read_or_empty(warehouse, BASE_EVENTS, kept.schema, "load_tstamp", start, end,
                              columns=["domain_sessionid", "app_id"]).where(window.in_apps).select("domain_sessionid")
    # Every use of the stored sessions below is about a session of a kept row, of a removed or
    # replaced copy or of the queue: those rows are read once, so no join below broadcasts or
    # shuffles the whole sessions table (it grows with the history; the window's sessions do not).
    near = (kept.select("domain_sessionid").unionByName(dominated.select("domain_sessionid"))
            .unionByName(replaced).unionByName(queued.select("domain_sessionid")))  # a semi-join needs no distinct
    stored = materialized(_read_or_empty(warehouse, LIFECYCLE, LIFECYCLE_SCHEMA)
                          .join(near, "domain_sessionid", "left_semi"))
    to_update = sessions_needing_update(kept, stored, max_session_days=settings.max_session_days)
    of_removed = (dominated.select("domain_sessionid").unionByName(replaced).distinct()
                  .join(stored.select("domain_sessionid", "first_load_tstamp"), "domain_sessionid", "left")
                  .select("domain_sessionid", F.col("first_load_tstamp").alias("scan_from")))
    touched_from = materialized(
        to_update.unionByName(of_removed)
        .unionByName(queued.select("domain_sessionid", F.col("changed_from").alias("scan_from")))
        .groupBy("domain_sessionid").agg(F.min("scan_from").alias("scan_from")))
    oldest, touched_count = touched_from.agg(F.min("scan_from"), F.count(F.lit(1))).first()
    # Spark sizes a checkpoint by the plan that made it, not by its rows: the touched sessions
    # and the dominated copies, few after an hour, are broadcast to the joins that pick them out
    # of the stored events (else each join shuffles days of stored events to find them).
    touched = _broadcast_if(touched_from.select("domain_sessionid"), touched_count, warehouse)
    floor = start - settings.session_lookback
    scan_from = max(oldest.replace(tzinfo=timezone.utc), floor) if oldest is not None else start
    stored_events = (_read_or_empty(warehouse, BASE_EVENTS, kept.schema, "load_tstamp", scan_from, None)
                     .join(touched, "domain_sessionid", "left_semi")
                     # the window's rows of these apps are replaced: the kept rows stand for them
                     .where(~((F.col("load_tstamp") >= F.lit(start)) & (F.col("load_tstamp") < F.lit(end))
                              & window.in_apps))
                     .join(_broadcast_if(dominated.select("event_id", "load_tstamp"), copies_.dominated_count,
                                         warehouse), ["event_id", "load_tstamp"], "left_anti"))
    # Only the columns the session rows need: the touched sessions' earlier events are wide rows,
    # and the session rows need a handful of their columns.
    session_events = materialized(stored_events.select(*SESSION_EVENT_COLUMNS).unionByName(
        kept.join(touched, "domain_sessionid", "left_semi").select(*SESSION_EVENT_COLUMNS)))
    lifecycle = materialized(session_lifecycle(session_events, max_session_days=settings.max_session_days))
    changed = (changed_sessions(lifecycle, stored.join(touched, "domain_sessionid", "left_semi"))
               .unionByName(queued.select("domain_sessionid", "changed_from"))
               .groupBy("domain_sessionid").agg(F.min("changed_from").alias("changed_from")).collect())
    changed_ids = tuple(sorted(r.domain_sessionid for r in changed))
    changed_from = min((r.changed_from for r in changed if r.changed_from is not None), default=start)
    # Never before scan_from: rows older than the session look-back are not read again, so
    # they must not be deleted either (rules 4 assume no session spans longer).
    changed_rows = RowRange("load_tstamp", max(changed_from.replace(tzinfo=timezone.utc), scan_from)
                            if changed_ids else start, None, key="domain_sessionid", values=changed_ids)
    return _Sessions(stored=stored, queued=queued, touched=touched, stored_events=stored_events, lifecycle=lifecycle,
                     changed=changed, changed_rows=changed_rows, scan_from=scan_from)


@dataclass
class HourFigures:
    """What one load hour of the window holds once written: the UI's per-partition numbers."""

    read: int = 0  # source rows read (of the selected app ids, less erased users' and skipped hours')
    kept: int = 0  # base_events rows
    rejected: dict[str, int] = field(default_factory=dict)  # rejected rows by reason
    filtered: dict[date, int] = field(default_factory=dict)  # filtered_events rows by event day


def figures_by_hour(start: datetime, end: datetime, *, read: DataFrame, kept: DataFrame, rejected: DataFrame,
                    filtered: DataFrame) -> dict[datetime, HourFigures]:
    """Per load hour of [start, end): rows read, kept, rejected by reason, filtered by event day.
    Small aggregations of the materialized rows, collected together (one query, not four); the
    filtered rows of earlier hours that changed sessions brought back are not the window's."""
    in_window = (F.col("load_tstamp") >= F.lit(start)) & (F.col("load_tstamp") < F.lit(end))

    def labelled(kind: str, counts: DataFrame, hour: str, label: Column) -> DataFrame:
        return counts.select(F.col(hour).alias("hour"), label.cast("string").alias("label"), "rows",
                             F.lit(kind).alias("kind"))

    def by_hour(rows: DataFrame, loaded: Column) -> DataFrame:
        return rows.groupBy(F.date_trunc("hour", loaded).alias("hour")).agg(F.count(F.lit(1)).alias("rows"))

    rejected_by_reason = rejected.groupBy("load_hour_tstamp", "reject_reason").agg(F.count(F.lit(1)).alias("rows"))
    counts = (labelled("kept", by_hour(kept, F.col("load_tstamp")), "hour", F.lit(None))
              .unionByName(labelled("read", by_hour(read, load_time()), "hour", F.lit(None)))
              .unionByName(labelled("rejected", rejected_by_reason, "load_hour_tstamp", F.col("reject_reason")))
              .unionByName(labelled("filtered", rows_by_load_hour_and_day(filtered.where(in_window)),
                                    "load_hour_tstamp", F.col("event_date"))))
    figures = {hour: HourFigures() for hour in hours_between(start, end)}
    for row in counts.collect():
        figure = figures.setdefault(row["hour"].replace(tzinfo=timezone.utc), HourFigures())  # Spark runs in UTC
        if row["kind"] == "kept":
            figure.kept = row["rows"]
        elif row["kind"] == "read":
            figure.read = row["rows"]
        elif row["kind"] == "rejected":
            figure.rejected[row["label"]] = row["rows"]
        else:
            figure.filtered[date.fromisoformat(row["label"])] = row["rows"]
    return figures


def queue_rows(warehouse: WarehouseResource, changed: list) -> tuple[DataFrame, str]:
    """The sessions_to_refilter rows of the changed sessions, and their append id (this run's)."""
    append_id = uuid.uuid4().hex
    rows = [(r.domain_sessionid, r.changed_from, append_id) for r in changed]
    return warehouse.spark.createDataFrame(rows, REFILTER_SCHEMA), append_id


def filtered_counts(warehouse: WarehouseResource, results: HourlyResults) -> DataFrame:
    """Filtered rows per (load hour, event day) of results.counts_range, from the rows in hand
    when only the window changed, else read back from filtered_events once it is written."""
    if results.counts_from_window_rows:
        return rows_by_load_hour_and_day(results.filtered, digest=True)
    start, end = results.counts_range
    rows = warehouse.tables.read_range(FILTERED_EVENTS, "load_tstamp", start, end)
    digests = [ROW_DIGEST] if ROW_DIGEST in rows.columns else []  # none on a lake from before them
    return rows_by_load_hour_and_day(rows.select("load_tstamp", "event_date", *digests), digest=True)
