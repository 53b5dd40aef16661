"""The blocking event_id check blocks for real: computed inside the hourly step before it writes,
a failure leaves every table as it was, the step's items FAILED and its hours due again, and the
check's failed result on the hour in Dagster."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from incremental_assets.names import HOURLY_ASSETS
from incremental_assets.planning.processing_manifest import ItemStatus
from resources.manifest import ManifestStore
from tests.delta_reads import read_table
from tests.reliability.helpers import MANIFEST, run_in_process, snapshot, write_source

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def at(hour: int) -> datetime:
    return datetime(2026, 1, 5, hour, tzinfo=timezone.utc)


def append_copy(spark, source, event_id: str, hour: int) -> None:
    """A copy of `event_id` loaded in load hour `hour` of 2026-01-05."""
    from incremental_assets.sources.schema import conform_to_atomic
    from incremental_assets.sources.writer import write_source_table

    row = (event_id, "u0", "s-0-0", "2026-01-05 00:00:00", f"2026-01-05 {hour:02d}:30:00")
    df = spark.createDataFrame([row], "event_id string, domain_userid string, domain_sessionid string, "
                                      "derived_tstamp string, load_tstamp string")
    write_source_table(conform_to_atomic(df), str(source), mode="append")


def test_a_duplicate_the_step_would_write_fails_it_before_any_write(spark, tmp_path):
    from dagster import DagsterEventType, DagsterInstance

    source, warehouse = tmp_path / "lake", tmp_path / "warehouse"
    write_source(spark, source, hours=[0, 1])
    assert run_in_process(at(2), str(source), warehouse).success
    # The dedupe index loses the first copy of e-0-0 (a bug, or a hand edit): the next hour's copy
    # of it would be kept, and base_events would hold the event twice.
    DeltaTable(str(warehouse / "event_copies")).delete("event_id = 'e-0-0'")
    append_copy(spark, source, "e-0-0", hour=2)
    before = snapshot(warehouse)
    versions = {name: DeltaTable(str(warehouse / name)).version() for name in ("base_events", "filtered_events")}

    instance, lines = DagsterInstance.ephemeral(), []
    # The step's wide sets held as files, as a big window's are: the refused step removes them.
    report = run_in_process(at(3), str(source), warehouse, instance=instance, echo=lines.append,
                            INCREMENTAL_CHECKPOINT_VALUES_MAX="0")

    assert not report.success
    assert not list((warehouse / "_staging").glob("*")), "the refused step's staged sets are removed"
    # Nothing written: every table as it was, no new version of the checked tables.
    after = snapshot(warehouse)
    assert set(after) == set(before) and all(after[name].equals(before[name]) for name in before)
    assert {name: DeltaTable(str(warehouse / name)).version() for name in versions} == versions
    assert read_table(f"{warehouse}/base_events", ["event_id"]).column("event_id").to_pylist().count("e-0-0") == 1
    # The run's one line names the error, the table and the hour.
    failure = next(line for line in lines if " failed (run " in line)
    assert "DuplicateEventIdsError" in failure and "base_events 2026-01-05-02:00: 1 duplicate" in failure, failure
    # The hour's items FAILED (fail-locked until resolved); the hour ledger does not hold it.
    states = ManifestStore(str(warehouse / MANIFEST)).states()
    assert {i for i, s in states.items() if s.status is ItemStatus.FAIL_LOCKED} == {
        f"{asset}/2026-01-05-02:00" for asset in HOURLY_ASSETS}
    ledger = read_table(f"{warehouse}/processed_load_hours", ["load_hour_tstamp"]).column("load_hour_tstamp")
    assert at(2) not in ledger.to_pylist()
    # The UI shows the check's failed result on the hour, with its counts.
    evaluations = [e.dagster_event.event_specific_data for e in
                   instance.all_logs(report.runs[0].run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)]
    failed = [e for e in evaluations if e.asset_key.path == ["base_events"] and not e.passed]
    assert [(e.partition, e.metadata["duplicate_event_ids"].value) for e in failed] == [("2026-01-05-02:00", 1)]
