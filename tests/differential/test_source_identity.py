"""What a load hour's fingerprint and its ledger row must tell apart: the source's rows, not
only the shape of its files. A deletion vector is known by the rows it hides, not by how many."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.differential import hostile
from tests.differential.hostile import at

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _hour_fingerprint(path: str, hour):
    from incremental_assets.sources.load_hours import source_snapshot

    return source_snapshot(path, hour, hour + (at(0, 1) - at(0))).fingerprints[hour]


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
