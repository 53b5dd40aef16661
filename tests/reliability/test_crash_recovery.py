"""A run killed with SIGKILL at any point loses nothing and duplicates nothing.

A child process runs `incremental-assets run --until SECOND_RUN` on a copy of the warehouse
after the first run, and kills itself at one point (tests/reliability/driver.py; the three
children run at the same time):
- inside a Spark task of base_events (nothing of the step written);
- after filtered_events committed its data, before the manifest's PROCESSED record;
- while base_events commits: its data files are written, the Delta commit never published.
Then: every table still reads and is wholly in its state before or after the run (no partial
range), the manifest shows the dead run's items LOCKED, and the next run releases them by
itself and ends with exactly the tables of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest
from deltalake import DeltaTable

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

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HOURLY_TABLES = {"base_events", "rejected_events", "sessions_lifecycle_manifest", "quarantined_sessions",
                 "filtered_events", "filtered_events_counts"}
SECOND_RUN_HOURS = [f"2026-01-05-{hour:02d}:00" for hour in range(1, 6)]

# kill point, its target, the asset whose items the dead run leaves locked, and the tables
# that already hold the second run's rows when it dies (every other table is as before).
KILLS = {
    "in-spark-job": ("spark-job", "", "base_events", set()),
    "before-processed-record": ("before-processed", "filtered_events", "filtered_events", HOURLY_TABLES),
    "in-delta-commit": ("delta-commit", "base_events", "base_events", {"rejected_events"}),
}


def committed_files(table_path: Path) -> set[str]:
    return {Path(uri).name for uri in DeltaTable(str(table_path)).file_uris()}


def parquet_files(table_path: Path) -> set[str]:
    return {p.name for p in table_path.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture(scope="module")
def killed_runs(lake, after_first_run, request, tmp_path_factory) -> dict[str, tuple[Path, Path, Child]]:
    """Each kill point's child process on its own copy of the warehouse: (warehouse, Dagster
    home, child). The children run at the same time (the JVM start-ups overlap), while this
    process computes the uninterrupted run to compare with."""
    runs = {}
    with contextlib.ExitStack() as stack:
        for kill, (point, target, _, _) in KILLS.items():
            folder = tmp_path_factory.mktemp(kill)
            warehouse = copy_warehouse(after_first_run, folder / "warehouse")
            home = make_dagster_home(folder / "dagster_home")
            args = ["--kill", point, "--target", target, "--", "run", "--until", SECOND_RUN.isoformat()]
            child = stack.enter_context(child_process(args, child_env(lake, warehouse, home), folder / "child"))
            runs[kill] = (warehouse, home, child)
        request.getfixturevalue("second_run_tables")
        for _, _, child in runs.values():
            child.wait()
    return runs


@pytest.mark.parametrize("kill", list(KILLS))
def test_a_killed_run_is_recovered_by_the_next_run_without_an_operator(
        kill, killed_runs, lake, after_first_run, second_run_tables):
    point, target, locked_asset, changed = KILLS[kill]
    warehouse, home, child = killed_runs[kill]
    assert child.process.returncode == -signal.SIGKILL, child.describe()

    # Every table reads, and is wholly as before the run or as after it: no partial range.
    before = snapshot(after_first_run)
    after_kill = snapshot(warehouse)
    assert set(after_kill) == set(before)
    for name, table in after_kill.items():
        expected = second_run_tables[name] if name in changed else before[name]
        assert same(table, expected), f"{name} after the kill is neither its old nor its new state"
    if point == "delta-commit":  # the kill hit between the data files and the commit
        orphans = parquet_files(warehouse / target) - committed_files(warehouse / target)
        assert orphans, "the killed write left no uncommitted data files"

    # The manifest shows the dead run's items, locked by it.
    manifest = ManifestStore(str(warehouse / MANIFEST))
    locked = {item: s for item, s in manifest.states().items() if s.status is ItemStatus.LOCKED}
    assert sorted(locked) == [f"{locked_asset}/{hour}" for hour in SECOND_RUN_HOURS], locked
    (dead_run,) = {s.open_lock.run_id for s in locked.values()}
    assert {s.open_lock.payload["pid"] for s in locked.values()} == {child.pid}
    with pytest.MonkeyPatch.context() as mp:
        from dagster import DagsterInstance, DagsterRunStatus

        from incremental_assets.operations import describe_limits
        from incremental_assets.settings import Settings

        mp.setenv("DAGSTER_HOME", str(home))
        with DagsterInstance.get() as instance:  # Dagster never learned that the process died
            assert instance.get_run_by_id(dead_run).status is DagsterRunStatus.STARTED
        use_settings(mp, lake, warehouse)
        limits = describe_limits(Settings.load(), SECOND_RUN)
    assert f"{len(locked)} item(s) need attention" in limits
    assert f"{locked_asset}/{SECOND_RUN_HOURS[0]}  LOCKED" in limits

    # The next run (same host, same Dagster instance) releases the locks and redoes the range.
    lines: list[str] = []
    report = run_in_process(SECOND_RUN, lake, warehouse, dagster_home=home, echo=lines.append)
    assert report.success, lines
    history = manifest.records([f"{locked_asset}/{SECOND_RUN_HOURS[0]}"])
    states = [r.state for r in history]
    assert states[-5:] == [State.PROCESSING, State.FAILED, State.RESOLVED, State.PROCESSING, State.PROCESSED]
    assert history[-4].payload["abandoned_run_id"] == dead_run
    assert f"process {child.pid}" in history[-4].payload["reason"] and "is gone" in history[-4].payload["reason"]
    assert all(s.status is ItemStatus.READY for s in manifest.states().values())

    # ... and ends with exactly the tables of an uninterrupted run: nothing lost, nothing doubled.
    assert_same_tables(snapshot(warehouse), second_run_tables)
