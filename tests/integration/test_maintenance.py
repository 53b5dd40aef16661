"""Table maintenance (`incremental-assets maintain`, maintenance_job): small files of recent
partitions compacted, and of older ones left in many files, unreferenced files deleted, every
table reads the same rows, and runs go on afterwards."""

from datetime import date, datetime, timezone
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from dagster import DagsterInstance
from deltalake import DeltaTable, write_deltalake

from incremental_assets import cli
from incremental_assets.names import ALL_TABLES, BASE_EVENTS, FILTERED_EVENTS, MAINTENANCE_JOB, PROCESSING_MANIFEST
from incremental_assets.operator.maintenance import maintain_tables, recent_partitions_from
from incremental_assets.settings import Settings
from resources.tables.interface import MaintenanceResult
from resources.tables.stores import table_store
from tests.delta_reads import read_table

DAY = date(2026, 1, 5)


def test_recent_partitions_are_the_last_n_days_today_included():
    settings = Settings.from_values({"maintenance_recent_days": "3"})
    assert recent_partitions_from(settings, datetime(2026, 1, 10, 23, 59, tzinfo=timezone.utc)) == date(2026, 1, 8)
    assert recent_partitions_from(Settings.from_values({"maintenance_recent_days": 1}),
                                  datetime(2026, 1, 10, 0, 0, tzinfo=timezone.utc)) == date(2026, 1, 10)


def test_older_days_left_in_many_files_are_compacted_once_beside_the_recent_days(spark, tmp_path):
    # A rebuild's older days in many files, an older day with one late file, recent days.
    path = tmp_path / "warehouse" / FILTERED_EVENTS
    files_per_day = {"2026-01-02": 5, "2026-01-03": 2, "2026-01-09": 2, "2026-01-10": 1}
    for day, count in files_per_day.items():
        for n in range(count):
            write_deltalake(str(path), pa.table({"event_date": [date.fromisoformat(day)], "n": [n]}), mode="append",
                            partition_by=["event_date"])
    tables = table_store(spark, str(tmp_path / "warehouse"), "delta-rs")
    settings = Settings.from_values({"maintenance_recent_days": 3})
    rows = sorted(map(repr, read_table(path).to_pylist()))
    lines = []

    results = maintain_tables(settings, tables, datetime(2026, 1, 10, 3, 30, tzinfo=timezone.utc), echo=lines.append)
    assert results == [MaintenanceResult(FILTERED_EVENTS, 10, 5, 7, 0, partitions_compacted=2)]
    assert lines == [f"  {FILTERED_EVENTS}: 10 -> 5 files (7 compacted in 2 partitions, 0 deleted from disk)"]
    assert {day: len(sizes) for day, sizes in tables.file_bytes_by_partition(FILTERED_EVENTS).items()} == \
        {"2026-01-02": 1, "2026-01-03": 2, "2026-01-09": 1, "2026-01-10": 1}
    assert sorted(map(repr, read_table(path).to_pylist())) == rows
    # The next night: nothing left to merge, nothing rewritten.
    again = maintain_tables(settings, tables, datetime(2026, 1, 11, 3, 30, tzinfo=timezone.utc))
    assert again == [MaintenanceResult(FILTERED_EVENTS, 5, 5, 0, 0, partitions_compacted=0)]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    from incremental_assets.sources.generator import generate_events

    path = tmp_path_factory.mktemp("maintenance_lake") / "events"
    generate_events(spark, events=600, days=1, start=DAY, out=str(path), seed=11, progress=lambda *_: None)
    return str(path)


def contents(warehouse: Path) -> dict[str, list]:
    """Every table's rows, sorted, as Python values."""
    out = {}
    for name in ALL_TABLES:
        if (warehouse / name / "_delta_log").is_dir():
            table = read_table(warehouse / name)
            out[name] = sorted(map(repr, table.to_pylist()))
    return out


def files_on_disk(table_dir: Path) -> set[str]:
    """Data files (the Delta log's own checkpoints left out)."""
    return {str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts}


def files_in_log(table_dir: Path) -> set[str]:
    return {unquote(p) for p in DeltaTable(str(table_dir)).get_add_actions().column("path").to_pylist()}


def partition_count(table_dir: Path) -> int:
    columns = DeltaTable(str(table_dir)).metadata().partition_columns
    return len({tuple(r.values()) for r in read_table(table_dir, columns).to_pylist()}) if columns else 1


# 75 s: in `make test-long` (and CI), to keep `make test` under 20 minutes on 2 cores; each
# engine's compaction and vacuum are checked in `make test` (tests/integration/test_table_store_contract.py).
@pytest.mark.long
@pytest.mark.spark
@pytest.mark.slow
def test_maintenance_compacts_recent_partitions_vacuums_and_keeps_every_row(lake, spark, tmp_path, monkeypatch,
                                                                           capsys):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    warehouse = tmp_path / "warehouse"
    for name, value in {"DAGSTER_HOME": home, "INCREMENTAL_WAREHOUSE": warehouse, "INCREMENTAL_SOURCE_PATH": lake,
                        "INCREMENTAL_START_DATE": DAY, "INCREMENTAL_ATTRIBUTES_AS_OF": "2026-01-06",
                        "INCREMENTAL_VACUUM_RETENTION_HOURS": 0, "INCREMENTAL_VACUUM_MIN_RETENTION_HOURS": 0}.items():
        monkeypatch.setenv(name, str(value))
    for hour in (2, 4, 6):  # three hourly runs: three commits of small files in one load_date partition
        assert cli.main(["run", "--until", f"2026-01-05T{hour:02d}:05:00Z"]) == 0
    base = warehouse / BASE_EVENTS
    before = contents(warehouse)
    files_before = {name: len(files_in_log(warehouse / name)) for name in before}
    assert files_before[BASE_EVENTS] >= 3 and files_before[PROCESSING_MANIFEST] >= 6
    # Files replaced or removed by later commits are still on disk.
    assert any(files_on_disk(warehouse / name) > files_in_log(warehouse / name) for name in before)

    # Days later: the 2026-01-05 partitions are no longer recent, only unpartitioned tables compact.
    capsys.readouterr()
    assert cli.main(["maintain", "--now", "2026-01-20T03:30:00Z"]) == 0
    report = capsys.readouterr().out
    assert "compacting partitions from 2026-01-18" in report and f"{BASE_EVENTS}: " in report
    assert len(files_in_log(base)) == files_before[BASE_EVENTS]
    assert len(files_in_log(warehouse / PROCESSING_MANIFEST)) == 1
    for name in before:  # vacuumed (retention 0 here)
        assert files_on_disk(warehouse / name) == files_in_log(warehouse / name), name
    assert contents(warehouse) == before

    # On the day itself: its partitions are recent, every table ends with one file per partition.
    assert cli.main(["maintain", "--now", "2026-01-05T07:00:00Z"]) == 0
    assert len(files_in_log(base)) == 1
    # The compacted file keeps the statistics range reads prune by (load_tstamp is column 60+).
    actions = DeltaTable(str(base)).get_add_actions(flatten=True)
    assert actions.column("min.load_tstamp").null_count == 0 and actions.column("max.load_tstamp").null_count == 0
    for name in before:
        table_dir = warehouse / name
        assert files_on_disk(table_dir) == files_in_log(table_dir), name
        assert len(files_in_log(table_dir)) <= partition_count(table_dir), name
    assert contents(warehouse) == before

    # Runs go on over compacted tables, and the maintenance job runs in Dagster too.
    assert cli.main(["run", "--until", "2026-01-05T09:05:00Z"]) == 0
    assert read_table(base, ["event_id"]).num_rows > len(before[BASE_EVENTS])
    from incremental_assets.runner import execute_job

    run = execute_job(MAINTENANCE_JOB, instance=DagsterInstance.get(), echo=print)
    assert run.success, run.failures
