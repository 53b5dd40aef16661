"""Runs launched by the CLI, the demo and the benchmark (the runner, in their own process)
belong to their job in the code location, as runs the webserver launches do: the job's Runs
tab and the Overview timeline list them, and the UI can re-execute them.

The UI finds a job's runs by the `.dagster/repository` tag (stored only for a run with a
remote job origin), draws only runs with a repository origin on the timeline, and re-executes
without the "may be a different version" warning only when the run's job snapshot is the
loaded job's.
"""

import pytest
from dagster import DagsterInstance, RunsFilter

from incremental_assets.definitions import defs
from incremental_assets.names import MAINTENANCE_JOB
from incremental_assets.runner import CODE_LOCATION, execute_job

pytestmark = pytest.mark.spark


def test_a_runner_run_has_the_origin_the_ui_needs(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    (tmp_path / "home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "home"))
    try:
        run = execute_job(MAINTENANCE_JOB, instance=instance, tags={"test": "origin"}, echo=print)
        assert run.success, run.failures
        stored = instance.get_run_by_id(run.run_id)
        origin = stored.remote_job_origin
        assert origin is not None and origin.job_name == MAINTENANCE_JOB
        assert origin.repository_origin.code_location_origin.location_name == CODE_LOCATION
        repository = f"{defs.get_repository_def().name}@{CODE_LOCATION}"
        listed = instance.get_runs(RunsFilter(job_name=MAINTENANCE_JOB, tags={".dagster/repository": repository}))
        assert [r.run_id for r in listed] == [run.run_id]
        assert stored.job_snapshot_id == defs.resolve_job_def(MAINTENANCE_JOB).get_job_snapshot_id()
        assert stored.tags["test"] == "origin"
    finally:
        instance.dispose()
