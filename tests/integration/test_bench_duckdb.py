"""The benchmark's DuckDB baselines give the tables of a full backfill of the same source.

One small lake, backfilled once: 5,000 generated events over 2 days (wide rows, late loads,
duplicates, invalid rows, bot sessions) plus the differential suite's hostile rows loaded by
day 11 (replays 10 days later, beyond a look-back of 5 days; copies landing in old hours,
every reject reason, sessions over midnight, runaway bots, other apps and event names),
appended with only their own columns.
The settings filter app ids and event names, and attributes are as of a day before the last
event day, so that every rule has rows to act on.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from tests.differential import hostile, reference

pytest.importorskip("duckdb", reason="DuckDB is not installed: `pip install -e '.[test]'` installs it")

from bench.duckdb_reference import WRITTEN_TABLES, duckdb_tables, duckdb_write_tables, read_written  # noqa: E402
from bench.table_diff import compare, compare_written  # noqa: E402

# A full backfill for the benchmark's baseline: `make test-long`, to keep `make test` within 20 minutes.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

START = date(2026, 1, 5)  # the generator's first day, and the hostile rows' day 0
AS_OF = date(2026, 1, 8)  # before the hostile bots' last event day: attributes leave later days out
# The hostile rows loaded by day 11 (the replays 10 days later; not those 40 days later): the
# backfill's cost is mostly Dagster's, per load hour, and the look-back of 5 days makes the
# 10-day replays events of their own again while copies a day apart still collapse.
LAST_LOAD_DAY = date(2026, 1, 16)
NOW = datetime(2026, 1, 18, tzinfo=timezone.utc)
SETTINGS = {
    "INCREMENTAL_START_DATE": START.isoformat(),
    "INCREMENTAL_DEDUPE_LOOKBACK_DAYS": "5",
    "INCREMENTAL_APP_IDS": "web,mobile,shop",  # leaves out the hostile rows of 'internal' and 'other'
    "INCREMENTAL_EVENT_NAMES": "page_view,page_ping,transaction,screen_view",  # not link_click, event
    "INCREMENTAL_ATTRIBUTES_AS_OF": AS_OF.isoformat(),
    "INCREMENTAL_MIN_ROWS_TO_PROCESS": "1",
}


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> str:
    from deltalake import write_deltalake

    from incremental_assets.sources.generator import generate_events

    path = str(tmp_path_factory.mktemp("lake") / "events")
    summary = generate_events(spark, events=5000, days=2, start=START, out=path, seed=11, progress=quiet)
    assert summary["kinds"].get("bot", 0) > 0, summary
    rows = [row for build in hostile.BUILDERS for row in build()
            if (loaded := reference.load_time(row)) is None or loaded.date() <= LAST_LOAD_DAY]
    write_deltalake(path, hostile.source_table(rows), mode="append", partition_by=["load_date"],
                    schema_mode="merge")
    return path


@pytest.fixture(scope="module")
def warehouse(lake, tmp_path_factory) -> str:
    from dagster import DagsterInstance

    from incremental_assets.runner import backfill

    warehouse = str(tmp_path_factory.mktemp("rebuilt"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**SETTINGS, "INCREMENTAL_SOURCE_PATH": lake, "INCREMENTAL_WAREHOUSE": warehouse}.items():
            mp.setenv(key, value)
        report = backfill(START, LAST_LOAD_DAY, instance=DagsterInstance.ephemeral(), echo=quiet, now=NOW)
    assert report.success, report.runs
    return warehouse


def settings():
    from incremental_assets.settings import Settings

    return Settings.load(environ=SETTINGS)


def test_duckdb_writes_every_table_of_a_full_backfill_with_the_same_rows(lake, warehouse, tmp_path):
    written = duckdb_write_tables(lake, settings(), AS_OF, str(tmp_path / "duckdb"))
    comparison = compare_written(tmp_path / "duckdb", warehouse)

    assert {name: result["differences"] for name, result in comparison.items()} == {
        name: [] for name, _ in WRITTEN_TABLES}
    assert written["rows"] == {name: result["rows"]["ours"] for name, result in comparison.items()}
    assert all(result["compared"].startswith("every column") for name, result in comparison.items()
               if name != "rejected_events")
    # The lake's mess reached the tables: quarantined bots, rejected rows, an event kept twice
    # (replayed 10 days later, beyond the look-back), events left out of filtered_events by name.
    rows = written["rows"]
    assert rows["quarantined_sessions"] >= 2 and rows["rejected_events"] >= 10
    assert rows["event_copies"] > rows["base_events"] > rows["filtered_events"]
    event_ids = read_written(str(tmp_path / "duckdb"), "base_events", ["event_id"]).column("event_id")
    assert len(event_ids) > len(event_ids.unique())


def test_duckdb_final_tables_equal_the_backfill(lake, warehouse):
    from resources.tables import read_delta_arrow

    daily, attributes = duckdb_tables(lake, settings(), AS_OF)

    assert daily.num_rows > 0 and attributes.num_rows > 0
    assert compare(read_delta_arrow(f"{warehouse}/daily_aggregates"), daily, ["event_date", "domain_userid"]) == []
    assert compare(read_delta_arrow(f"{warehouse}/attributes"), attributes, ["domain_userid"]) == []
