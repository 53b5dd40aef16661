"""A run killed with SIGKILL at any point loses nothing and duplicates nothing.

A child process runs `incremental-assets run --until ...` on a copy of the warehouse after the
first run, and kills itself at one point (tests/reliability/driver.py; the children run at the
same time):
- inside a Spark task of the hourly step (nothing of the step written);
- after the hourly step wrote every table, before the manifest's PROCESSED records (and so
  before the hours' ledger rows, written after them);
- while the manifest commits those records (written, never published);
- while base_events, daily_aggregates or attributes commits (data files written, commit never
  published);
- while the daily ledger's pending counts are committed (with settings that leave late rows
  pending).
Then: every table still reads and is wholly in its state before or after the run (no partial
range; the internal work queues aside), the manifest shows the dead run's items LOCKED, and the
next run releases them by itself and ends with exactly the tables of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable

from incremental_assets.names import HOURLY_ASSETS, HOURLY_TURN, SESSIONS_TO_REFILTER, USERS_TO_REFRESH
from incremental_assets.planning.processing_manifest import ItemStatus, State
from resources.manifest import ManifestStore
from tests.reliability.helpers import (
    MANIFEST,
    SECOND_RUN,
    Child,
    assert_same_tables,
    child_env,
    child_process,
    copy_warehouse,
    make_dagster_home,
    run_in_process,
    same,
    snapshot,
    use_settings,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

HOURLY_TABLES = {"base_events", "rejected_events", "event_copies", "sessions_lifecycle_manifest",
                 "quarantined_sessions", "filtered_events", "filtered_events_counts", "processed_load_hours"}
DAILY_TABLES = {"daily_aggregates", "daily_aggregation_manifest"}
# What the hourly step has written when it dies before its manifest records: everything but the
# hours' ledger rows, which are written once the manifest records the items PROCESSED.
HOURLY_DATA = HOURLY_TABLES - {"processed_load_hours"}
# Work queues: a killed run may leave entries in them that the next run takes off.
QUEUES = {SESSIONS_TO_REFILTER, USERS_TO_REFRESH}
# The late-rows scenario: from a warehouse that processed every load of the first day, the
# next day's first loads hold only late rows, and they all stay pending.
DAY_ONE_DONE = datetime(2026, 1, 6, 0, tzinfo=timezone.utc)
LATE_RUN = datetime(2026, 1, 6, 6, tzinfo=timezone.utc)
PENDING_SETTINGS = {"INCREMENTAL_REPROCESS_DAYS": "0", "INCREMENTAL_MIN_ROWS_TO_PROCESS": "100000"}


@dataclass(frozen=True)
class Kill:
    point: str  # driver.py's --kill
    target: str  # its --target
    locked: frozenset[str]  # the assets whose items the dead run leaves locked
    changed: frozenset[str]  # the tables that hold the run's rows when it dies (others are as before)
    until: datetime = SECOND_RUN
    settings: dict = field(default_factory=dict)
    from_day_one: bool = False  # starts from after_day_one instead of after_first_run


# A dead hourly step leaves its hours' items locked, and its turn (hourly_step/turn).
HOURLY_LOCKS = frozenset(HOURLY_ASSETS) | {HOURLY_TURN.split("/")[0]}

KILLS = {
    "in-spark-job": Kill("spark-job", "", HOURLY_LOCKS, frozenset()),
    "before-processed-record": Kill("before-processed", "filtered_events", HOURLY_LOCKS, frozenset(HOURLY_DATA)),
    "in-manifest-commit": Kill("manifest-commit", "", HOURLY_LOCKS, frozenset(HOURLY_DATA)),
    "in-base-events-commit": Kill("delta-commit", "base_events", HOURLY_LOCKS,
                                  frozenset({"rejected_events", "event_copies"})),
    "in-daily-commit": Kill("delta-commit", "daily_aggregates", frozenset({"daily_aggregates"}),
                            frozenset(HOURLY_TABLES)),
    "in-attributes-commit": Kill("delta-commit", "attributes", frozenset({"attributes"}),
                                 frozenset(HOURLY_TABLES | DAILY_TABLES)),
    "in-pending-write": Kill("pending-write", "", frozenset(), frozenset(HOURLY_TABLES), until=LATE_RUN,
                             settings=PENDING_SETTINGS, from_day_one=True),
}


def committed_files(table_path: Path) -> set[str]:
    return {Path(uri).name for uri in DeltaTable(str(table_path)).file_uris()}


def parquet_files(table_path: Path) -> set[str]:
    return {p.name for p in table_path.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture(scope="module")
def after_day_one(lake, after_first_run, tmp_path_factory):
    """A warehouse after `run --until DAY_ONE_DONE` with PENDING_SETTINGS: copy it, never change it."""
    warehouse = copy_warehouse(after_first_run, tmp_path_factory.mktemp("after_day_one") / "warehouse")
    report = run_in_process(DAY_ONE_DONE, lake, warehouse, **PENDING_SETTINGS)
    assert report.success, report.runs
    return warehouse


@pytest.fixture(scope="module")
def late_run_tables(lake, after_day_one, tmp_path_factory):
    """Every table after an uninterrupted run from after_day_one until LATE_RUN."""
    warehouse = copy_warehouse(after_day_one, tmp_path_factory.mktemp("late_run") / "warehouse")
    report = run_in_process(LATE_RUN, lake, warehouse, **PENDING_SETTINGS)
    assert report.success, report.runs
    assert report.late_days and report.late_days.skipped, "the scenario must leave late rows pending"
    return snapshot(warehouse)


@pytest.fixture(scope="module")
def killed_runs(lake, after_first_run, after_day_one, request,
                tmp_path_factory) -> dict[str, tuple[Path, Path, Child]]:
    """Each kill point's child process on its own copy of the warehouse: (warehouse, Dagster
    home, child). The children run at the same time (the JVM start-ups overlap), while this
    process computes the uninterrupted runs to compare with."""
    runs = {}
    with contextlib.ExitStack() as stack:
        for name, kill in KILLS.items():
            folder = tmp_path_factory.mktemp(name)
            warehouse = copy_warehouse(after_day_one if kill.from_day_one else after_first_run, folder / "warehouse")
            home = make_dagster_home(folder / "dagster_home")
            args = ["--kill", kill.point, "--target", kill.target, "--", "run", "--until", kill.until.isoformat()]
            env = child_env(lake, warehouse, home, **kill.settings)
            child = stack.enter_context(child_process(args, env, folder / "child"))
            runs[name] = (warehouse, home, child)
        request.getfixturevalue("second_run_tables")
        request.getfixturevalue("late_run_tables")
        for _, _, child in runs.values():
            child.wait()
    return runs


@pytest.mark.parametrize("name", list(KILLS))
def test_a_killed_run_is_recovered_by_the_next_run_without_an_operator(
        name, killed_runs, lake, after_first_run, after_day_one, second_run_tables, late_run_tables):
    kill = KILLS[name]
    expected = late_run_tables if kill.until == LATE_RUN else second_run_tables
    warehouse, home, child = killed_runs[name]
    assert child.process.returncode == -signal.SIGKILL, child.describe()

    # Every table reads, and is wholly as before the run or as after it: no partial range.
    before = snapshot(after_day_one if kill.from_day_one else after_first_run)
    after_kill = snapshot(warehouse)
    assert set(after_kill) - QUEUES == set(before) - QUEUES
    for table_name, table in after_kill.items():
        if table_name in QUEUES:
            continue
        wanted = expected[table_name] if table_name in kill.changed else before[table_name]
        assert same(table, wanted), f"{table_name} after the kill is neither its old nor its new state"
    if kill.point == "delta-commit":  # the kill hit between the data files and the commit
        orphans = parquet_files(warehouse / kill.target) - committed_files(warehouse / kill.target)
        assert orphans, "the killed write left no uncommitted data files"

    # The manifest shows the dead run's items, locked by it.
    manifest = ManifestStore(str(warehouse / MANIFEST))
    locked = {item: s for item, s in manifest.states().items() if s.status is ItemStatus.LOCKED}
    assert {item.split("/")[0] for item in locked} == kill.locked, locked
    with pytest.MonkeyPatch.context() as mp:
        from incremental_assets.operator.operations import describe_limits
        from incremental_assets.settings import Settings

        use_settings(mp, lake, warehouse, **kill.settings)
        limits = describe_limits(Settings.load(), kill.until)
    if locked:
        (dead_run,) = {s.open_lock.run_id for s in locked.values()}
        assert {s.open_lock.payload["pid"] for s in locked.values()} == {child.pid}
        with pytest.MonkeyPatch.context() as mp:
            from dagster import DagsterInstance, DagsterRunStatus

            mp.setenv("DAGSTER_HOME", str(home))
            with DagsterInstance.get() as instance:  # Dagster never learned that the process died
                assert instance.get_run_by_id(dead_run).status is DagsterRunStatus.STARTED
        assert f"{len(locked)} item(s) need attention" in limits
        assert f"{sorted(locked)[0]}  LOCKED" in limits

    # The next run (same host, same Dagster instance) releases the locks and redoes the work.
    lines: list[str] = []
    report = run_in_process(kill.until, lake, warehouse, dagster_home=home, echo=lines.append, **kill.settings)
    assert report.success, lines
    for item in locked:
        history = manifest.records([item])
        assert [r.state for r in history][-5:] == [State.PROCESSING, State.FAILED, State.RESOLVED,
                                                   State.PROCESSING, State.PROCESSED]
        assert history[-4].payload["abandoned_run_id"] == dead_run
        assert f"process {child.pid}" in history[-4].payload["reason"] and "is gone" in history[-4].payload["reason"]
    assert all(s.status is ItemStatus.READY for s in manifest.states().values())

    # ... and ends with exactly the tables of an uninterrupted run: nothing lost, nothing doubled.
    assert_same_tables(snapshot(warehouse), expected)
