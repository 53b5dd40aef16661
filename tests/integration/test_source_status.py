"""What hourly_load_sensor's ticks show in the catalog besides their runs, as the daemon stores
them: the source's load hours that hold data, each with its rows, as materialized partitions;
and the work due (the plan the sensor would apply, with what `incremental-assets limits`
prints) on the `plans` asset, whenever it changed. No Spark: the source is written with delta-rs.
"""

from dagster import AssetKey, DagsterEvent, DagsterEventType

from incremental_assets.names import APPLIED_PLAN_TAG, PLANS
from incremental_assets.operator.operations import describe_limits
from incremental_assets.settings import Settings
from tests.integration.test_sensors import add_loads, at, key, launched, mark_processed, tick

SOURCE = AssetKey("atomic_events")


def daemon_tick(instance, monkeypatch, now):
    """A tick as the daemon runs it: the events it returns are stored in the instance."""
    result = tick(instance, monkeypatch, now)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    return result


def rows_shown(instance) -> dict[str, int]:
    """Each source partition Dagster counts as materialized, with the rows its latest event shows."""
    partitions = instance.get_materialized_partitions(SOURCE)
    records = instance.fetch_materializations(SOURCE, limit=1000).records  # newest first
    latest = {}
    for record in records:
        latest.setdefault(record.partition_key, record.asset_materialization.metadata)
    return {p: latest[p]["dagster/partition_row_count"].value for p in partitions}


def source_events(instance) -> int:
    return len(instance.fetch_materializations(SOURCE, limit=1000).records)


def test_the_source_hours_holding_data_are_materialized_partitions_with_their_rows(env, monkeypatch):
    source, instance = env
    # 00:00 and 01:00 processed already, 02:00 due, 03:00 still open at 03:30.
    add_loads(source, at(0.2), at(1.5), at(1.6), at(2.1), at(3.2))
    mark_processed(source, at(0), at(2))
    daemon_tick(instance, monkeypatch, at(3.5))
    assert rows_shown(instance) == {key(at(0)): 1, key(at(1)): 2, key(at(2)): 1}

    # Nothing changed: nothing reported again. A late row lands in 01:00, 03:00 closes: those two.
    daemon_tick(instance, monkeypatch, at(3.6))
    assert source_events(instance) == 3
    add_loads(source, at(1.7))
    changed = daemon_tick(instance, monkeypatch, at(4.1))
    assert sorted(e.partition for e in changed.asset_events if e.asset_key == SOURCE) == [key(at(1)), key(at(3))]
    assert rows_shown(instance) == {key(at(0)): 1, key(at(1)): 3, key(at(2)): 1, key(at(3)): 1}


def test_a_preview_of_the_tick_stores_nothing(env, monkeypatch):
    source, instance = env
    add_loads(source, at(0.2), at(1.5))
    preview = tick(instance, monkeypatch, at(2.5))
    assert {e.partition for e in preview.asset_events if e.asset_key == SOURCE} == {key(at(0)), key(at(1))}
    assert not instance.get_materialized_partitions(SOURCE)
    assert not instance.fetch_observations(AssetKey(PLANS), limit=1).records


def plans_shown(instance) -> list[dict]:
    """The `plans` observations, newest first, as name -> value."""
    records = instance.fetch_observations(AssetKey(PLANS), limit=100).records
    return [{name: entry.value for name, entry in r.asset_observation.metadata.items()} for r in records]


def test_the_work_due_shows_on_plans_with_the_limits_text_whenever_it_changes(env, monkeypatch):
    """The plan of the work due shows on the `plans` asset with what `incremental-assets limits`
    prints at that time: while its hours wait for the grace period, when the sensor launches
    them, and once they are done; a tick that finds nothing new adds nothing, and none while the
    run goes."""
    source, instance = env
    monkeypatch.setenv("INCREMENTAL_GRACE_PERIOD", "PT30M")
    add_loads(source, at(0.5), at(0.6))
    assert not daemon_tick(instance, monkeypatch, at(1.2)).run_requests
    (waiting,) = plans_shown(instance)
    assert waiting["limits"] == f"```\n{describe_limits(Settings.load(), at(1.2))}\n```"
    assert "grace" in waiting["limits"] and waiting["load_hours"] == 0

    launch = daemon_tick(instance, monkeypatch, at(1.6))
    shown = plans_shown(instance)[0]
    assert (shown["trigger"], shown["load_hours"], shown["source_rows"]) == ("due", 1, 2)
    assert shown["plan_id"] == launch.run_requests[0].tags[APPLIED_PLAN_TAG]
    assert shown["limits"] == f"```\n{describe_limits(Settings.load(), at(1.6))}\n```"
    run = launched(instance, launch.run_requests[0])
    daemon_tick(instance, monkeypatch, at(1.65))
    assert len(plans_shown(instance)) == 2

    mark_processed(source, at(0), at(1), run_id=run.run_id)
    instance.handle_run_event(run.run_id, DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name))
    daemon_tick(instance, monkeypatch, at(1.7))
    done = plans_shown(instance)
    assert len(done) == 3 and done[0]["load_hours"] == 0 and "nothing to run" in done[0]["plan"]
    daemon_tick(instance, monkeypatch, at(1.8))
    assert len(plans_shown(instance)) == 3
