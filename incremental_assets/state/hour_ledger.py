"""The hour ledger (`processed_load_hours`): what each load hour was last processed from (its
source files' fingerprint, the source version and table, the rules digest, the app ids), read
without Spark by the planners, and the rows the hourly step and `forget` write to it."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from incremental_assets.names import HOUR_LEDGER
from incremental_assets.planning.app_units import RecordedHour, catch_up_record, joined, split
from incremental_assets.planning.hours import HOUR, hours_between
from incremental_assets.planning.reconcile import (
    RUN_AGAIN,
    ProcessedAtVersion,
    ProcessedHour,
    hours_only_rearranged,
    versions_on_this_log,
)
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import SourceSnapshot, hours_changed_by_commits, source_snapshot
from resources.tables import read_delta_arrow, utc_datetimes

# The hour ledger's columns (written by the hourly step and by `forget`, read here).
LEDGER_SCHEMA = ("load_hour_tstamp timestamp, source_fingerprint string, rules_digest string, processed_at timestamp, "
                 "run_id string, source_version long, app_ids string, source_table_id string")


def read_ledger(settings: Settings) -> pa.Table | None:
    """The processed-hours ledger (`source_version`, `app_ids`, `source_table_id`: null in rows written
    before they were kept). A row from before app ids were recorded per hour, under today's rules
    and `app_ids`, reads as processed for today's app ids under today's digest."""
    table = read_delta_arrow(settings.table_path(HOUR_LEDGER))
    if table is None:
        return None
    for column, kind in (("source_version", pa.int64()), ("app_ids", pa.string()), ("source_table_id", pa.string())):
        if column not in table.column_names:
            table = table.append_column(column, pa.nulls(table.num_rows, kind))
    if settings.app_ids:
        legacy = pc.and_(pc.is_null(table["app_ids"]),
                         pc.equal(table["rules_digest"], settings.rules_digest_with_app_ids()))
        table = table.set_column(table.column_names.index("app_ids"), "app_ids",
                                 pc.if_else(legacy, joined(settings.app_ids), table["app_ids"]))
        table = table.set_column(table.column_names.index("rules_digest"), "rules_digest",
                                 pc.if_else(legacy, settings.rules_digest(), table["rules_digest"]))
    return table


def recorded_hours(settings: Settings) -> dict[datetime, RecordedHour]:
    """Per load hour, what the hour ledger records now (a catch-up run reads it as it begins)."""
    ledger = read_ledger(settings)
    if ledger is None:
        return {}
    columns = [ledger[name].to_pylist() for name in ("source_fingerprint", "rules_digest", "source_version",
                                                      "app_ids")]
    return {hour: RecordedHour(fingerprint, digest, version, split(apps), table_id)
            for hour, fingerprint, digest, version, apps, table_id
            in zip(utc_datetimes(ledger["load_hour_tstamp"]), *columns, ledger["source_table_id"].to_pylist())}


def app_ids_processed(ledger: pa.Table | None) -> dict[datetime, frozenset[str] | None]:
    """Per load hour, the app ids its rows were last processed for (None: every app)."""
    if ledger is None:
        return {}
    return {hour: split(apps) for hour, apps in zip(utc_datetimes(ledger["load_hour_tstamp"]),
                                                    ledger["app_ids"].to_pylist())}


def source_version_before(settings: Settings, run_id: str) -> int | None:
    """The latest source version that a run other than `run_id` processed hours from (the hour
    ledger); None before any."""
    table = read_ledger(settings)
    if table is None:
        return None
    versions = [version for version, run in zip(table["source_version"].to_pylist(), table["run_id"].to_pylist())
                if version is not None and run != run_id]
    return max(versions, default=None)


def processed_hours(settings: Settings, ledger: pa.Table | None = None) -> dict[datetime, ProcessedHour]:
    """What each load hour was last processed from: its source fingerprint under its rules."""
    table = ledger if ledger is not None else read_ledger(settings)
    if table is None:
        return {}
    # Column by column, timestamps through numpy: a year is 8,760 rows, read at every sensor tick.
    return {hour: ProcessedHour(fingerprint_under_rules(source, rule), at)
            for hour, source, rule, at in zip(utc_datetimes(table["load_hour_tstamp"]),
                                              table["source_fingerprint"].to_pylist(),
                                              table["rules_digest"].to_pylist(),
                                              utc_datetimes(table["processed_at"]))}


def hours_under_other_rules(ledger: pa.Table | None, digest: str) -> frozenset[datetime]:
    """The processed load hours whose rules digest is not `digest`, the settings' now: a change
    of app_ids, event_names or a rejection rule makes them due again."""
    if ledger is None:
        return frozenset()
    other = ledger.filter(pc.fill_null(pc.not_equal(ledger["rules_digest"], digest), True))
    return frozenset(utc_datetimes(other["load_hour_tstamp"]))


def unchanged_by_maintenance(processed: dict[datetime, ProcessedHour], ledger: pa.Table | None,
                             source: dict[datetime, str], snapshot: SourceSnapshot | None,
                             digest: str) -> dict[datetime, ProcessedHour]:
    """`processed`, where an hour whose files changed only by commits that rearrange rows
    (compaction, Z-order: `dataChange` false in the Delta log) counts as processed from its
    files as they are now (`only_rearranged`)."""
    out = dict(processed)
    for hour in only_rearranged(processed, ledger, source, snapshot, digest):
        out[hour] = ProcessedHour(source[hour], processed[hour].processed_at)
    return out


def only_rearranged(processed: dict[datetime, ProcessedHour], ledger: pa.Table | None,
                    source: dict[datetime, str], snapshot: SourceSnapshot | None, digest: str) -> set[datetime]:
    """The processed hours whose files differ from those they were processed from by commits
    that rearrange rows alone. Followed from the source version each hour was processed at, on
    the same log only (`versions_on_this_log`); an hour whose commits cannot be read any more
    (the log's clean-up) stays changed: it runs again, once."""
    if ledger is None or snapshot is None or snapshot.version is None:
        return set()
    # Files changed under the same rules (a rules change always runs the hour again); an hour
    # processed empty counts too: a compacted file spans the empty hours between its rows.
    differing = [hour for hour, done in processed.items() if source.get(hour) and done.fingerprint != source[hour]
                 and (done.fingerprint == "" or done.fingerprint.endswith(f"@{digest}"))]
    if not differing:
        return set()
    recorded = {hour: ProcessedAtVersion(table_id, version) for hour, version, table_id in zip(
        utc_datetimes(ledger["load_hour_tstamp"]), ledger["source_version"].to_pylist(),
        ledger["source_table_id"].to_pylist()) if version is not None}
    candidates = versions_on_this_log({hour: recorded[hour] for hour in differing if hour in recorded},
                                      snapshot.table_id, snapshot.version)
    if not candidates:
        return set()
    return hours_only_rearranged(candidates, hours_changed_by_commits(snapshot.path, min(candidates.values()),
                                                                      snapshot.version))


def maintenance_verdicts(settings: Settings, besides: tuple[datetime, datetime]) -> list[tuple]:
    """Hour-ledger rows (LEDGER_SCHEMA) for the processed hours outside `besides` whose files
    only maintenance rewrote since: what they were processed from, now as the source's files
    and version are. Recorded once, the plan reads no commit for them again, and the log's
    clean-up of those commits cannot make them due."""
    ledger = read_ledger(settings)
    if ledger is None or not ledger.num_rows:
        return []
    hours = utc_datetimes(ledger["load_hour_tstamp"])
    snapshot = source_snapshot(settings.source, min(hours), max(hours) + HOUR)
    digest = settings.rules_digest()
    source = {hour: fingerprint_under_rules(fingerprint, digest)
              for hour, fingerprint in (snapshot.fingerprints if snapshot else {}).items()}
    verified = only_rearranged(processed_hours(settings, ledger), ledger, source, snapshot, digest)
    verified -= set(hours_between(*besides))
    return [(hour, snapshot.fingerprints[hour], digest, at, run_id, snapshot.version, apps, snapshot.table_id)
            for hour, at, run_id, apps in zip(hours, utc_datetimes(ledger["processed_at"]),
                                              ledger["run_id"].to_pylist(), ledger["app_ids"].to_pylist())
            if hour in verified]


def fingerprint_under_rules(source: str, rules: str) -> str:
    """An hour's data as the plan compares it: its files under the rules ("" without files)."""
    return f"{source}@{rules}" if source else ""


# -- the rows the hourly step writes ---------------------------------------------------------

def run_again_rows(spark, hours: Iterable[datetime], *, digest: str, run_id: str, now: datetime) -> DataFrame:
    """Rows that make `hours` due again (RUN_AGAIN): a catch-up's hours before its first write
    (a failure after it leaves its apps' rows part-written, which a run of every app replaces),
    or later hours whose copies a window decides again (written before the window's own rows,
    so a crash in between runs both again). The run's own rows replace them once it completes."""
    return spark.createDataFrame([(hour, RUN_AGAIN, digest, now, run_id, None, None, None) for hour in hours],
                                 LEDGER_SCHEMA)


def processed_rows(spark, settings: Settings, hours: Iterable[datetime], *, snapshot: SourceSnapshot | None,
                   read_at: datetime, run_id: str, app_ids: tuple[str, ...] | None,
                   recorded: dict[datetime, RecordedHour]) -> DataFrame:
    """The rows of the hours a run processed: what each was processed from, when it was read, and
    for which app ids (with declared `app_ids`: all of them, or after a catch-up run for
    `app_ids` the ones each hour held when it began (`recorded`), with the run's added and its
    removed taken off; null: every app). A catch-up run records the data it read only where the
    other apps' rows were processed from the same (`app_units.catch_up_record`)."""
    fingerprints = snapshot.fingerprints if snapshot else {}
    version = snapshot.version if snapshot else None
    table_id = snapshot.table_id if snapshot else None
    digest, declared = settings.rules_digest(), frozenset(settings.app_ids)

    def apps(hour: datetime) -> str | None:
        if not declared:
            return None
        if app_ids is None:
            return joined(declared)
        before = recorded[hour].app_ids if hour in recorded else None
        return joined(((before or frozenset()) | set(app_ids)) & declared)

    def read(hour: datetime) -> tuple[str, int | None, str | None, str | None]:
        fingerprint = fingerprints.get(hour, "")
        if app_ids is None:
            return fingerprint, version, digest, table_id
        kept = catch_up_record(recorded.get(hour), fingerprint, version, digest)
        same = hour not in recorded or kept == (fingerprint, version, digest)
        return (*kept, table_id if same else recorded[hour].table_id)

    rows = [(hour, fingerprint, rules, read_at, run_id, source_version, apps(hour), read_from)
            for hour in hours for fingerprint, source_version, rules, read_from in [read(hour)]]
    return spark.createDataFrame(rows, LEDGER_SCHEMA)


def maintenance_verdict_rows(spark, settings: Settings, besides: tuple[datetime, datetime]) -> DataFrame | None:
    """`maintenance_verdicts` as rows to merge; None when there is none."""
    rows = maintenance_verdicts(settings, besides)
    return spark.createDataFrame(rows, LEDGER_SCHEMA) if rows else None
