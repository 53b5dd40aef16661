"""What a run over several load hours stores on each hour's materialization: the hour's own
figures and the run's state on every partition; the column schema, the settings, the preview
and the step's totals, the same for every hour of the run, once, on the last partition, which
is the asset's latest materialization (where the UI reads an asset's columns from). Each hour's
event_id check evaluates that hour's materialization, so the check's partitions show passed."""

from __future__ import annotations

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionResolvedStatus

from incremental_assets.names import BASE_EVENTS, FILTERED_EVENTS, HOURLY_JOB, LIFECYCLE, QUARANTINED
from incremental_assets.partitions import hourly_partitions
from incremental_assets.planning.default_attributes import DEFAULT_ATTRIBUTES
from incremental_assets.runner import execute_job
from incremental_assets.settings import Settings
from incremental_assets.steps.event_id_check import CHECK_NAME, CHECKED_TABLES
from tests.delta_reads import read_table
from tests.reliability.helpers import use_settings, write_source

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HOURS = ["2026-01-05-00:00", "2026-01-05-01:00", "2026-01-05-02:00"]
ONCE_PER_RUN = {
    BASE_EVENTS: {"settings", "dagster/column_schema"},
    # The step's own figures (sessions changed, copies dominated ...) are the run's too.
    LIFECYCLE: {"settings", "dagster/column_schema", "scan_from", "copies_dominated", "sessions_changed",
                "later_hours_to_rerun"},
    QUARANTINED: {"settings", "preview", "dagster/column_schema"},
    FILTERED_EVENTS: {"settings", "dagster/column_schema"},
}
EVERY_PARTITION = {"run_limits", "run_state", "rules_digest", "table_version"}


@pytest.fixture(scope="module")
def ranged_run(spark, tmp_path_factory):
    """One hourly run over HOURS (two events an hour), shared by the tests that read what it
    stored; the settings stay in the environment while they run."""
    tmp_path = tmp_path_factory.mktemp("ranged_run")
    with pytest.MonkeyPatch.context() as mp:
        write_source(spark, tmp_path / "lake", hours=range(len(HOURS)))
        use_settings(mp, str(tmp_path / "lake"), tmp_path / "warehouse")
        instance = DagsterInstance.ephemeral()
        run = execute_job(HOURLY_JOB, instance=instance, partitions=(HOURS[0], HOURS[-1]), echo=print)
        assert run.success, run.failures
        yield instance, run


def test_a_ranged_run_stores_what_is_the_same_for_every_hour_once(ranged_run):
    instance, _ = ranged_run
    written = read_table(Settings.load().table_path(BASE_EVENTS)).num_rows
    for asset, once in ONCE_PER_RUN.items():
        records = instance.fetch_materializations(AssetKey(asset), limit=100).records
        by_hour = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
        assert sorted(by_hour) == HOURS, (asset, sorted(by_hour))
        for hour, metadata in by_hour.items():
            assert EVERY_PARTITION <= set(metadata), (asset, hour, sorted(metadata))
            on_this_hour = once & set(metadata)
            assert on_this_hour == (once if hour == HOURS[-1] else set()), (asset, hour, sorted(metadata))
            # The run's totals are not repeated beside each hour's own figures: they are observed
            # once, on the run's last hour.
            assert not {"rows_written", "event_copies_rows_written"} & set(metadata), (asset, hour, sorted(metadata))
        totals = [r.asset_observation for r in instance.fetch_observations(AssetKey(asset), limit=100).records
                  if "rows_written" in r.asset_observation.metadata]
        assert [o.partition for o in totals] == [HOURS[-1]], asset
        assert totals[0].metadata["run_partitions"].value == f"{HOURS[0]} .. {HOURS[-1]}"
        # The latest materialization, whose columns the UI shows, is the last hour's.
        (latest,) = instance.fetch_materializations(AssetKey(asset), limit=1).records
        assert latest.asset_materialization.partition == HOURS[-1], asset
    (base_totals,) = [r.asset_observation.metadata for r in
                      instance.fetch_observations(AssetKey(BASE_EVENTS), limit=100).records
                      if "rows_written" in r.asset_observation.metadata]
    assert base_totals["rows_written"].value == written == 6  # two events an hour, three hours
    columns = by_hour[HOURS[-1]]["dagster/column_schema"].value.columns
    assert {"event_id", "domain_sessionid", "event_date"} <= {c.name for c in columns}

    # The state tables the step wrote are observed, each with its size after the write.
    from deltalake import DeltaTable

    from incremental_assets.names import EVENT_COPIES, FILTERED_COUNTS, HOUR_LEDGER

    for table in (EVENT_COPIES, FILTERED_COUNTS, HOUR_LEDGER):
        (observed,) = instance.fetch_observations(AssetKey(table), limit=1).records
        metadata = observed.asset_observation.metadata
        written = DeltaTable(Settings.load().table_path(table))
        assert metadata["table_version"].value == written.version(), table
        assert metadata["dagster/row_count"].value == read_table(Settings.load().table_path(table)).num_rows > 0, table


def test_each_hour_check_evaluates_that_hour_materialization_so_its_partition_shows_passed(ranged_run):
    instance, run = ranged_run
    for table in CHECKED_TABLES:
        key = AssetCheckKey(AssetKey(table), CHECK_NAME)
        materialized = {r.asset_materialization.partition: r.storage_id
                        for r in instance.fetch_materializations(AssetKey(table), limit=100).records
                        if r.run_id == run.run_id}
        assert sorted(materialized) == HOURS, table
        executions = instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
        evaluated = {e.partition: e.event.dagster_event.event_specific_data for e in executions}
        assert sorted(evaluated) == HOURS, (table, sorted(evaluated))
        for hour, evaluation in evaluated.items():
            target = evaluation.target_materialization_data
            assert evaluation.passed, (table, hour)
            assert target is not None and (target.storage_id, target.run_id) == (materialized[hour], run.run_id), \
                (table, hour, target)
        # What the check's Partitions tab shows (the UI asks the instance for this state).
        state = instance.event_log_storage.get_asset_check_state([(key, hourly_partitions)])[key]
        passed = state.subsets[AssetCheckExecutionResolvedStatus.SUCCEEDED].subset_value
        assert sorted(passed.get_partition_keys()) == HOURS, (table, sorted(passed.get_partition_keys()))


def test_attributes_show_each_declared_attribute_its_definition_and_version(spark, tmp_path, monkeypatch):
    from incremental_assets.names import ATTRIBUTE_STATES, ATTRIBUTES, ATTRIBUTES_JOB, DAILY_JOB

    declaration = tmp_path / "attributes.yml"
    declaration.write_text("attributes:\n"
                           "  - {name: views, aggregation: count, events: [page_view], period: 7,\n"
                           "     description: page views of the last week}\n"
                           "  - {name: sessions_seen, aggregation: distinct_list, property: domain_sessionid}\n")
    write_source(spark, tmp_path / "lake", hours=range(2))
    use_settings(monkeypatch, str(tmp_path / "lake"), tmp_path / "warehouse",
                 INCREMENTAL_ATTRIBUTES_FILE=str(declaration), INCREMENTAL_ATTRIBUTES_AS_OF="2026-01-06")
    instance = DagsterInstance.ephemeral()
    for job, partitions in ((HOURLY_JOB, (HOURS[0], HOURS[1])), (DAILY_JOB, ("2026-01-05", "2026-01-05")),
                            (ATTRIBUTES_JOB, None)):
        assert execute_job(job, instance=instance, partitions=partitions, echo=print).success, job

    (latest,) = instance.fetch_materializations(AssetKey(ATTRIBUTES), limit=1).records
    metadata = latest.asset_materialization.metadata
    listed = {r.data["attribute"]: r.data for r in metadata["declared_attributes"].value.records}
    assert list(listed) == [*(d.name for d in DEFAULT_ATTRIBUTES), "views", "sessions_seen"]
    assert listed["sessions_last_7_days"]["definition"] == "distinct_count of domain_sessionid, last 7 days, default 0"
    assert listed["views"]["definition"] == "count of events in page_view, last 7 days, default 0"
    assert listed["views"]["description"] == "page views of the last week" and len(listed["views"]["version"]) == 10
    described = {c.name: c.description for c in metadata["dagster/column_schema"].value.columns}
    assert described["views"].startswith("count of events in page_view, last 7 days, default 0 (version ")
    assert described["views"].endswith(": page views of the last week")
    assert "distinct_list of domain_sessionid" in described["sessions_seen"]
    # The daily step wrote the states, and the catalog observed them.
    assert instance.fetch_observations(AssetKey(ATTRIBUTE_STATES), limit=1).records
