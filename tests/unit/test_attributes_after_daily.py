"""attributes_sensor's rule: attributes follow a late-days plan once all its daily runs have
finished, one at least successfully; a failed run's days wait alone and block no one else."""
from types import SimpleNamespace

from dagster import DagsterRunStatus, RunRequest, SkipReason

from incremental_assets.automation import late_days_sensors
from incremental_assets.names import PLAN_RUNS_TAG, PLAN_TAG, RUN_LIMITS_TAG


class Runs:
    """The instance's runs, as `get_runs` filters them by job name and tags."""

    def __init__(self, *runs):
        self.runs = list(runs)

    def get_runs(self, filters, limit=None):
        found = [r for r in self.runs if r.job_name == filters.job_name
                 and all(r.tags.get(k) == v for k, v in filters.tags.items())]
        return found[:limit] if limit else found


def daily_run(status: DagsterRunStatus, plan: str = "p1", runs: int = 3):
    return SimpleNamespace(job_name="daily_job", status=status, run_id=f"r-{status.value}",
                           tags={PLAN_TAG: plan, PLAN_RUNS_TAG: str(runs)})


def test_attributes_wait_for_every_daily_run_of_the_plan_to_finish():
    success, started = daily_run(DagsterRunStatus.SUCCESS), daily_run(DagsterRunStatus.STARTED)
    result = late_days_sensors.attributes_request(Runs(success, started), success)
    assert isinstance(result, SkipReason) and "1 of 3 daily runs of plan p1 finished" in result.skip_message


def test_a_failed_daily_run_does_not_hold_back_the_days_the_others_rebuilt():
    runs = [daily_run(DagsterRunStatus.SUCCESS), daily_run(DagsterRunStatus.SUCCESS),
            daily_run(DagsterRunStatus.FAILURE)]
    instance = Runs(*runs)
    request = late_days_sensors.attributes_request(instance, runs[-1])  # the failure sensor's view
    assert isinstance(request, RunRequest) and request.job_name == "attributes_job"
    assert request.tags[PLAN_TAG] == "p1" and "(1 failed: their days wait" in request.tags[RUN_LIMITS_TAG]
    # Launched once per plan, whichever sensor sees the last run finish.
    instance.runs.append(SimpleNamespace(job_name="attributes_job", status=DagsterRunStatus.QUEUED,
                                         tags={PLAN_TAG: "p1"}))
    again = late_days_sensors.attributes_request(instance, runs[0])
    assert isinstance(again, SkipReason) and "requested already" in again.skip_message


def test_no_attributes_when_every_daily_run_of_the_plan_failed():
    runs = [daily_run(DagsterRunStatus.FAILURE, runs=1)]
    result = late_days_sensors.attributes_request(Runs(*runs), runs[0])
    assert isinstance(result, SkipReason) and "no daily run of plan p1 succeeded" in result.skip_message
