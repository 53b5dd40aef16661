"""Source maintenance is not a change: compaction rewrites a source's files
with the same rows (a `dataChange: false` commit), which changes every fingerprint it covers.
The plan follows the Delta log instead: compacted hours are not run again, while an hour whose
rows really changed after the compaction (a late landing, a delete) still is."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    AS_OF,
    assert_same_tables,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

# `make test-long`, to keep `make test` within 20 minutes (the operation sequences of `make
# test` draw compaction among their hostile operations too).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]


def plan_at(now):
    from incremental_assets.settings import Settings
    from incremental_assets.state.progress import plan_next_run
    from resources.manifest import ManifestStore

    settings = Settings.load()
    return plan_next_run(settings, now, ManifestStore.of(settings).snapshot())


def test_a_compacted_source_reruns_no_old_hour(spark, instance, tmp_path, monkeypatch):
    from incremental_assets import runner

    rows = [row for build in (hostile.replayed_duplicates, hostile.copies_in_old_hours, hostile.late_session_start)
            for row in build()]
    first, later = [r for r in rows if r["load_tstamp"] < at(4)], [r for r in rows if r["load_tstamp"] >= at(4)]
    source = str(tmp_path / "events")
    use(monkeypatch, source, tmp_path / "incremental")
    for row in first:  # one commit per row: many small files, as a streaming loader writes them
        hostile.write_source(source, [row])
    assert runner.run_until(at(4), instance=instance, echo=quiet).success

    files_before = len(DeltaTable(source).file_uris())
    metrics = DeltaTable(source).optimize.compact()
    assert metrics["numFilesRemoved"] > 1 and len(DeltaTable(source).file_uris()) < files_before
    plan = plan_at(at(4))
    assert plan.hours.changed == [] and plan.ranges == [], plan.describe()

    # A real change after the compaction: a copy landing in an old, compacted hour re-runs it.
    landing = hostile.copy_loaded_at(first[0], at(1, 9, 45))
    hostile.write_source(source, [landing])
    plan = plan_at(at(4))
    assert plan.hours.changed == [at(1, 9)], plan.describe()

    hostile.write_source(source, later)
    assert runner.run_until(at(45), instance=instance, echo=quiet).success
    assert_same_tables(pipeline_tables(tmp_path / "incremental"),
                       reference.expected_tables([*first, landing, *later], reference_settings(), AS_OF),
                       "a compacted source, then a late landing, vs the documented rules")
