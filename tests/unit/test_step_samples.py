"""The samples the cost model of `limits` and `plan` is fitted on: each successful hourly step's
hours, source rows and seconds, read from the manifest's records."""

from datetime import timedelta

from incremental_assets.planning.estimates import StepSample
from incremental_assets.planning.processing_manifest import Record, State
from incremental_assets.state.progress import hourly_step_samples
from tests.helpers import utc

T0 = utc(2026, 1, 5, 12)


def record(item: str, state: State, run: str, seconds: float, payload=None) -> Record:
    return Record(record_id=f"{item}-{state.name}-{run}", item_id=item, state=state, application="step", run_id=run,
                  recorded_at=T0 + timedelta(seconds=seconds), payload=payload)


def test_each_successful_step_gives_its_hours_and_the_seconds_from_claim_to_success():
    hours = ["base_events/2026-01-05-00:00", "base_events/2026-01-05-01:00"]
    records = [
        *(record(item, State.PROCESSING, "run-a", 0) for item in hours),
        record("filtered_events/2026-01-05-00:00", State.PROCESSING, "run-a", 0),  # other assets: not counted
        *(record(item, State.PROCESSED, "run-a", 30, {"source_rows": 1200}) for item in hours),
        record("base_events/2026-01-05-02:00", State.PROCESSING, "run-b", 100),
        record("base_events/2026-01-05-02:00", State.FAILED, "run-b", 110),  # failed: no sample
        record("base_events/2026-01-05-02:00", State.PROCESSING, "run-c", 200),
        record("base_events/2026-01-05-02:00", State.PROCESSED, "run-c", 212),  # recorded before rows were kept
    ]
    assert hourly_step_samples(records) == [StepSample(2, 1200, 30.0), StepSample(1, None, 12.0)]
    assert hourly_step_samples(records, limit=1) == [StepSample(1, None, 12.0)]  # the most recent steps
