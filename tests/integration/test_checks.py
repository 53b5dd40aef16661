"""The asset checks find what they promise to find, with numeric metadata under stable keys.

The daily invariant and stale-lock checks read small Delta tables with delta-rs (no Spark);
the event_id check (computed in the hourly step, before it writes) and the session check run
Spark on a few rows. Checks inside real runs are exercised by test_sensors.py (every run there
must pass all of its checks).
"""

import random
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dagster import AssetCheckSeverity, AssetSelection, AssetSpec, materialize
from deltalake import DeltaTable, write_deltalake

from incremental_assets import checks
from incremental_assets.planning.processing_manifest import State
from incremental_assets.steps import event_id_check
from resources.manifest import ManifestStore
from resources.manifest_items import item_id
from resources.spark import SparkResource
from resources.tables import RowRange
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
        "rows_pending": 2, "rows_waiting_for_their_day": 0, "mismatched_days": None}
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
    assert values(stale["base_events"])["stale_locks"] == 1
    assert item in stale["base_events"].metadata["stale_items"].value
    assert stale["daily_aggregates"].passed

    manifest.close([item], run_id="hung-run", state=State.PROCESSED, application="base_events")
    assert lock_results(warehouse)["base_events"].passed


def ts(day: int, hour: int, minute: int = 30) -> datetime:
    return datetime(2026, 1, day, hour, minute, tzinfo=timezone.utc)


def copies_after(warehouse, window, writes) -> dict:
    return event_id_check.copies_once_written(warehouse, RowRange("load_tstamp", *window), writes)


@pytest.mark.spark
def test_duplicate_event_ids_are_counted_on_the_rows_once_written(spark, warehouse):
    """Before anything is written: the window's new rows against the rows each table keeps
    within the look-back, with every row the write replaces left out."""
    window = (ts(6, 3, 0), ts(6, 5, 0))
    base = "event_id string, load_tstamp timestamp"
    warehouse.tables.overwrite("base_events", spark.createDataFrame([
        ("a", ts(5, 1)),  # an earlier copy of a new row: a duplicate
        ("w", ts(6, 3, 10)),  # in the window: replaced by the window's rows
        ("d", ts(6, 5)),  # a later copy the window's copy dominates: removed by the write
        ("f", datetime(2025, 12, 5, 2, tzinfo=timezone.utc)),  # more than 30 days before: another event
    ], base))
    new_base = spark.createDataFrame([("a", ts(6, 3)), ("w", ts(6, 3, 20)), ("f", ts(6, 3, 40)),
                                      ("d", ts(6, 4, 10)), ("n", ts(6, 4, 20)), (None, ts(6, 4, 30))], base)
    dominated = RowRange("load_tstamp", window[1], window[1] + timedelta(days=30), key="event_id", values=("d",))
    filtered = "event_id string, load_tstamp timestamp, domain_sessionid string"
    warehouse.tables.overwrite("filtered_events", spark.createDataFrame([
        ("x", ts(6, 1), "s1"),  # of a changed session: replaced by its rows derived again
        ("y", ts(6, 1), "s2"),  # of an unchanged session: kept, a copy of the window's "y"
        ("u", ts(6, 0, 0), "s1"),  # of the changed session, at its range's start: replaced
        ("v", ts(5, 20), "s1"),  # of the changed session before its range: kept, a copy of the window's "v"
        ("z", ts(6, 3, 15), "s3")], filtered))
    new_filtered = spark.createDataFrame([("x", ts(6, 1, 5), "s1"),  # s1's earlier row derived again
                                          ("x", ts(6, 3), "s1"), ("y", ts(6, 3, 40), "s2"),
                                          ("z", ts(6, 3, 50), "s3"), ("u", ts(6, 3, 35), "s1"),
                                          ("v", ts(6, 3, 30), "s1")], filtered)
    changed = RowRange("load_tstamp", ts(6, 0, 0), None, key="domain_sessionid", values=("s1",))
    counts = copies_after(warehouse, window, [
        event_id_check.PendingWrite("base_events", new_base, [dominated]),
        event_id_check.PendingWrite("filtered_events", new_filtered, [dominated, changed])])
    assert counts == {
        "base_events": {ts(6, 3, 0): {"rows_checked": 3, "duplicate_event_ids": 1, "null_event_ids": 0},
                        ts(6, 4, 0): {"rows_checked": 3, "duplicate_event_ids": 0, "null_event_ids": 1}},
        "filtered_events": {ts(6, 3, 0): {"rows_checked": 5, "duplicate_event_ids": 3, "null_event_ids": 0}}}
    assert event_id_check.failures(counts) == [
        "base_events 2026-01-06-03:00: 1 duplicate and 0 null event_id(s)",
        "base_events 2026-01-06-04:00: 0 duplicate and 1 null event_id(s)",
        "filtered_events 2026-01-06-03:00: 3 duplicate and 0 null event_id(s)"]
    # Without the dominated copy's removal, "d" would be held twice.
    kept_later = copies_after(warehouse, window, [event_id_check.PendingWrite("base_events", new_base)])
    assert kept_later["base_events"][ts(6, 4, 0)]["duplicate_event_ids"] == 1


@pytest.mark.spark
def test_a_table_not_written_yet_holds_only_the_new_rows(spark, warehouse):
    window = (ts(6, 3, 0), ts(6, 4, 0))
    new = spark.createDataFrame([("a", ts(6, 3), "s1"), ("a", ts(6, 3, 45), "s1"), ("b", ts(6, 3), "s2")],
                                "event_id string, load_tstamp timestamp, domain_sessionid string")
    changed = RowRange("load_tstamp", ts(6, 0, 0), None, key="domain_sessionid", values=("s1",))
    assert copies_after(warehouse, window, [event_id_check.PendingWrite("filtered_events", new, [changed])]) == {
        "filtered_events": {ts(6, 3, 0): {"rows_checked": 3, "duplicate_event_ids": 1, "null_event_ids": 0}}}


@pytest.mark.spark
def test_duplicates_per_hour_equal_a_count_made_in_python(spark, warehouse, monkeypatch):
    """Random stored copies, random new rows (in the window and, as a changed session's rows
    derived again, before it), a random set of sessions replaced from a random time: each
    hour's counts equal those counted here, row against row, on the table as the write leaves it."""
    monkeypatch.setenv("INCREMENTAL_DEDUPE_LOOKBACK_DAYS", "1")
    lookback = timedelta(days=1)
    window = (datetime(2026, 1, 7, tzinfo=timezone.utc), datetime(2026, 1, 9, tzinfo=timezone.utc))
    schema = "event_id string, load_tstamp timestamp, domain_sessionid string"
    writes, expected = [], {}
    for table, seed in (("base_events", 7), ("filtered_events", 8)):  # the same ids in both tables
        rng = random.Random(seed)
        stored = random_copies(rng, datetime(2026, 1, 6, tzinfo=timezone.utc))
        new = [row for row in random_copies(rng, datetime(2026, 1, 6, tzinfo=timezone.utc))
               if row[1] >= window[0] - timedelta(hours=12) and row[1] < window[1]]
        replaced = RowRange("load_tstamp", window[0] - timedelta(hours=rng.randrange(12)), None,
                            key="domain_sessionid", values=tuple(f"s{n}" for n in rng.sample(range(30), 10)))
        new = [row for row in new if window[0] <= row[1] or row[2] in replaced.values]  # earlier: derived again
        warehouse.tables.overwrite(table, spark.createDataFrame(stored, schema))
        writes.append(event_id_check.PendingWrite(table, spark.createDataFrame(new, schema), [replaced]))
        left = [row for row in stored if not window[0] <= row[1] < window[1]
                and not (row[2] in replaced.values and row[1] >= replaced.start)]
        expected[table] = duplicates_by_hour(left + new, window, lookback, counted=new)
        assert any(c["duplicate_event_ids"] for c in expected[table].values())
    assert copies_after(warehouse, window, writes) == expected


def random_copies(rng, start: datetime) -> list:
    """(event_id, load_tstamp, domain_sessionid) rows over 4 days: ids copied, null ids."""
    rows = []
    for _ in range(300):
        event_id = None if rng.random() < 0.03 else f"e{rng.randrange(120)}"
        at = start + timedelta(minutes=rng.randrange(4 * 24 * 60))
        rows.append((event_id, at, f"s{rng.randrange(30)}"))
        if rng.random() < 0.1:  # a copy at the same instant
            rows.append((event_id, at, rows[-1][2]))
    return rows


def duplicates_by_hour(rows: list, window: tuple[datetime, datetime], lookback: timedelta, counted: list) -> dict:
    """The documented counts per load hour of the window, row against row: for each row of
    `counted` (those `rows` hold) in the window."""
    counted_at = {id(row) for row in counted}
    counts_by_hour = {}
    for i, (event_id, at, _) in enumerate(rows):
        hour = at.replace(minute=0, second=0, microsecond=0)
        if id(rows[i]) not in counted_at or not window[0] <= hour < window[1]:
            continue
        counts = counts_by_hour.setdefault(hour, {"rows_checked": 0, "duplicate_ids": set(), "null_event_ids": 0})
        counts["rows_checked"] += 1
        if event_id is None:
            counts["null_event_ids"] += 1
        elif any(j != i and other == event_id and abs(other_at - at) < lookback
                 for j, (other, other_at, _) in enumerate(rows)):
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
