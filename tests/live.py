"""For tests against live Dagster processes (a webserver and a daemon): source data (a generated
sample moved in time, written load hour by load hour into a Delta source table), and waiting
until the instance's runs have settled."""

import time
from datetime import datetime, timedelta
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster_graphql import DagsterGraphQLClient
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from incremental_assets.runner import run_until
from incremental_assets.sources.schema import PARTITION_COLUMN, load_time
from incremental_assets.sources.writer import write_source_table
from tests.delta_reads import read_table

HOURLY = ["base_events", "sessions_lifecycle_manifest", "quarantined_sessions", "filtered_events"]
# Each modeled table, by the key that orders its rows.
MODELED = {"base_events": ["event_id"], "sessions_lifecycle_manifest": ["domain_sessionid"],
           "quarantined_sessions": ["domain_sessionid"], "filtered_events": ["event_id"],
           "daily_aggregates": ["event_date", "domain_userid"], "attributes": ["domain_userid"]}


def moved_in_time(events, delta: timedelta):
    """Every timestamp of every event moved by `delta` (whole seconds), load_date recomputed."""
    shift = F.expr(f"make_dt_interval(0, 0, 0, {int(delta.total_seconds())})")
    moved = events.select(*[(F.col(f.name) + shift).alias(f.name) if isinstance(f.dataType, TimestampType)
                            else F.col(f.name) for f in events.schema.fields])
    return moved.withColumn(PARTITION_COLUMN, F.to_date(load_time()))


def write_loads(events, source: Path, start: datetime, end: datetime) -> int:
    rows = events.where((F.col("load_tstamp") >= F.lit(start)) & (F.col("load_tstamp") < F.lit(end)))
    written = write_source_table(rows.coalesce(1), source, mode="append")["rows"]
    # Let delta-rs expose load_tstamp's min/max per file: the sensor then sees exact hours.
    DeltaTable(str(source)).alter.set_table_properties(
        {"delta.dataSkippingStatsColumns": "collector_tstamp,load_tstamp"})
    return written


def settled(instance, quiet_seconds: float = 45) -> bool:
    """No run in flight, and none launched or finished for longer than the sensors' interval (30 s)."""
    busy = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
            DagsterRunStatus.STARTED]
    if instance.get_runs(filters=RunsFilter(statuses=busy)):
        return False
    last_change = max((r.end_time or r.start_time or 0 for r in instance.get_run_records()), default=0)
    return time.time() - last_change > quiet_seconds


def launch_backfill(port: int, first: str, last: str, assets=HOURLY) -> str:
    """The UI's "Materialize partitions" for a range, through dagster_graphql's client."""
    client = DagsterGraphQLClient("127.0.0.1", port_number=port)
    # The client has no public method for backfills; its mutation text and transport do the job.
    result = client._execute(LAUNCH_PARTITION_BACKFILL_MUTATION, {"backfillParams": {
        "partitionsByAssets": [{"assetKey": {"path": [name]}, "partitions": {"range": {"start": first, "end": last}}}
                               for name in assets],
        "title": "test: hourly assets",
    }})["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", result
    return result["backfillId"]


def modeled_rows(warehouse: Path | str, table: str) -> list[dict]:
    """A modeled table's rows in its key order, for comparing two warehouses (a local path or
    an object-store URI)."""
    return read_table(f"{warehouse}/{table}").sort_by([(k, "ascending") for k in MODELED[table]]).to_pylist()


def assert_tables_equal_a_local_run(warehouse: Path | str, until: datetime, settings_env: dict[str, str],
                                    monkeypatch, local_warehouse: Path) -> None:
    """run_until(until) in this process (local Spark) with the same settings, into
    `local_warehouse`; every modeled table of `warehouse` must equal its result."""
    for name, value in settings_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(local_warehouse))
    with DagsterInstance.ephemeral() as local:
        assert run_until(until, instance=local, echo=print).success
    for table in MODELED:
        remote, local_rows = modeled_rows(warehouse, table), modeled_rows(local_warehouse, table)
        assert remote == local_rows, table
        assert table == "quarantined_sessions" or remote, f"{table} is empty: the comparison proves nothing"
