"""What hourly_load_sensor tells the catalog besides the runs it launches, as events of its tick
(the daemon stores them; a preview of the tick stores nothing):

- the source's partitions: each closed load hour that holds data is reported as materialized,
  by its loader (Dagster's partition status counts materializations only, never observations),
  with its rows (`dagster/partition_row_count`) and its fingerprint as its data version;
  again when its files change, with 0 rows when they are gone (planning/source_reports.py);
- the work due: the plan the sensor would apply, with the text `incremental-assets limits`
  prints, observed on the `plans` asset whenever it changed.
"""

import hashlib
import json
from collections.abc import Callable
from datetime import datetime

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterEventType,
    MetadataValue,
    TableColumn,
    TableSchema,
)

from incremental_assets.automation.plan_job import plan_observation
from incremental_assets.names import DATA_VERSION_TAG, PLANS, SOURCE_EVENTS
from incremental_assets.operator.operations import describe_limits
from incremental_assets.planning.hours import floor_hour, hour_key, parse_hour_key
from incremental_assets.planning.plans import Plan
from incremental_assets.planning.source_reports import NO_FILES, hours_to_report
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import SourceSnapshot, rows_by_hour

# A source first seen with months of hours is reported over several ticks, the oldest first.
HOURS_REPORTED_PER_TICK = 240
# The metadata entry of a `plans` observation that names the work due it shows.
DUE_DIGEST = "due_digest"


def reported_versions(instance) -> dict[datetime, str | None]:
    """Each source hour's version (data version) as last reported to the instance."""
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        AssetKey(SOURCE_EVENTS), DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG])
    return {parse_hour_key(partition): values.get(DATA_VERSION_TAG) for partition, values in tags.items()}


def source_columns_metadata(snapshot: SourceSnapshot) -> dict:
    if not snapshot.columns:
        return {}
    return {"columns": MetadataValue.json(snapshot.columns),
            "dagster/column_schema": TableSchema(columns=[TableColumn(name, kind)
                                                          for name, kind in snapshot.columns.items()])}


def source_hour_reports(instance, snapshot: SourceSnapshot, *, since: datetime, now: datetime
                        ) -> list[AssetMaterialization]:
    """The closed load hours whose files changed since they were last reported (or never were),
    each as a materialization of its source partition with its rows."""
    hours = hours_to_report(snapshot.fingerprints, reported_versions(instance), since=since,
                            closed_before=floor_hour(now), limit=HOURS_REPORTED_PER_TICK)
    if not hours:
        return []
    rows = rows_by_hour(snapshot.path, snapshot.version, [h for h, v in hours.items() if v != NO_FILES])
    columns = source_columns_metadata(snapshot)

    def row_count(hour: datetime, version: str) -> dict:
        if version == NO_FILES:
            return {"dagster/partition_row_count": MetadataValue.int(0)}
        return {} if rows is None else {"dagster/partition_row_count": MetadataValue.int(rows.get(hour, 0))}

    return [AssetMaterialization(
        SOURCE_EVENTS, partition=hour_key(hour), tags={DATA_VERSION_TAG: version},
        description="the loader's rows of this load hour, as hourly_load_sensor found them in the source's log",
        metadata={**row_count(hour, version), "fingerprint": version, "source_version": str(snapshot.version),
                  **columns})
        for hour, version in hours.items()]


def due_digest(plan: Plan) -> str:
    """What the work due consists of, whenever it is planned: its hours (with their rows), days
    and attributes under these settings."""
    content = [plan.settings_digest, [[h.hour.isoformat(), h.reason, h.rows] for h in plan.hours],
               [[d.day.isoformat(), d.reason] for d in plan.days], list(plan.attributes),
               [d.isoformat() for d in plan.waiting]]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:12]


def last_due(instance) -> dict | None:
    """The figures of the work due the latest `plans` observation shows (None: it shows other
    work, e.g. plan_job's, or there is none)."""
    records = instance.fetch_observations(AssetKey(PLANS), limit=1).records
    metadata = records[0].asset_observation.metadata if records and records[0].asset_observation else {}
    return {name: entry.value for name, entry in metadata.items()} if DUE_DIGEST in metadata else None


def due_observation(settings: Settings, plan: Plan, now: datetime) -> AssetObservation:
    """The plan of the work due on the `plans` asset, with `incremental-assets limits`' text."""
    return plan_observation(plan, limits=describe_limits(settings, now), extra={DUE_DIGEST: due_digest(plan)})


def changed_due_observation(instance, settings: Settings, now: datetime, *, hours_due: bool,
                            plan_due: Callable[[], Plan]) -> list[AssetObservation]:
    """The work due (`plan_due()`, planned only when hours are due or the latest observation shows
    work), observed when it differs from what the latest `plans` observation shows: a tick that
    finds nothing new adds nothing."""
    last = last_due(instance)
    if not hours_due and not (last and (last.get("load_hours") or last.get("event_days"))):
        return []
    plan = plan_due()
    if last is not None and last[DUE_DIGEST] == due_digest(plan):
        return []
    return [due_observation(settings, plan, now)]
