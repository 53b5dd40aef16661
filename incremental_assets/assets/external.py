"""Tables the catalog shows but no step materializes: the source (lineage starts at the
events) and the pipeline's state tables. Each is observed where it changes: the source by
hourly_load_sensor (one observation per load hour it launches, with the hour's fingerprint as
its data version), the state tables by the manifest IO manager when a step writes them.
"""

from dagster import AssetSpec

from incremental_assets.names import DAILY_MANIFEST, PROCESSING_MANIFEST, REJECTED_EVENTS, SOURCE_EVENTS
from incremental_assets.partitions import LOAD_SETTINGS, hourly_partitions

source_events = AssetSpec(
    SOURCE_EVENTS, partitions_def=hourly_partitions, group_name="source", kinds={"delta"},
    description="The raw behavioural events (Snowplow atomic events) at INCREMENTAL_SOURCE_PATH, by load hour. "
                "Written by the collector's loader, not here; hourly_load_sensor observes each load hour it "
                "launches a run for (data version: the hour's fingerprint).",
    metadata={"path": LOAD_SETTINGS.source})

STATE_TABLE_DESCRIPTIONS = {
    REJECTED_EVENTS: "Source rows base_events left out, each with its reject_reason and load hour.",
    DAILY_MANIFEST: "Per (event day, load day): filtered rows aggregated into daily_aggregates and rows "
                    "pending (late rows held back below min_rows_to_process).",
    PROCESSING_MANIFEST: "Every claim and result of every step, by item (e.g. `base_events/2026-01-05-03:00`): what was "
                         "processed, between which limits, by which run. Observations preview the locked and "
                         "failed items (`incremental-assets manifest resolve ITEM` releases one).",
}
state_tables = [AssetSpec(name, group_name="pipeline_state", kinds={"delta"}, description=text,
                          metadata={"path": LOAD_SETTINGS.table_path(name)})
                for name, text in STATE_TABLE_DESCRIPTIONS.items()]

EXTERNAL_ASSETS = [source_events, *state_tables]
