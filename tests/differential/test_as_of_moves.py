"""The as-of day moves on (the attributes schedule after midnight) with no daily row changed:
only the users with a day entering the attributes or leaving a window are recomputed, the
others carried. At each as-of day, over the windows' edges (1, 3, 7 and 30 days, declared
and built in), the attributes equal the documented rules, declared attributes included."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance

from incremental_assets import runner
from incremental_assets.names import ATTRIBUTES_JOB
from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    DECLARED,
    WITH_DECLARED,
    Source,
    assert_same_tables,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_an_as_of_move_recomputes_the_users_it_changes_and_equals_the_rules(spark, tmp_path, monkeypatch):
    instance = DagsterInstance.ephemeral()
    source = Source(str(tmp_path / "events"), [build() for build in hostile.BUILDERS])
    warehouse = tmp_path / "incremental"
    first = at(3).date()
    use(monkeypatch, source.path, warehouse, INCREMENTAL_ATTRIBUTES_AS_OF=first.isoformat(), **WITH_DECLARED)
    source.land_until(at(3, 11))
    assert runner.run_until(at(3, 11), instance=instance, echo=quiet).success
    settings = reference_settings()
    assert_same_tables(pipeline_tables(warehouse), reference.expected_tables(source.rows, settings, first, DECLARED),
                       f"as of {first}")
    # Day by day, then across the 7- and 30-day edges of the hostile days.
    for as_of in (at(4).date(), at(5).date(), at(10).date(), at(11).date(), at(34).date(), at(40).date()):
        monkeypatch.setenv("INCREMENTAL_ATTRIBUTES_AS_OF", as_of.isoformat())
        run = runner.execute_job(ATTRIBUTES_JOB, instance=instance, echo=quiet)
        assert run.success, run.failures
        expected = reference.expected_tables(source.rows, settings, as_of, DECLARED)
        assert_same_tables(pipeline_tables(warehouse), expected, f"as of {as_of}")
    # Each move recomputed the users it changes and carried the others (the run's log says how).
    event = instance.get_latest_materialization_event(AssetKey("attributes"))
    assert "the others carried" in str(event.asset_materialization.metadata), event.asset_materialization.metadata
