"""The asset checks find what they promise to find, with numeric metadata under stable keys.

The daily invariant and stale-lock checks read small Delta tables with delta-rs (no Spark);
the event_id and session checks run Spark on a few rows. Checks inside real runs are
exercised by test_sensors.py (every run there must pass all of its checks).
"""

import random
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dagster import AssetCheckSeverity, AssetSelection, AssetSpec, materialize
from deltalake import DeltaTable, write_deltalake

from incremental_assets import checks
from incremental_assets.planning.processing_manifest import State
from resources.manifest import ManifestStore, item_id
from resources.spark import SparkResource
from resources.warehouse import WarehouseResource

D1, D2 = date(2026, 1, 5), date(2026, 1, 6)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", "2026-01-05")
    return WarehouseResource(pyspark=SparkResource(spark_config={}))


def run_check(check_def, warehouse=None, instance=None) -> list:
    """Run a check the way the UI's "Execute" does: a run of the check alone, outside a
    partitioned run. Its evaluations, in the order it yielded them."""
    targets = [AssetSpec(key) for key in dict.fromkeys(k.asset_key for k in check_def.check_keys)]
    result = materialize([*targets, check_def], selection=AssetSelection.checks(check_def),
                         resources={"warehouse": warehouse} if warehouse else {}, instance=instance,
                         raise_on_error=False)  # a failed blocking check fails the run
    return result.get_asset_check_evaluations()


def invoke(check_def, warehouse):
    """The one evaluation of a check that yields one."""
    [evaluation] = run_check(check_def, warehouse)
    return evaluation


def values(result) -> dict:
    return {k: v.value for k, v in result.metadata.items()}


def write_counts(settings, rows_by_day: dict):
    write_deltalake(settings.table_path("filtered_events_counts"), pa.table({
        "load_hour_tstamp": pa.array([datetime(2026, 1, 5, 3, tzinfo=timezone.utc)] * len(rows_by_day),
                                     pa.timestamp("us", "UTC")),
        "event_date": pa.array(list(rows_by_day), pa.date32()),
        "load_date": pa.array([D1] * len(rows_by_day), pa.date32()),
        "rows": pa.array(list(rows_by_day.values()), pa.int64()),
    }), mode="overwrite")


def write_daily_manifest(settings, rows: dict):
    write_deltalake(settings.table_path("daily_aggregation_manifest"), pa.table({
        "event_date": pa.array(list(rows), pa.date32()),
        "load_date": pa.array([D1] * len(rows), pa.date32()),
        "rows_aggregated": pa.array([a for a, _ in rows.values()], pa.int64()),
        "rows_pending": pa.array([p for _, p in rows.values()], pa.int64()),
    }), mode="overwrite")


def test_every_filtered_row_must_be_aggregated_or_pending(warehouse):
    settings = warehouse.settings
    write_counts(settings, {D1: 10, D2: 7})
    write_daily_manifest(settings, {D1: (10, 0), D2: (4, 2)})  # one row of D2 is unaccounted for
    result = invoke(checks.daily_rows_accounted_for, warehouse)
    assert not result.passed
    assert values(result) | {"mismatched_days": None} == {
        "days_checked": 2, "days_mismatched": 1, "rows_filtered": 17, "rows_aggregated": 14,
        "rows_pending": 2, "mismatched_days": None}
    assert "2026-01-06 | 1" in result.metadata["mismatched_days"].value

    write_daily_manifest(settings, {D1: (10, 0), D2: (4, 3)})
    assert invoke(checks.daily_rows_accounted_for, warehouse).passed


def lock_results(warehouse) -> dict:
    """no_stale_locks as the UI runs it, one per step (base_events for the hourly step): asset name -> its result."""
    return {r.asset_key.path[-1]: r for r in run_check(checks.no_stale_locks, warehouse)}


def test_a_lock_older_than_max_lock_age_hours_is_a_warning(warehouse, monkeypatch):
    manifest = ManifestStore.of(warehouse.settings)
    item = item_id("base_events", "2026-01-05-03:00")
    manifest.claim([item], application="base_events", run_id="hung-run", run_finished=lambda lock: None)
    fresh = lock_results(warehouse)
    assert set(fresh) == {"base_events", "daily_aggregates", "attributes"} and all(r.passed for r in fresh.values())
    assert values(fresh["base_events"])["locked_items"] == 1 and values(fresh["base_events"])["stale_locks"] == 0

    later = datetime.now(timezone.utc) + timedelta(hours=7)  # default max_lock_age_hours is 6
    found = checks.stale_locks(warehouse, "base_events", later)
    assert found["stale"] == [item] and found["oldest_lock_age_hours"] >= 7
    assert checks.stale_locks(warehouse, "filtered_events", later)["locked_items"] == 0

    monkeypatch.setenv("INCREMENTAL_MAX_LOCK_AGE_HOURS", "0")
    stale = lock_results(WarehouseResource(pyspark=SparkResource(spark_config={})))
    assert not stale["base_events"].passed and stale["base_events"].severity is AssetCheckSeverity.WARN
    assert values(stale["base_events"])["stale_locks"] == 1 and item in stale["base_events"].metadata["stale_items"].value
    assert stale["daily_aggregates"].passed

    manifest.close([item], run_id="hung-run", state=State.PROCESSED, application="base_events")
    assert lock_results(warehouse)["base_events"].passed


@pytest.mark.spark
def test_duplicate_event_ids_are_found_in_the_window_and_its_look_back(spark, warehouse):
    def ts(day, hour):
        return datetime(2026, 1, day, hour, 30)

    rows = [("a", ts(5, 1)), ("b", ts(5, 2)), ("a", ts(6, 3)),  # "a" loaded twice, a day apart
            ("c", ts(6, 3)), (None, ts(6, 3)), ("d", ts(10, 3)), ("d", ts(10, 4)),
            # more than dedupe_lookback_days (30) apart: two events of their own, not a duplicate
            ("e", ts(5, 1)), ("e", ts(5, 1) + timedelta(days=31))]
    df = spark.createDataFrame(rows, "event_id string, load_tstamp timestamp")
    warehouse.tables.overwrite("base_events", df)
    utc = timezone.utc
    window = (datetime(2026, 1, 6, 3, tzinfo=utc), datetime(2026, 1, 6, 4, tzinfo=utc))
    assert checks.event_id_duplicates(warehouse, ["base_events"], window) == {"base_events": {
        "rows_checked": 3, "duplicate_event_ids": 1, "null_event_ids": 1}}
    assert checks.event_id_duplicates(warehouse, ["base_events"], None) == {"base_events": {
        "rows_checked": 9, "duplicate_event_ids": 2, "null_event_ids": 1}}
    # Per load hour of a window (the partitioned check's results): each hour's own rows.
    day10 = (datetime(2026, 1, 10, 3, tzinfo=utc), datetime(2026, 1, 10, 6, tzinfo=utc))
    assert checks.event_id_duplicates_by_hour(warehouse, ["base_events"], day10) == {"base_events": {
        datetime(2026, 1, 10, 3, tzinfo=utc): {"rows_checked": 1, "duplicate_event_ids": 1, "null_event_ids": 0},
        datetime(2026, 1, 10, 4, tzinfo=utc): {"rows_checked": 1, "duplicate_event_ids": 1, "null_event_ids": 0}}}
    results = {e.asset_key.path[-1]: e for e in run_check(checks.event_id_unique, warehouse)}
    assert not results["base_events"].passed and values(results["base_events"])["duplicate_event_ids"] == 2
    assert values(results["base_events"])["scope"] == "whole table"
    assert results["filtered_events"].passed  # no table yet: nothing to check

    # Both tables in one query, each compared with itself only: filtered_events' "a" (loaded on
    # the 5th) is not a copy of base_events' "a" of the 6th.
    filtered = [("a", ts(5, 1)), ("d", ts(10, 3)), ("d", ts(10, 4))]
    warehouse.tables.overwrite("filtered_events", spark.createDataFrame(filtered, "event_id string, load_tstamp timestamp"))
    assert checks.event_id_duplicates(warehouse, ["base_events", "filtered_events"], None) == {
        "base_events": {"rows_checked": 9, "duplicate_event_ids": 2, "null_event_ids": 1},
        "filtered_events": {"rows_checked": 3, "duplicate_event_ids": 1, "null_event_ids": 0}}
    assert checks.event_id_duplicates_by_hour(warehouse, ["base_events", "filtered_events"], window) == {
        "base_events": {window[0]: {"rows_checked": 3, "duplicate_event_ids": 1, "null_event_ids": 1}},
        "filtered_events": {}}
    results = {e.asset_key.path[-1]: e for e in run_check(checks.event_id_unique, warehouse)}
    assert not results["filtered_events"].passed and values(results["filtered_events"])["duplicate_event_ids"] == 1


@pytest.mark.spark
def test_duplicates_per_hour_equal_a_count_made_in_python(spark, warehouse, monkeypatch):
    """Random copies (several in one hour, ties, copies just inside and just outside the look-back,
    null ids): each hour's counts equal those counted here row against row."""
    monkeypatch.setenv("INCREMENTAL_DEDUPE_LOOKBACK_DAYS", "1")
    utc, lookback = timezone.utc, timedelta(days=1)
    window = (datetime(2026, 1, 7, tzinfo=utc), datetime(2026, 1, 9, tzinfo=utc))
    expected = {}
    for table, seed in (("base_events", 7), ("filtered_events", 8)):  # the same ids in both tables
        rows = random_copies(random.Random(seed), datetime(2026, 1, 6))
        warehouse.tables.overwrite(table, spark.createDataFrame(rows, "event_id string, load_tstamp timestamp"))
        expected[table] = duplicates_by_hour(rows, window, lookback)
        assert any(c["duplicate_event_ids"] for c in expected[table].values())
    assert checks.event_id_duplicates_by_hour(warehouse, ["base_events", "filtered_events"], window) == expected


def random_copies(rng, start: datetime) -> list:
    rows = []
    for _ in range(300):
        event_id = None if rng.random() < 0.03 else f"e{rng.randrange(120)}"
        at = start + timedelta(minutes=rng.randrange(4 * 24 * 60))
        rows.append((event_id, at))
        if rng.random() < 0.1:  # a copy at the same instant
            rows.append((event_id, at))
    return rows


def duplicates_by_hour(rows: list, window: tuple[datetime, datetime], lookback: timedelta) -> dict:
    """The documented counts per load hour of the window, row against row."""
    counts_by_hour = {}
    for i, (event_id, at) in enumerate(rows):
        hour = at.replace(minute=0, tzinfo=timezone.utc)
        if not window[0] <= hour < window[1]:
            continue
        counts = counts_by_hour.setdefault(hour, {"rows_checked": 0, "duplicate_ids": set(), "null_event_ids": 0})
        counts["rows_checked"] += 1
        if event_id is None:
            counts["null_event_ids"] += 1
        elif any(j != i and other == event_id and abs(other_at - at) < lookback
                 for j, (other, other_at) in enumerate(rows)):
            counts["duplicate_ids"].add(event_id)
    return {hour: {"rows_checked": c["rows_checked"], "duplicate_event_ids": len(c["duplicate_ids"]),
                   "null_event_ids": c["null_event_ids"]} for hour, c in counts_by_hour.items()}


@pytest.mark.spark
def test_a_session_ending_before_it_starts_fails(spark, warehouse):
    rows = [("s1", datetime(2026, 1, 5, 1), datetime(2026, 1, 5, 2), datetime(2026, 1, 5, 2)),
            ("s2", datetime(2026, 1, 5, 3), datetime(2026, 1, 5, 2), datetime(2026, 1, 5, 3))]
    warehouse.tables.overwrite("sessions_lifecycle_manifest", spark.createDataFrame(
        rows, "domain_sessionid string, start_tstamp timestamp, end_tstamp timestamp, "
              "last_load_tstamp timestamp"))
    result = invoke(checks.sessions_end_after_start, warehouse)
    assert not result.passed
    assert values(result) == {"rows_checked": 2, "rows_end_before_start": 1, "rows_missing_times": 0}


class _Context:
    """Just enough of a check's context for run_window."""

    def __init__(self, tags):
        self.op_execution_context = type("Op", (), {"run_tags": tags})()


def test_a_check_in_a_run_looks_at_the_run_partitions():
    from incremental_assets.partitions import daily_partitions, hourly_partitions

    utc = timezone.utc
    ranged = _Context({"dagster/asset_partition_range_start": "2026-01-05-03:00",
                       "dagster/asset_partition_range_end": "2026-01-05-05:00"})
    assert checks.run_window(ranged, hourly_partitions) == (datetime(2026, 1, 5, 3, tzinfo=utc),
                                                            datetime(2026, 1, 5, 6, tzinfo=utc))
    single = _Context({"dagster/partition": "2026-01-05"})
    assert checks.run_window(single, daily_partitions)[1] == datetime(2026, 1, 6, tzinfo=utc)
    assert checks.run_window(single, hourly_partitions) is None  # not an hourly key: whole table
    assert checks.run_window(_Context({}), hourly_partitions) is None


def test_a_column_change_in_the_source_since_the_last_run_is_a_warning_naming_the_columns(warehouse, tmp_path,
                                                                                          monkeypatch):
    source = tmp_path / "source"
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(source))

    def write_source(columns: dict[str, pa.Array], **how):
        write_deltalake(str(source), pa.table(columns), **how)
        return DeltaTable(str(source)).version()

    def processed(run_id: str, version: int):
        """What an hourly run leaves in the hour ledger: the source version it read."""
        write_deltalake(warehouse.settings.table_path("processed_load_hours"), pa.table({
            "load_hour_tstamp": pa.array([datetime(2026, 1, 5, tzinfo=timezone.utc)], pa.timestamp("us", "UTC")),
            "run_id": [run_id], "source_version": pa.array([version], pa.int64())}), mode="append")

    def result():
        [evaluation] = run_check(checks.source_columns_unchanged, warehouse)
        return evaluation

    assert "not compared" in result().description  # no source
    v0 = write_source({"event_id": ["a"], "tr_total": pa.array([1.5], pa.float64())})
    first = result()
    assert first.passed and "no earlier run" in first.description and values(first)["versions_compared"] == 0
    processed("run-1", v0)
    write_source({"event_id": ["b"], "tr_total": pa.array([2.5], pa.float64())}, mode="append")
    same = result()
    assert same.passed and values(same)["versions_compared"] == 2 and values(same)["previous_version"] == v0
    v2 = write_source({"event_id": ["c"], "tr_total": pa.array([3.5], pa.float64()), "new_col": ["x"]},
                      mode="append", schema_mode="merge")
    changed = result()
    assert not changed.passed and changed.severity is AssetCheckSeverity.WARN
    assert values(changed)["changes"] == {"added": ["new_col"], "removed": [], "retyped": []}
    processed("run-2", v2)  # a run read the new columns: the next one compares with them
    assert result().passed
    write_source({"event_id": ["d"], "tr_total": pa.array([4], pa.int64())}, mode="overwrite", schema_mode="overwrite")
    retyped = result()
    assert values(retyped)["changes"] == {"added": [], "removed": ["new_col"], "retyped": ["tr_total: double -> int64"]}
    assert values(retyped)["columns_removed"] == 1 and values(retyped)["columns_retyped"] == 1
