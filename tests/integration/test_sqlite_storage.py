"""The local instance's storage (resources/sqlite_storage.py): Dagster's SQLite files, with the
event log's connections kept. What a run writes is there for another instance on the same home
(another process: the UI, the daemon) and for Dagster's stock storage; the open databases stay
bounded however many runs a process sees; a wipe leaves no connection to a deleted file."""

from __future__ import annotations

import yaml
from dagster import (
    AssetCheckResult,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    asset,
    asset_check,
    materialize,
)

from resources.sqlite_storage import RUN_DATABASES_KEPT, KeptConnectionsEventLogStorage, local_instance_yaml


@asset
def numbers() -> int:
    return 3


@asset_check(asset=numbers)
def numbers_positive() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


def local_instance(home) -> DagsterInstance:
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(local_instance_yaml(home))
    return DagsterInstance.from_config(str(home))


def materializations(instance: DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(AssetKey("numbers"), limit=1000).records
    return sorted(r.run_id for r in records)


def test_what_a_run_writes_is_there_for_other_instances_and_the_stock_storage(tmp_path):
    home = tmp_path / "home"
    instance = local_instance(home)
    assert isinstance(instance.event_log_storage, KeptConnectionsEventLogStorage)
    runs = [materialize([numbers, numbers_positive], instance=instance).run_id for _ in range(3)]

    other = DagsterInstance.from_config(str(home))  # as the UI's process opens it
    (tmp_path / "stock").mkdir()
    (tmp_path / "stock" / "dagster.yaml").write_text(yaml.safe_dump(
        {"storage": {"sqlite": {"base_dir": str(home)}}, "telemetry": {"enabled": False}}))
    stock = DagsterInstance.from_config(str(tmp_path / "stock"))
    assert type(stock.event_log_storage).__name__ == "SqliteEventLogStorage"
    for reader in (instance, other, stock):
        assert materializations(reader) == sorted(runs)
        evaluation = reader.event_log_storage.get_latest_asset_check_execution_by_key(
            [numbers_positive.check_key])[numbers_positive.check_key]
        assert evaluation.run_id == runs[-1]
        # Every event of each run, in its own database (the run's shard).
        for run_id in runs:
            kinds = {e.dagster_event.event_type for e in reader.all_logs(run_id) if e.dagster_event}
            assert {DagsterEventType.RUN_SUCCESS, DagsterEventType.ASSET_MATERIALIZATION,
                    DagsterEventType.ASSET_CHECK_EVALUATION} <= kinds


def test_open_run_databases_stay_bounded_and_an_evicted_one_opens_again(tmp_path):
    instance = local_instance(tmp_path / "home")
    storage = instance.event_log_storage
    runs = [materialize([numbers], instance=instance).run_id for _ in range(RUN_DATABASES_KEPT + 3)]

    assert len(storage._engines) == RUN_DATABASES_KEPT + 1  # the index and the last runs'
    assert runs[0] not in storage._engines
    assert any(e.dagster_event and e.dagster_event.event_type is DagsterEventType.RUN_SUCCESS
               for e in instance.all_logs(runs[0]))
    assert len(storage._engines) == RUN_DATABASES_KEPT + 1


def test_after_a_wipe_events_land_in_the_new_files(tmp_path):
    instance = local_instance(tmp_path / "home")
    before = materialize([numbers], instance=instance).run_id
    instance.event_log_storage.wipe()  # the run's database file is deleted, the run kept
    instance.report_engine_event("written after the wipe", instance.get_run_by_id(before))
    after = materialize([numbers], instance=instance).run_id

    other = DagsterInstance.from_config(str(tmp_path / "home"))
    assert materializations(other) == [after]
    # Not into the deleted file a kept connection would still hold: another process sees it.
    assert [e.message for e in other.all_logs(before)] == ["written after the wipe"]
