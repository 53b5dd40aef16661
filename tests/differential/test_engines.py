"""The delta-spark engine judged like delta-rs: the same hostile source landing hour by hour,
the same runs, the same documented tables (so both engines give the same tables).

And a source as Spark writes it on a real lake: a Delta table written by delta-spark with
deletion vectors on, from which rows were deleted before they were processed (the deleted
rows are hidden by a deletion vector; their files stay).
"""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest

from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    AS_OF,
    Source,
    assert_same_tables,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# A late landing (day 0's rows from day 2), replays within the dedupe horizon (day 11).
CHECKPOINTS = (at(0, 16, 30), at(2, 12), at(11))


@pytest.mark.long  # about 4 minutes: every Delta log read and commit is a Spark job here
def test_delta_spark_engine_hour_by_hour_gives_the_documented_tables(spark, instance, tmp_path, monkeypatch):
    from incremental_assets import runner
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    source = Source(str(tmp_path / "events"), [build() for build in hostile.BUILDERS])
    warehouse = tmp_path / "incremental"
    use(monkeypatch, source.path, warehouse, INCREMENTAL_TABLE_ENGINE="delta-spark")
    assert table_store(spark, str(warehouse), Settings.load().table_engine).engine_name == "delta-spark"

    for t in CHECKPOINTS:
        source.land_until(t)
        report = runner.run_until(t, instance=instance, echo=quiet)
        assert report.success, (t, report.refused, report.runs)

    assert_same_tables(pipeline_tables(warehouse),
                       reference.expected_tables(source.rows, reference_settings(), AS_OF),
                       "delta-spark engine, hour by hour, vs the documented rules")
    # Every table was committed by Spark's Delta writer, not by delta-rs.
    from deltalake import DeltaTable
    engines = {DeltaTable(str(warehouse / name)).history(1)[0].get("engineInfo", "")
               for name in ("base_events", "filtered_events")}
    assert all(e.startswith("Apache-Spark") for e in engines), engines


def _delete(spark, path: str, column: str, values) -> None:
    """DELETE as Spark runs it on a table with deletion vectors: the files stay, a vector hides the rows."""
    spark.sql(f"DELETE FROM delta.`{path}` WHERE {column} IN ({', '.join(repr(v) for v in values)})")
    delete = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert delete.operation == "DELETE" and int(delete.operationMetrics["numDeletionVectorsAdded"]) > 0, delete


def test_a_spark_written_source_with_deletion_vectors_hides_the_deleted_rows(spark, instance, tmp_path, monkeypatch):
    """Rows deleted by deletion vector before they are processed are never read; a user erased
    from the source by deletion vector after processing (no file path, size or
    row count changes) re-runs the hours that held them and leaves no trace in any table."""
    from incremental_assets import runner
    from incremental_assets.operator import plans
    from incremental_assets.settings import Settings

    rows = [row for build in hostile.BUILDERS for row in build()]
    deleted_ids = sorted({r["event_id"] for r in rows if r.get("event_id")})[::4]
    path = str(tmp_path / "events")
    staged = str(tmp_path / "staged.parquet")
    pq.write_table(hostile.source_table(rows), staged)
    (spark.read.parquet(staged).write.format("delta")
        .partitionBy("load_date").option("delta.enableDeletionVectors", "true").save(path))
    _delete(spark, path, "event_id", deleted_ids)

    use(monkeypatch, path, tmp_path / "incremental")
    # The plan counts the live rows: those a deletion vector hides are not in any hour's rows.
    plan = plans.make_plan(Settings.load(), at(45))
    live = [r for r in rows if r.get("event_id") not in set(deleted_ids) and reference.load_time(r) is not None]
    assert plan.rows == len(live) < len([r for r in rows if reference.load_time(r) is not None])
    report = runner.run_until(at(45), instance=instance, echo=quiet)
    assert report.success, (report.refused, report.runs)
    kept = [r for r in rows if r.get("event_id") not in set(deleted_ids)]
    assert_same_tables(pipeline_tables(tmp_path / "incremental"),
                       reference.expected_tables(kept, reference_settings(), AS_OF),
                       "a source with deletion vectors vs the documented rules on its live rows")

    users = Counter(r["domain_userid"] for r in kept if r.get("domain_userid"))
    erased = sorted(users)[:2]
    _delete(spark, path, "domain_userid", erased)
    report = runner.run_until(at(45, 1), instance=instance, echo=quiet)
    assert report.success and report.runs, (report.refused, report.runs)
    left = [r for r in kept if r.get("domain_userid") not in erased]
    tables = pipeline_tables(tmp_path / "incremental")
    assert_same_tables(tables, reference.expected_tables(left, reference_settings(), AS_OF),
                       "after erasing two users by deletion vector vs the documented rules")
    assert not [(name, row) for name, table in tables.items() for row in table
                if row.get("domain_userid") in erased]
