"""A transient failure (a Delta commit that kept conflicting) retries the step in the same run:
the retry takes back the items its first attempt failed, and the run succeeds."""

from __future__ import annotations

import pytest
from deltalake.exceptions import CommitFailedError

from incremental_assets.planning.processing_manifest import State
from resources.manifest import ManifestStore
from tests.reliability.helpers import FIRST_RUN, MANIFEST, run_in_process

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_commit_conflict_retries_the_step_and_the_run_succeeds(lake, tmp_path, monkeypatch):
    from incremental_assets.assets import hourly
    from incremental_assets.hourly_step import compute

    attempts = []

    def conflicting_once(warehouse, start, end):
        attempts.append(start)
        if len(attempts) == 1:
            raise CommitFailedError("Commit failed: a concurrent transaction deleted the same data")
        return compute(warehouse, start, end)

    monkeypatch.setattr(hourly, "compute", conflicting_once)
    lines: list[str] = []
    report = run_in_process(FIRST_RUN, lake, tmp_path / "warehouse", echo=lines.append)
    assert report.success, lines
    assert len(attempts) == 2
    history = ManifestStore(str(tmp_path / "warehouse" / MANIFEST)).records(["base_events/2026-01-05-00:00"])
    assert [r.state for r in history] == [State.PROCESSING, State.FAILED, State.RESOLVED, State.PROCESSING,
                                          State.PROCESSED]
