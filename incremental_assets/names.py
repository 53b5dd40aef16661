"""The names every layer shares: assets, tables, jobs, run tags. A leaf: it imports nothing."""

from __future__ import annotations

import re

# -- assets ---------------------------------------------------------------------------------
SOURCE_EVENTS = "atomic_events"  # the raw event table: an external asset, observed by the sensor
BASE_EVENTS = "base_events"
LIFECYCLE = "sessions_lifecycle_manifest"
QUARANTINED = "quarantined_sessions"
FILTERED_EVENTS = "filtered_events"
# The load-hour assets: one hourly step materializes them together.
HOURLY_ASSETS = (BASE_EVENTS, LIFECYCLE, QUARANTINED, FILTERED_EVENTS)
DAILY_AGGREGATES = "daily_aggregates"
ATTRIBUTES = "attributes"
ALL_ASSETS = (*HOURLY_ASSETS, DAILY_AGGREGATES, ATTRIBUTES)

# -- tables that are not assets --------------------------------------------------------------
REJECTED_EVENTS = "rejected_events"  # base_events' invalid rows, with a reason
EVENT_COPIES = "event_copies"  # every valid copy of an event: the dedupe index
# The hour ledger and the day ledger (their table names predate these names and stay, for the
# lakes that hold them): what each load hour was last processed from; per (event day, load
# day), the rows aggregated and pending. "Manifest" in this code means the processing manifest.
HOUR_LEDGER = "processed_load_hours"  # what each load hour was last processed from
FILTERED_COUNTS = "filtered_events_counts"  # filtered rows per (load hour, event day)
SESSIONS_TO_REFILTER = "sessions_to_refilter"  # changed sessions whose filtered rows are not yet derived again
DAY_LEDGER = "daily_aggregation_manifest"  # per (event day, load day): rows aggregated and pending
USERS_TO_REFRESH = "attributes_users_to_refresh"  # users whose daily rows or states changed since attributes ran
ATTRIBUTE_STATES = "attribute_states"  # per (event day, user, declared attribute): its mergeable state
PROCESSING_MANIFEST = "processing_manifest"  # the append-only record of every claim and result
ERASURE_REQUESTS = "erasure_requests"  # the ids `forget` erased (as digests), when, and when done
SKIPPED_HOURS = "skipped_load_hours"  # load hours an operator skipped: read as empty from then on
PLANS = "plans"  # every plan `incremental-assets plan` made, by id, for `apply` to check and run
# The state tables shown in the catalog (external assets, observed when a step writes them).
STATE_TABLES = (REJECTED_EVENTS, EVENT_COPIES, HOUR_LEDGER, FILTERED_COUNTS, SESSIONS_TO_REFILTER,
                DAY_LEDGER, USERS_TO_REFRESH, ATTRIBUTE_STATES, PROCESSING_MANIFEST, ERASURE_REQUESTS, SKIPPED_HOURS)
# Every table the pipeline keeps (what table maintenance covers).
ALL_TABLES = (*ALL_ASSETS, *STATE_TABLES)
# Every table the pipeline writes in the warehouse: the kept tables and the record of plans.
# What must hold no erased user and nothing before a moved start is checked over this list.
WAREHOUSE_TABLES = (*ALL_TABLES, PLANS)
# The columns a table's files are partitioned by when the pipeline creates it (the tables not
# named here are not partitioned). A step that holds rows it will write to one of these tables
# as files lays them out the same way, so the write can take those files as they are.
TABLE_PARTITIONS = {BASE_EVENTS: ("load_date",), EVENT_COPIES: ("load_date",), FILTERED_EVENTS: ("event_date",),
                    DAILY_AGGREGATES: ("event_date",), ATTRIBUTE_STATES: ("event_date",)}

# The rows a materialization shows of a table it wrote (quarantined sessions).
PREVIEW_ROWS = 20

# The concurrency pool of the hourly step (it reads and rewrites session state): a production
# instance limits it to one step at a time (deploy/dagster.yaml).
HOURLY_POOL = "hourly_sessions"
# The manifest item every hourly step claims with its hours, so that one runs at a time on any
# instance (a pool only holds where the instance configures it); released when the step ends.
HOURLY_TURN = "hourly_step/turn"

# -- jobs -------------------------------------------------------------------------------------
HOURLY_JOB = "hourly_job"
DAILY_JOB = "daily_job"
ATTRIBUTES_JOB = "attributes_job"
MANIFEST_ADMIN_JOB = "manifest_admin_job"
PLAN_JOB = "plan_job"
APPLY_JOB = "apply_job"
FORGET_JOB = "forget_job"
MAINTENANCE_JOB = "maintenance_job"

# -- run tags ---------------------------------------------------------------------------------
# Dagster's own.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"
RUN_KEY_TAG = "dagster/run_key"
BACKFILL_TAG = "dagster/backfill"
RETRY_OF_TAGS = ("dagster/parent_run_id", "dagster/root_run_id")
DATA_VERSION_TAG = "dagster/data_version"  # an observation's data version (not exported by dagster)
# This project's: why a run was launched, in words.
RUN_STATE_TAG = "incremental/run_state"
RUN_LIMITS_TAG = "incremental/limits"
SOURCE_VERSION_TAG = "incremental/source_version"
REASON_TAG = "incremental/reason"
APP_IDS_TAG = "incremental/app_ids"  # a catch-up run's app ids (planning.app_units); absent: every app
PRIORITY_TAG = "dagster/priority"  # the run queue starts higher priorities first (default 0)
CATCH_UP_PRIORITY = "-1"  # catch-up runs wait behind the runs of every app
# Dagster's own: who launched a run (the UI's "Launched by"), and a run's maximum runtime in
# seconds (0: none) that run monitoring enforces.
USER_TAG = "user"
MAX_RUNTIME_TAG = "dagster/max_runtime"
# The host and pid of a process that executes runs in itself (the CLI, the demo): what run
# monitoring checks instead of a launcher's worker.
WORKER_TAG = "incremental/worker"
APPLIED_PLAN_TAG = "incremental/plan_id"  # the plan (`incremental-assets plan`) a run carries out
AS_OF_TAG = "incremental/attributes_as_of"  # the day attributes are computed as of
# The hourly sensor's launch (its run key without the attempt) and when it requested the run:
# a launch whose runs failed before claiming anything is launched again (automation.hourly_sensor).
LAUNCH_TAG = "incremental/launch"
REQUESTED_AT_TAG = "incremental/requested_at"
# A late-days plan tags its daily runs, so attributes can wait for all of them.
PLAN_TAG = "incremental/late_days_plan"
PLAN_RUNS_TAG = "incremental/late_days_runs"

# -- table engines ----------------------------------------------------------------------------
TABLE_ENGINES = ("auto", "delta-rs", "delta-spark")

# Table, column and partition names end up in paths and SQL: only plain identifiers.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")


def check_identifier(value: str, what: str = "name") -> str:
    """`value` when it is a plain identifier ([A-Za-z0-9_]+), else ValueError naming it."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"{what} must be a plain identifier [A-Za-z0-9_]+, got {value!r}")
    return value
