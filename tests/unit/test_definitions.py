"""The code location loads, and its shape is what the UI and the sensor rely on."""

import os
import subprocess
import sys

import pytest
from dagster import AssetKey

from incremental_assets.names import STATE_TABLES


def test_definitions_load_with_the_six_assets_and_three_jobs():
    from incremental_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    names = {key.path[-1] for key in graph.materializable_asset_keys}
    assert names == {"base_events", "sessions_lifecycle_manifest", "quarantined_sessions",
                     "filtered_events", "daily_aggregates", "attributes"}
    # The source and the state tables are in the catalog, not materialized by any step; the
    # lineage starts at the source.
    external = {key.path[-1] for key in graph.get_all_asset_keys()} - names
    assert external == {"atomic_events", *STATE_TABLES, "plans"}
    assert graph.get(AssetKey("base_events")).parent_keys == {AssetKey("atomic_events")}
    # Each state table is linked to the assets whose step writes it.
    assert graph.get(AssetKey("event_copies")).parent_keys == {AssetKey("base_events")}
    assert graph.get(AssetKey("attributes_users_to_refresh")).parent_keys == {AssetKey("daily_aggregates")}
    assert graph.get(AssetKey("processing_manifest")).parent_keys == {AssetKey(name) for name in names}
    for name in ("hourly_job", "daily_job", "attributes_job", "manifest_admin_job", "plan_job"):
        assert defs.resolve_job_def(name) is not None
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) >= {"hourly_load_sensor", "late_days_sensor", "attributes_sensor"}


AUTOMATION_STATUSES = """
from incremental_assets.definitions import defs
print(sorted({s.default_status.value for s in [*defs.sensors, *defs.schedules]}))
"""


@pytest.mark.parametrize("setting, statuses", [(None, "['STOPPED']"), ("true", "['RUNNING']")])
def test_sensors_and_schedules_start_only_where_automation_running_says(setting, statuses):
    # Read when the code location loads: a process of its own for each value.
    env = {k: v for k, v in os.environ.items() if not k.startswith("INCREMENTAL_")}
    if setting is not None:
        env["INCREMENTAL_AUTOMATION_RUNNING"] = setting
    done = subprocess.run([sys.executable, "-c", AUTOMATION_STATUSES], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == statuses


PARTITION_ENDS = """
from datetime import datetime, timezone
from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, hourly_partitions
from incremental_assets.partition_bounds import last_event_day
print(hourly_partitions.get_last_partition_key(), daily_partitions.get_last_partition_key(),
      last_event_day(LOAD_SETTINGS, datetime(2027, 1, 1, tzinfo=timezone.utc)))
"""


def test_the_load_hours_end_with_end_date_and_the_event_days_the_day_after():
    # An event of end_date's last load hour may be derived up to 24 h after its load: its event
    # day, the day after end_date, must be a daily partition for the late-days plan and a
    # backfill to rebuild it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("INCREMENTAL_")}
    env.update(INCREMENTAL_START_DATE="2026-01-05", INCREMENTAL_END_DATE="2026-01-11")
    done = subprocess.run([sys.executable, "-c", PARTITION_ENDS], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2026-01-11-23:00", "2026-01-12", "2026-01-12"]


def test_a_ui_backfill_runs_the_hourly_assets_max_hours_per_run_hours_a_run():
    from incremental_assets.definitions import defs
    from incremental_assets.partitions import LOAD_SETTINGS

    graph = defs.resolve_asset_graph()
    for name in ("base_events", "sessions_lifecycle_manifest", "quarantined_sessions", "filtered_events"):
        policy = graph.get(AssetKey(name)).backfill_policy
        assert policy.max_partitions_per_run == LOAD_SETTINGS.max_hours_per_run, name
    # A range of event days is one run.
    policy = graph.get(AssetKey("daily_aggregates")).backfill_policy
    assert policy is not None and policy.max_partitions_per_run is None


def test_daily_aggregates_reads_the_filtered_hours_of_its_day_and_reprocess_days():
    from incremental_assets.definitions import defs
    from incremental_assets.partitions import LOAD_SETTINGS, daily_partitions, hourly_partitions

    graph = defs.resolve_asset_graph()
    mapping = graph.get_partition_mapping(AssetKey("daily_aggregates"), AssetKey("filtered_events"))
    assert (mapping.start_offset, mapping.end_offset) == (0, LOAD_SETTINGS.reprocess_days)
    upstream = mapping.get_upstream_mapped_partitions_result_for_partitions(
        daily_partitions.subset_with_partition_keys(["2026-01-05"]), daily_partitions,
        hourly_partitions).partitions_subset.get_partition_keys()
    days = LOAD_SETTINGS.reprocess_days + 1
    assert len(upstream) == 24 * days and min(upstream) == "2026-01-05-00:00"


def test_descriptions_render_as_written_in_the_ui():
    # The UI renders descriptions as Markdown: "<asset>/<partition key>" came out as "(/)".
    from incremental_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        text = graph.get(key).description or ""
        assert_renders_as_written(text, key)


def assert_renders_as_written(text: str, where) -> None:
    import re

    outside_code = re.sub(r"`[^`]*`", "", text)
    assert not re.search(r"<[A-Za-z][^>]*>", outside_code), (where, text)


def test_job_and_resource_descriptions_render_as_written_in_the_ui():
    from incremental_assets.definitions import defs

    for job in defs.resolve_all_job_defs():
        assert_renders_as_written(job.description or "", job.name)
    for name, resource in (defs.resources or {}).items():
        assert_renders_as_written(type(resource).__doc__ or "", name)
        assert_renders_as_written(getattr(resource, "description", None) or "", name)


def test_every_asset_has_a_freshness_policy_so_a_stall_turns_red():
    from incremental_assets.assets.common import DAILY_FRESHNESS, HOURLY_FRESHNESS
    from incremental_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    policies = {key.path[-1]: graph.get(key).freshness_policy for key in graph.materializable_asset_keys}
    assert policies == {"base_events": HOURLY_FRESHNESS, "sessions_lifecycle_manifest": HOURLY_FRESHNESS,
                        "quarantined_sessions": HOURLY_FRESHNESS, "filtered_events": HOURLY_FRESHNESS,
                        "daily_aggregates": DAILY_FRESHNESS, "attributes": DAILY_FRESHNESS}


def test_every_asset_names_its_owners_table_and_uri_and_the_rules_as_its_code_version():
    from incremental_assets.definitions import defs
    from incremental_assets.partitions import LOAD_SETTINGS

    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.owners == list(LOAD_SETTINGS.asset_owners), key
        assert node.metadata["dagster/table_name"] == key.path[-1], key
        assert node.metadata["dagster/uri"].startswith("file:///"), key
        if node.is_materializable:
            assert node.code_version == LOAD_SETTINGS.rules_digest(), key
