"""What a load hour's fingerprint and its ledger row must tell apart: the source's rows, not
only the shape of its files. A deletion vector is known by the rows it hides, not by how many;
an hour only compaction rewrote is recorded as processed from its new files once verified."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.differential import hostile
from tests.differential.hostile import at
from tests.differential.test_differential import quiet, use
from tests.differential.test_source_maintenance import plan_at

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _hour_fingerprint(path: str, hour):
    from incremental_assets.sources.load_hours import source_snapshot

    return source_snapshot(path, hour, hour + timedelta(hours=1)).fingerprints[hour]


def test_a_deletion_vector_of_the_same_size_after_a_restore_changes_the_fingerprint(spark, tmp_path):
    """Delete one row, restore the table, delete another row of the same file: the file keeps
    its path, size and rows, and its vector hides as many rows as before, but other ones."""
    rows = [hostile.event(at(1, 9, minute), event_id=f"dv-{minute}", session="dv-s", user="dv-u",
                          load=at(1, 9, 30)) for minute in (5, 10, 15)]
    path, staged = str(tmp_path / "events"), str(tmp_path / "staged.parquet")
    pq.write_table(hostile.source_table(rows), staged)
    (spark.read.parquet(staged).coalesce(1).write.format("delta")
        .option("delta.enableDeletionVectors", "true").save(path))
    hour = at(1, 9)

    spark.sql(f"DELETE FROM delta.`{path}` WHERE event_id = 'dv-5'")
    first_delete = _hour_fingerprint(path, hour)
    spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 0")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE event_id = 'dv-10'")
    second_delete = _hour_fingerprint(path, hour)

    assert spark.read.format("delta").load(path).count() == 2
    assert second_delete != first_delete, "another row hidden, the same fingerprint: the hour would never run again"


# The ledger is written by the table engine: the delta-spark one too (`make test-long`).
@pytest.mark.parametrize("engine", ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.long)])
def test_hours_only_compaction_changed_are_recorded_so_the_logs_clean_up_runs_none_again(
        spark, instance, tmp_path, monkeypatch, engine):
    """Once a run verified that compaction alone rewrote processed hours, the ledger says what
    they are processed from now: no tick reads those commits again, and removing them from the
    log (its clean-up, after a checkpoint) makes no hour due."""
    from incremental_assets import runner
    from incremental_assets.names import HOUR_LEDGER
    from incremental_assets.settings import Settings
    from incremental_assets.state import hour_ledger
    from resources.tables import read_delta_arrow

    source = str(tmp_path / "events")
    use(monkeypatch, source, tmp_path / "incremental", INCREMENTAL_TABLE_ENGINE=engine)
    for row in hostile.session_events("cs", "cu", at(1, 9), 6, timedelta(minutes=40)):
        hostile.write_source(source, [row])  # one commit per row: small files to compact
    assert runner.run_until(at(2), instance=instance, echo=quiet).success
    assert DeltaTable(source).optimize.compact()["numFilesRemoved"] > 1
    hostile.write_source(source, [hostile.event(at(2, 3, 10), session="cs2", user="cu")])
    assert runner.run_until(at(2, 5), instance=instance, echo=quiet).success  # runs the new hour alone

    ledger = read_delta_arrow(Settings.load().table_path(HOUR_LEDGER))
    assert set(ledger["source_table_id"].to_pylist()) == {DeltaTable(source).metadata().id}
    table = DeltaTable(source)
    table.create_checkpoint()
    for commit in Path(source, "_delta_log").glob("*.json"):
        if int(commit.stem) < table.version():
            commit.unlink()
    read = []
    real = hour_ledger.hours_changed_by_commits
    monkeypatch.setattr(hour_ledger, "hours_changed_by_commits", lambda *args: read.append(args) or real(*args))
    plan = plan_at(at(2, 5))
    assert plan.ranges == [] and plan.hours.changed == [], plan.describe()
    assert read == [], "the plan followed the log for hours already verified"
