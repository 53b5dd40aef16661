"""Tables the catalog shows but no step materializes: the source (lineage starts at the
events) and the pipeline's state tables, each linked to the asset whose step writes it. Each is
reported where it changes: the source by hourly_load_sensor (each closed load hour that holds
data as its loader's materialization, with its rows and the hour's fingerprint as its data
version: automation/source_status.py), the state tables by the manifest IO manager, which
observes them when a step writes them.
"""

from dagster import AssetSpec

from incremental_assets.assets.common import OWNERS, table_metadata
from incremental_assets.names import (
    ALL_ASSETS,
    ATTRIBUTE_STATES,
    ATTRIBUTES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    DAY_LEDGER,
    ERASURE_REQUESTS,
    EVENT_COPIES,
    FILTERED_COUNTS,
    FILTERED_EVENTS,
    HOUR_LEDGER,
    LIFECYCLE,
    PLANS,
    PROCESSING_MANIFEST,
    REJECTED_EVENTS,
    SESSIONS_TO_REFILTER,
    SKIPPED_HOURS,
    SOURCE_EVENTS,
    STATE_TABLES,
    USERS_TO_REFRESH,
)
from incremental_assets.partitions import LOAD_SETTINGS, hourly_partitions

source_events = AssetSpec(
    SOURCE_EVENTS, partitions_def=hourly_partitions, group_name="source", kinds={"delta"}, owners=OWNERS,
    description="The raw behavioural events (Snowplow atomic events) at INCREMENTAL_SOURCE_PATH, by load hour. "
                "Written by the collector's loader, not here; hourly_load_sensor reports each closed load hour "
                "that holds data as materialized, with its rows (data version: the hour's fingerprint).",
    metadata=table_metadata(SOURCE_EVENTS, LOAD_SETTINGS.source))

# Each state table: what it holds, and the assets whose step writes it.
STATE_TABLE_LINEAGE = {
    REJECTED_EVENTS: ("Source rows base_events left out, each with its reject_reason and load hour.",
                      [BASE_EVENTS]),
    EVENT_COPIES: ("Every valid copy of every event by load hour: the index the hourly step deduplicates "
                   "against (the first-loaded copy within dedupe_lookback_days wins).", [BASE_EVENTS]),
    HOUR_LEDGER: ("The hour ledger: what each load hour was last processed from (its source fingerprint, "
                      "the source table's id and version, and the rules digest), for which app ids, by which "
                      "run; reconciliation compares it with the source and app_ids.",
                      [FILTERED_EVENTS]),
    FILTERED_COUNTS: ("Filtered rows (and their content digest) per (load hour, event day): the input of the "
                      "daily ledger.", [FILTERED_EVENTS]),
    SESSIONS_TO_REFILTER: ("Sessions changed by an hour whose filtered rows in other load hours are not yet "
                           "derived again.", [LIFECYCLE]),
    DAY_LEDGER: ("The day ledger: per (event day, load day), filtered rows aggregated into daily_aggregates "
                     "and rows pending (late rows held back below min_rows_to_process).", [DAILY_AGGREGATES]),
    USERS_TO_REFRESH: ("Users whose daily rows or states changed since attributes last ran: what the next "
                       "attributes run recomputes.", [DAILY_AGGREGATES]),
    ATTRIBUTE_STATES: ("Per (event day, user, declared attribute and version): the distinct values the "
                       "attribute's property took, each with its events and first and last event time; the "
                       "attributes merge them over each attribute's period (docs/rules.md 8).",
                       [DAILY_AGGREGATES, ATTRIBUTES]),
    PROCESSING_MANIFEST: ("Every claim and result of every step, by item (e.g. `base_events/2026-01-05-03:00`): "
                          "what was processed, between which limits, by which run. Observations preview the "
                          "locked and failed items (`incremental-assets manifest resolve ITEM` releases one).",
                          list(ALL_ASSETS)),
    ERASURE_REQUESTS: ("The users `incremental-assets forget` erased: each id as its SHA-256 (never the id), when "
                       "it was requested, the rows and load hours it touched, and when it completed. Every hourly "
                       "run leaves these users' rows out.", []),
    SKIPPED_HOURS: ("Load hours an operator skipped (`incremental-assets manifest skip ITEM`), with the note and "
                    "when: every run reads them as empty from then on, the next one undoing what a failed run "
                    "wrote of them.", []),
}
assert set(STATE_TABLE_LINEAGE) == set(STATE_TABLES)
state_tables = [AssetSpec(name, group_name="pipeline_state", kinds={"delta"}, description=text, deps=writers,
                          owners=OWNERS, metadata=table_metadata(name))
                for name, (text, writers) in STATE_TABLE_LINEAGE.items()]

# Written by `plan`, plan_job, forget_job and the hourly step (the plan its sensor showed), not by this
# asset's own step: each plan is observed here.
plans_table = AssetSpec(
    PLANS, group_name="pipeline_state", kinds={"delta"}, owners=OWNERS, metadata=table_metadata(PLANS),
    description="Every plan made (`incremental-assets plan`, plan_job, forget_job, and hourly_load_sensor for each "
                "run it launches, recorded by that run), by id: the load hours, event days, rows and estimated "
                "seconds it recomputes, each with why. Each observation shows one plan in full; a run applying "
                "a plan carries its id (incremental/plan_id). The latest observation of hourly_load_sensor shows "
                "the work due now (trigger `due`), with what `incremental-assets limits` prints.")

EXTERNAL_ASSETS = [source_events, *state_tables, plans_table]
