"""Asset checks: the pipeline's promises, each with numeric metadata under stable keys
(the UI plots them per run).

In a run a check looks at what the run wrote (the range in its partition-range tags);
launched on its own (the asset's Checks tab) it looks at the whole table.

- `event_id_unique` (base_events, filtered_events) is computed inside the hourly step, before
  it writes (`event_id_check`); its evaluations go through `evaluation_events` below, after the
  step's outputs when it passes, each linked to its hour's materialization of the run
  (`run_materializations`): Dagster shows a check's partition as passed or failed only when its
  latest evaluation names the partition's latest materialization.
- `end_after_start` (sessions_lifecycle_manifest): end_tstamp >= start_tstamp.
- `rows_aggregated_plus_pending_equal_filtered` (daily_aggregates): for every event day,
  rows aggregated + rows pending = filtered rows (filtered_events_counts against
  daily_aggregation_manifest, read with delta-rs). Runs in attributes_job, after a plan's
  days are rebuilt; a day planned but not yet rebuilt would fail it in between.
- `columns_unchanged` (the source, severity WARN; in hourly_job): its columns now (its Delta
  log) against those of the source version the previous hourly run read (the hour ledger).
- `no_stale_locks` (every asset, severity WARN): no manifest item of the asset held by a
  PROCESSING lock older than `max_lock_age_hours`.

Every check yields its evaluations through `evaluation_events`, not as `AssetCheckResult`s:
to link an AssetCheckResult to the materialization it evaluated, Dagster lists every partition
of the asset when the check is unpartitioned and the run is a partition range (a cost that
grows with the partitions since start_date), where one query of the asset records finds the
same materialization.
"""


from datetime import datetime, timedelta, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetRecordsFilter,
    MetadataValue,
    Output,
    asset_check,
    multi_asset_check,
)

# Not exported by dagster 1.13; the field AssetCheckEvaluation takes it in.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData as CheckedMaterialization,
)
from pyspark.sql import functions as F

from incremental_assets.names import (
    ATTRIBUTES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    HOURLY_ASSETS,
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    SOURCE_EVENTS,
)
from incremental_assets.partitions import daily_partitions, hourly_partitions
from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.sources.load_hours import source_columns
from incremental_assets.state.day_ledger import rows_accounted_for
from incremental_assets.state.hour_ledger import source_version_before
from resources.manifest import lock_age
from resources.manifest_items import unit_of
from resources.warehouse import WarehouseResource


def run_window(context: AssetCheckExecutionContext, partitions_def) -> tuple[datetime, datetime] | None:
    """[start, end) of the partitions the check's run materialized; None outside a partitioned run."""
    tags = context.op_execution_context.run_tags  # empty when the check is invoked directly
    first, last = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    if not first and tags.get(PARTITION_TAG):
        first = last = tags[PARTITION_TAG]
    if not first or not last:
        return None
    try:
        return (partitions_def.time_window_for_partition_key(first).start,
                partitions_def.time_window_for_partition_key(last).end)
    except Exception:  # noqa: BLE001 - another job's partition keys: check the whole table
        return None


# -- evaluations -------------------------------------------------------------------------

def latest_materializations(context: AssetCheckExecutionContext) -> dict[AssetKey, CheckedMaterialization]:
    """The latest materialization of each asset the check looks at, when it runs (Dagster's own
    rule for a check outside a single-partition run), in one query."""
    targets = list({key.asset_key for key in context.selected_asset_check_keys})
    latest = {record.asset_entry.asset_key: record.asset_entry.last_materialization_record
              for record in context.op_execution_context.instance.get_asset_records(targets)}
    return {key: CheckedMaterialization(storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
            for key, record in latest.items() if record is not None}


def run_materializations(context, asset_keys) -> dict[tuple[AssetKey, str], CheckedMaterialization]:
    """This run's materialization of each of its partitions of the assets, by (asset, partition),
    one query per asset. Call it once the outputs are handled: their materializations are in the
    event log then."""
    op_context = context.op_execution_context
    partitions = op_context.partition_keys
    found = {}
    for asset_key in asset_keys:
        records = op_context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions), limit=len(partitions)).records
        found.update({(asset_key, r.partition_key): CheckedMaterialization(
            storage_id=r.storage_id, run_id=r.run_id, timestamp=r.timestamp)
            for r in records if r.run_id == op_context.run_id})
    return found


def evaluation_events(context: AssetCheckExecutionContext, outcomes_by_check: dict[AssetCheckKey, list[dict]],
                      materialized: dict[tuple[AssetKey, str], CheckedMaterialization] | None = None):
    """What AssetCheckResults become in a run: for each check, its output, then one evaluation per
    outcome (passed, metadata, description; optionally severity, and the partition it is about).

    In a partitioned run Dagster plans one evaluation per partition of the run for each
    partitioned check, and shows every one left without a result as skipped: an outcome about
    the whole asset is given to each of the run's partitions. Outside one, it is linked to the
    asset's latest materialization. An outcome of a partition is linked to that partition's
    materialization in `materialized` (`run_materializations`), if any: one the run did not
    write (a blocked step's) is not the data the check looked at."""
    materialized = materialized or {}
    op_context = context.op_execution_context
    assets_def = op_context.assets_def
    partitioned_run = op_context.has_partition_key or op_context.has_partition_key_range
    run_partitions = op_context.partition_keys if partitioned_run else []
    whole_asset = any(not o.get("partition") for outcomes in outcomes_by_check.values() for o in outcomes)
    latest = latest_materializations(context) if whole_asset and not run_partitions else {}
    for key, outcomes in outcomes_by_check.items():
        yield Output(None, output_name=assets_def.get_output_name_for_asset_check_key(key))
        spec = assets_def.get_spec_for_check_key(key)
        for outcome in outcomes:
            if outcome.get("partition"):
                targets = [(outcome, materialized.get((key.asset_key, outcome["partition"])))]
            elif spec.partitions_def is None or not run_partitions:
                targets = [(outcome, latest.get(key.asset_key))]
            else:
                targets = [({**outcome, "partition": partition}, None) for partition in run_partitions]
            for evaluated, target in targets:
                yield AssetCheckEvaluation(
                    asset_key=key.asset_key, check_name=key.name, blocking=spec.blocking,
                    target_materialization_data=target, **{"severity": AssetCheckSeverity.ERROR, **evaluated})


def only_check(context: AssetCheckExecutionContext) -> AssetCheckKey:
    [key] = context.selected_asset_check_keys
    return key


# -- sessions: end after start -----------------------------------------------------------

@asset_check(asset="sessions_lifecycle_manifest", name="end_after_start", partitions_def=hourly_partitions,
             description="Every session ends no earlier than it starts, and has both times.")
def sessions_end_after_start(context: AssetCheckExecutionContext, warehouse: WarehouseResource):
    name = "sessions_lifecycle_manifest"
    window = run_window(context, hourly_partitions)
    if not warehouse.tables.exists(name):
        counts = {"rows_checked": 0, "rows_end_before_start": 0, "rows_missing_times": 0}
    else:
        columns = ["start_tstamp", "end_tstamp"]
        # In a run: the sessions its loads touched (their last kept load is in or after the window).
        rows = (warehouse.tables.read(name, columns=columns) if window is None else
                warehouse.tables.read_range(name, "last_load_tstamp", window[0], None, columns=columns))
        totals = rows.agg(
            F.count(F.lit(1)).alias("rows_checked"),
            F.sum(F.when(F.col("end_tstamp") < F.col("start_tstamp"), 1).otherwise(0)).alias("rows_end_before_start"),
            F.sum(F.when(F.col("end_tstamp").isNull() | F.col("start_tstamp").isNull(), 1).otherwise(0))
            .alias("rows_missing_times"),
        ).first()
        counts = {k: int(totals[k] or 0) for k in ("rows_checked", "rows_end_before_start", "rows_missing_times")}
    yield from evaluation_events(context, {only_check(context): [dict(
        passed=counts["rows_end_before_start"] == 0 and counts["rows_missing_times"] == 0,
        metadata={k: MetadataValue.int(v) for k, v in counts.items()},
        description=f"{counts['rows_end_before_start']} session(s) ending before they start, "
                    f"{counts['rows_missing_times']} without start or end, of {counts['rows_checked']}")]})


# -- daily: every filtered row aggregated or pending -------------------------------------

@asset_check(asset="daily_aggregates", name="rows_aggregated_plus_pending_equal_filtered",
             description="For every event day: rows aggregated + rows pending (daily_aggregation_manifest) "
                         "= filtered rows (filtered_events_counts). No filtered row is lost silently.")
def daily_rows_accounted_for(context: AssetCheckExecutionContext, warehouse: WarehouseResource):
    result = rows_accounted_for(warehouse.settings, datetime.now(timezone.utc))
    broken = result["broken"]
    metadata = {
        "days_checked": MetadataValue.int(len(result["filtered"].keys() | result["aggregated"].keys())),
        "days_mismatched": MetadataValue.int(len(broken)),
        "rows_filtered": MetadataValue.int(sum(result["filtered"].values())),
        "rows_aggregated": MetadataValue.int(sum(result["aggregated"].values())),
        "rows_pending": MetadataValue.int(sum(result["pending"].values())),
        # Rows of a day whose partition does not exist yet: not broken, they wait for it.
        "rows_waiting_for_their_day": MetadataValue.int(sum(result["waiting"].values())),
    }
    if broken:
        lines = ["| event day | filtered - aggregated - pending |", "|---|---|"]
        lines += [f"| {day} | {diff} |" for day, diff in list(broken.items())[:30]]
        metadata["mismatched_days"] = MetadataValue.md("\n".join(lines))
    yield from evaluation_events(context, {only_check(context): [dict(
        passed=not broken, metadata=metadata,
        description=f"{len(broken)} event day(s) where aggregated + pending != filtered")]})


# -- manifest: no stale locks --------------------------------------------------------------

# Each check's partitions are its asset's: in a partitioned run it has a result for each partition.
ASSET_PARTITIONS = {**dict.fromkeys(HOURLY_ASSETS, hourly_partitions), DAILY_AGGREGATES: daily_partitions}

def stale_locks(warehouse: WarehouseResource, asset: str, now: datetime, states=None) -> dict:
    """The asset's manifest items held by PROCESSING locks (its catch-up units' too), and those
    older than max_lock_age_hours."""
    limit = timedelta(hours=warehouse.settings.max_lock_age_hours)
    states = warehouse.manifest.unsettled_states() if states is None else states
    ages = {item: lock_age(state.open_lock, now) for item, state in states.items()
            if unit_of(item)[0] == asset and state.status is ItemStatus.LOCKED}
    stale = sorted(item for item, age in ages.items() if age > limit)
    oldest = max(ages.values(), default=timedelta(0))
    return {"locked_items": len(ages), "stale_locks": len(stale), "stale": stale,
            "oldest_lock_age_hours": round(oldest.total_seconds() / 3600, 2)}


# One per step: the hourly step claims the items of its four assets in one commit, so base_events'
# locks are the step's. In a ranged run each check gives an evaluation per hour (see
# evaluation_events), and one check instead of four saves three evaluations per load hour (36 s
# of Dagster event writes in a 168-hour run on SQLite).
LOCK_CHECKED_ASSETS = (BASE_EVENTS, DAILY_AGGREGATES, ATTRIBUTES)


@multi_asset_check(
    specs=[AssetCheckSpec("no_stale_locks", asset=asset, partitions_def=ASSET_PARTITIONS.get(asset),
                          description=f"No manifest item of {asset} is held by a PROCESSING lock older than "
                                      "max_lock_age_hours (a hung or lost run; `incremental-assets limits` "
                                      "lists the locks)." + (" The hourly step claims its four assets' items "
                                      "together: these are its locks." if asset == BASE_EVENTS else ""))
           for asset in LOCK_CHECKED_ASSETS],
    can_subset=True,
)
def no_stale_locks(context: AssetCheckExecutionContext, warehouse: WarehouseResource):
    """One manifest read for the run's assets (each job selects its own assets' checks)."""
    now, states = datetime.now(timezone.utc), warehouse.manifest.unsettled_states()
    outcomes = {}
    for key in sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.path[-1]):
        asset = key.asset_key.path[-1]
        found = stale_locks(warehouse, asset, now, states)
        metadata = {"locked_items": MetadataValue.int(found["locked_items"]),
                    "stale_locks": MetadataValue.int(found["stale_locks"]),
                    "oldest_lock_age_hours": MetadataValue.float(float(found["oldest_lock_age_hours"]))}
        if found["stale"]:
            metadata["stale_items"] = MetadataValue.md("\n".join(f"- `{i}`" for i in found["stale"][:30]))
        outcomes[key] = [dict(
            passed=not found["stale"], severity=AssetCheckSeverity.WARN, metadata=metadata,
            description=f"{found['stale_locks']} lock(s) older than {warehouse.settings.max_lock_age_hours} h")]
    yield from evaluation_events(context, outcomes)


# -- source: its columns did not change ------------------------------------------------------

def column_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str]]:
    """Columns added, removed and retyped between two schemas (name -> type)."""
    return {"added": sorted(after.keys() - before.keys()), "removed": sorted(before.keys() - after.keys()),
            "retyped": sorted(f"{name}: {before[name]} -> {after[name]}"
                              for name in before.keys() & after.keys() if before[name] != after[name])}


@asset_check(asset=SOURCE_EVENTS, name="columns_unchanged", partitions_def=hourly_partitions,
             description="The source's columns (name and type, from its Delta log) are those of the source "
                         "version the previous hourly run read (the hour ledger): a warning names the columns "
                         "added, removed or retyped.")
def source_columns_unchanged(context: AssetCheckExecutionContext, warehouse: WarehouseResource):
    key, settings = only_check(context), warehouse.settings
    now, before = source_columns(settings.source), source_version_before(settings, context.op_execution_context.run_id)
    unchecked = ("the source has no Delta log: its columns have no versions" if now is None else
                 "no earlier run read the source: nothing to compare with" if before is None else None)
    if unchecked is None:
        try:
            then = source_columns(settings.source, before)
        except Exception as exc:  # noqa: BLE001 - the log no longer reaches back to it
            then, unchecked = None, f"source version {before} is no longer in its log ({type(exc).__name__})"
    if unchecked:
        yield from evaluation_events(context, {key: [dict(
            passed=True, severity=AssetCheckSeverity.WARN, description=f"not compared: {unchecked}",
            metadata={"versions_compared": 0, "columns_added": 0, "columns_removed": 0, "columns_retyped": 0})]})
        return
    changes = column_changes(then, now)
    metadata = {"versions_compared": 2, "previous_version": before,
                **{f"columns_{kind}": MetadataValue.int(len(names)) for kind, names in changes.items()}}
    if any(changes.values()):
        metadata["changes"] = MetadataValue.json(changes)
    yield from evaluation_events(context, {key: [dict(
        passed=not any(changes.values()), severity=AssetCheckSeverity.WARN, metadata=metadata,
        description="; ".join(f"{kind}: {', '.join(names)}" for kind, names in changes.items() if names)
        or f"same columns as version {before}, which the previous run read")]})


CHECKS = [source_columns_unchanged, sessions_end_after_start, daily_rows_accounted_for,
          no_stale_locks]
