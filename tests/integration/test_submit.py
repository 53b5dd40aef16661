"""`incremental-assets run|backfill --submit`: the hourly runs go to the instance's queue (as
the UI's and the sensors' do), each with its partition range, its reason and the code
location's origin, for the daemon to start through its pools and run launcher; nothing runs
in the submitting process."""

from datetime import date, datetime, timezone

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from incremental_assets.cli import main
from incremental_assets.names import HOURLY_JOB, RANGE_END_TAG, RANGE_START_TAG, RUN_STATE_TAG
from incremental_assets.runner import CODE_LOCATION, backfill

NOW = datetime(2026, 1, 8, 9, 30, tzinfo=timezone.utc)


@pytest.fixture
def settings_env(tmp_path, monkeypatch):
    # The code server the submission starts reads the same settings from the environment.
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "source"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", "2026-01-05")
    monkeypatch.setenv("INCREMENTAL_MAX_HOURS_PER_RUN", "24")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))


def test_a_submitted_backfill_queues_its_hourly_runs_on_the_instance(settings_env, tmp_path):
    lines: list[str] = []
    with DagsterInstance.get() as instance:
        report = backfill(date(2026, 1, 5), date(2026, 1, 6), instance=instance, echo=lines.append, now=NOW,
                          submit=True)
        runs = sorted(instance.get_runs(RunsFilter(job_name=HOURLY_JOB)), key=lambda r: r.tags[RANGE_START_TAG])
        assert [r.status for r in runs] == [DagsterRunStatus.QUEUED] * 2  # the queue's, not run here
        assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in runs] == [
            ("2026-01-05-00:00", "2026-01-05-23:00"), ("2026-01-06-00:00", "2026-01-06-23:00")]
        assert all(r.tags[RUN_STATE_TAG] == "BACKFILL" for r in runs)
        assert all(r.remote_job_origin.repository_origin.code_location_origin.location_name == CODE_LOCATION
                   for r in runs)
        assert not instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.SUCCESS]))
    assert report.success and [run.submitted for run in report.runs] == [True, True]
    assert report.summary().startswith("submitted: 2 run(s) to the instance's queue")
    assert not (tmp_path / "warehouse").exists()  # nothing ran here


def test_submit_refuses_a_throwaway_instance(settings_env, capsys):
    assert main(["backfill", "--start", "2026-01-05", "--end", "2026-01-05", "--submit",
                 "--ephemeral-instance"]) != 0
    assert "--submit hands the runs to the instance's queue" in capsys.readouterr().err
