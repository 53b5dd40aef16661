"""Source trouble: a missing or unreadable source fails with one line that says what to do
(in the CLI and in Dagster), an empty source is a clean no-op, and a source rewritten by its
loader is read at its new version; files vacuumed under a running step fail it with a message
that says so, and the rerun recovers."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from incremental_assets.names import HOURLY_ASSETS
from incremental_assets.planning.processing_manifest import ItemStatus
from resources.manifest import ManifestStore
from tests.delta_reads import read_table
from tests.reliability.helpers import MANIFEST, SETTINGS, make_dagster_home, run_in_process, write_source

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def at(hour: int) -> datetime:
    return datetime(2026, 1, 5, hour, tzinfo=timezone.utc)


def vacuum_everything_unused(path) -> None:
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


def base_event_ids(warehouse) -> set[str]:
    return set(read_table(f"{warehouse}/base_events", ["event_id"])
               .column("event_id").to_pylist())


def failure_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if " failed (run " in line]


def test_a_missing_source_fails_the_cli_run_with_one_line_saying_what_to_do(tmp_path, monkeypatch, capsys):
    from dagster import DagsterEventType, DagsterInstance

    from incremental_assets import cli
    from incremental_assets.names import HOURLY_JOB
    from incremental_assets.runner import execute_job

    home = make_dagster_home(tmp_path / "dagster_home")
    for key, value in SETTINGS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "no_lake_here"))
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # `run` refuses before launching anything: a configuration problem (exit 2, like settings).
    assert cli.main(["run", "--until", "2026-01-05T02:00:00Z"]) == 2
    out, err = capsys.readouterr()
    assert "source table not found at" in err and "set INCREMENTAL_SOURCE_PATH" in err, err
    assert "Traceback" not in out + err and "Stack Trace" not in out + err, err

    with DagsterInstance.get() as instance:
        assert not instance.get_run_records()
        # A run launched anyway (the UI, `dagster asset materialize`) fails its step saying the same.
        lines: list[str] = []
        run = execute_job(HOURLY_JOB, instance=instance, partitions=("2026-01-05-00:00", "2026-01-05-00:00"),
                          echo=lines.append)
        assert not run.success
        (line,) = failure_lines(lines)
        assert "SourceError: source table not found at" in line and "set INCREMENTAL_SOURCE_PATH" in line, lines
        (failure,) = [e for e in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)]
        error = failure.dagster_event.event_specific_data.error
        assert "set INCREMENTAL_SOURCE_PATH" in error.cause.message
        # ... before claiming the hour: nothing is left fail-locked to resolve once the source is there.
        assert not (tmp_path / "warehouse" / "processing_manifest").exists()


def test_a_directory_without_a_table_is_refused_before_any_run(tmp_path):
    from incremental_assets.sources.reader import SourceError

    source = tmp_path / "lake"
    source.mkdir()
    with pytest.raises(SourceError, match="is neither a Delta table nor readable Parquet"):
        run_in_process(at(2), str(source), tmp_path / "warehouse")
    assert not (tmp_path / "warehouse").exists()


def test_a_file_that_is_not_parquet_fails_the_run_with_one_line(tmp_path):
    source = tmp_path / "lake"
    source.mkdir()
    (source / "part-0.parquet").write_text("id,name\n1,not parquet at all\n")
    lines: list[str] = []
    report = run_in_process(at(2), str(source), tmp_path / "warehouse", echo=lines.append)
    assert not report.success
    (line,) = failure_lines(lines)
    assert "SourceError: source at" in line and "is neither a Delta table nor readable Parquet" in line, lines


def test_an_empty_source_is_a_clean_no_op(spark, tmp_path):
    source = tmp_path / "lake"
    write_source(spark, source, hours=[])
    lines: list[str] = []
    report = run_in_process(at(3), str(source), tmp_path / "warehouse", echo=lines.append)
    assert report.success, lines
    # No load hour holds data: nothing is due, nothing runs, nothing is written.
    assert not report.runs and any("nothing to do: no load hour to run" in line for line in lines), lines
    assert not (tmp_path / "warehouse" / MANIFEST).exists()


def test_a_source_rewritten_and_vacuumed_between_runs_is_read_at_its_new_version(spark, tmp_path):
    source, warehouse = tmp_path / "lake", tmp_path / "warehouse"
    write_source(spark, source, hours=[0, 1])
    assert run_in_process(at(2), str(source), warehouse).success
    # The loader rewrites the table (same rows, new files, one more hour) and vacuums the old files.
    everything = write_source(spark, source, hours=[0, 1, 2, 3], mode="overwrite")
    vacuum_everything_unused(source)
    lines: list[str] = []
    assert run_in_process(at(4), str(source), warehouse, echo=lines.append).success, lines
    assert base_event_ids(warehouse) == everything


def test_files_vacuumed_under_a_running_step_fail_it_saying_what_to_do_and_the_rerun_recovers(
        spark, tmp_path, monkeypatch):
    from dagster import DagsterEventType, DagsterInstance

    import incremental_assets.steps.hourly_compute as hourly

    source, warehouse = tmp_path / "lake", tmp_path / "warehouse"
    everything = write_source(spark, source, hours=[0, 1])
    real_read_source = hourly.read_source
    rewritten = []

    def read_then_rewrite(*args, **kwargs):
        df = real_read_source(*args, **kwargs)  # the file list is taken here; Spark reads later
        if not rewritten:
            rewritten.append(write_source(spark, source, hours=[0, 1], mode="overwrite"))
            vacuum_everything_unused(source)
        return df

    monkeypatch.setattr(hourly, "read_source", read_then_rewrite)
    instance = DagsterInstance.ephemeral()
    lines: list[str] = []
    report = run_in_process(at(2), str(source), warehouse, instance=instance, echo=lines.append)
    assert not report.success
    (line,) = failure_lines(lines)
    assert "FilesRemovedError: file " in line and "was removed while this step read it" in line, line
    assert "manifest resolve base_events/2026-01-05-00:00" in line
    (failure,) = instance.all_logs(report.runs[0].run_id, of_type=DagsterEventType.STEP_FAILURE)
    assert "vacuumed or rewritten during the run" in failure.dagster_event.event_specific_data.error.cause.message
    manifest = ManifestStore(str(warehouse / MANIFEST))
    failed = {i: s for i, s in manifest.states().items() if s.status is ItemStatus.FAIL_LOCKED}
    # The four hourly assets are one step: their items fail together.
    assert sorted(failed) == sorted(f"{asset}/2026-01-05-{h:02d}:00" for asset in HOURLY_ASSETS for h in (0, 1))
    assert all("was removed while this step read it" in s.last.payload["reason"] for s in failed.values())

    monkeypatch.setattr(hourly, "read_source", real_read_source)
    report = run_in_process(at(2), str(source), warehouse, echo=lines.append,
                            INCREMENTAL_AUTO_RESOLVE_FAILURES="true")
    assert report.success, lines
    assert base_event_ids(warehouse) == everything
