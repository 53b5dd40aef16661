"""What a run over several load hours stores on each hour's materialization: the hour's own
figures and the run's small facts on every partition; the column schema, the settings and
the preview, the same for every hour of the run, once, on the last partition, which is the
asset's latest materialization (where the UI reads an asset's columns from)."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance

from incremental_assets.names import BASE_EVENTS, FILTERED_EVENTS, HOURLY_JOB, LIFECYCLE, QUARANTINED
from incremental_assets.runner import execute_job
from tests.reliability.helpers import use_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HOURS = ["2026-01-05-00:00", "2026-01-05-01:00", "2026-01-05-02:00"]
ONCE_PER_RUN = {
    BASE_EVENTS: {"settings", "dagster/column_schema"},
    LIFECYCLE: {"settings"},
    QUARANTINED: {"settings", "preview"},
    FILTERED_EVENTS: {"settings", "dagster/column_schema"},
}
EVERY_PARTITION = {"run_limits", "run_state", "rules_digest", "rows_written"}


def write_source(spark, path) -> None:
    """Two valid events in each load hour of HOURS."""
    from incremental_assets.sources.schema import conform_to_atomic
    from incremental_assets.sources.writer import write_source_table

    rows = [(f"e-{h}-{i}", f"u{i}", f"s-{h}-{i}", f"2026-01-05 {h:02d}:{10 * i:02d}:00",
             f"2026-01-05 {h:02d}:{10 * i + 5:02d}:00") for h in range(len(HOURS)) for i in range(2)]
    df = spark.createDataFrame(rows, "event_id string, domain_userid string, domain_sessionid string, "
                                     "derived_tstamp string, load_tstamp string")
    write_source_table(conform_to_atomic(df).coalesce(1), str(path))


def test_a_ranged_run_stores_what_is_the_same_for_every_hour_once(spark, tmp_path, monkeypatch):
    write_source(spark, tmp_path / "lake")
    use_settings(monkeypatch, str(tmp_path / "lake"), tmp_path / "warehouse")
    instance = DagsterInstance.ephemeral()
    run = execute_job(HOURLY_JOB, instance=instance, partitions=(HOURS[0], HOURS[-1]), echo=print)
    assert run.success, run.failures

    for asset, once in ONCE_PER_RUN.items():
        records = instance.fetch_materializations(AssetKey(asset), limit=100).records
        by_hour = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
        assert sorted(by_hour) == HOURS, (asset, sorted(by_hour))
        for hour, metadata in by_hour.items():
            assert EVERY_PARTITION <= set(metadata), (asset, hour, sorted(metadata))
            on_this_hour = once & set(metadata)
            assert on_this_hour == (once if hour == HOURS[-1] else set()), (asset, hour, sorted(metadata))
        # The latest materialization, whose columns the UI shows, is the last hour's.
        (latest,) = instance.fetch_materializations(AssetKey(asset), limit=1).records
        assert latest.asset_materialization.partition == HOURS[-1], asset
    columns = by_hour[HOURS[-1]]["dagster/column_schema"].value.columns
    assert {"event_id", "domain_sessionid", "event_date"} <= {c.name for c in columns}
