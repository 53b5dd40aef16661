"""Sequences of operations drawn by Hypothesis (issue 41): a random small source lands over time
and, at each checkpoint, one thing a hostile operator or lake does happens before the runs:

- `run`: nothing, the runs as the sensor would make them;
- `backfill_a_day`: a later load day processed by hand first (hours out of order);
- `fail_then_resolve`, `fail_then_skip`: a run fails on a load hour, then the operator resolves
  its items, or skips the hour (its rows are then out for good);
- `delete`: every copy of one event deleted from the source after it was processed (by a
  deletion vector when the source is Spark's, else by rewriting its files);
- `compact`: the source compacted (Spark's OPTIMIZE, or delta-rs's compaction);
- `narrow_filter`: `event_names` narrowed, a rules change every processed hour runs again for;
- `erase`: a user erased with `forget`.

The source is either written by delta-rs or by Spark with deletion vectors on (as Databricks
creates tables). After the last checkpoint every table must equal docs/rules.md applied, by
the independent reference, to the rows the source holds then, without the erased users' rows
and the skipped hours' rows, under the final settings. The long variant also rebuilds (the final
source processed at once into an empty warehouse that holds only the operator's records:
erasures, skipped hours) and compares that too.

Each example is a chain of Spark and Dagster runs: 30 to 60 s on 2 cores, 30 to 130 s with the
rebuild. `make test` runs two, `make test-long` LONG_EXAMPLES; `make test-sequences
SEQUENCE_EXAMPLES=200` runs as many as asked (80 to 90 s each on average: 4 to 5 hours for 200).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass, field

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    AS_OF,
    NARROWED,
    arrivals,
    assert_same_tables,
    fail_locked_hour_items,
    failing_for,
    hour_item,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHECKPOINTS = (at(1, 6), at(3, 12), at(12), at(45))
OPERATIONS = ("run", "backfill_a_day", "fail_then_resolve", "fail_then_skip", "delete", "compact", "narrow_filter",
              "erase")
# `make test-long`'s examples (SEQUENCE_EXAMPLES overrides it for a run by hand).
LONG_EXAMPLES = int(os.environ.get("SEQUENCE_EXAMPLES", "8"))


@dataclass
class Lake:
    """The source as it grows and what the operator did to it; the judge's view of both."""

    path: str
    spark_source: bool  # written by Spark with deletion vectors on; else by delta-rs
    pending: list[tuple[dt.datetime, dict]]
    rows: list[dict] = field(default_factory=list)  # the rows the source holds now
    erased_users: set[str] = field(default_factory=set)
    skipped_hours: set[dt.datetime] = field(default_factory=set)
    narrowed: bool = False

    def land_until(self, spark, t: dt.datetime, staging) -> None:
        due = [row for landed, row in self.pending if landed <= t]
        self.pending = [(landed, row) for landed, row in self.pending if landed > t]
        if not due:
            return
        if self.spark_source:
            staged = str(staging / f"landing-{len(self.rows)}.parquet")
            pq.write_table(hostile.source_table(due), staged)
            writer = spark.read.parquet(staged).write.format("delta").mode("append").partitionBy("load_date")
            writer.option("delta.enableDeletionVectors", "true").save(self.path)
        else:
            hostile.write_source(self.path, due)
        self.rows += due

    def expected_rows(self) -> list[dict]:
        return [r for r in self.rows if r.get("domain_userid") not in self.erased_users
                and ((t := reference.load_time(r)) is None or reference.hour_of(t) not in self.skipped_hours)]


def _delete_event(spark, lake: Lake, event_id: str) -> None:
    if lake.spark_source:
        spark.sql(f"DELETE FROM delta.`{lake.path}` WHERE event_id = '{event_id}'")
    else:
        DeltaTable(lake.path).delete(f"event_id = '{event_id}'")
    lake.rows = [r for r in lake.rows if r.get("event_id") != event_id]


def _compact(spark, lake: Lake) -> None:
    if lake.spark_source:
        spark.sql(f"OPTIMIZE delta.`{lake.path}`")
    else:
        DeltaTable(lake.path).optimize.compact()


def _run(instance, t: dt.datetime, expect_success: bool | None = True):
    from incremental_assets import runner

    report = runner.run_until(t, instance=instance, echo=quiet)
    assert expect_success is None or report.success == expect_success, (t, report.refused, report.runs)
    return report


def _fail_on(monkeypatch, instance, hour: dt.datetime, t: dt.datetime) -> bool:
    """Run with a failure injected into the window holding `hour`; whether that hour failed."""
    from incremental_assets.assets import hourly as hourly_asset

    with monkeypatch.context() as m:
        m.setattr(hourly_asset, "compute", failing_for(hour))
        _run(instance, t, expect_success=None)
    return hour_item(hour) in fail_locked_hour_items()


def _resolve_all() -> None:
    from incremental_assets.operations import resolve_item
    from incremental_assets.settings import Settings

    for item in fail_locked_hour_items():
        resolve_item(Settings.load(), item, note="transient")


def apply(operation: str, data, *, spark, instance, monkeypatch, lake: Lake, warehouse, t: dt.datetime) -> None:
    """One checkpoint: the operation, then the runs until `t` succeed."""
    from incremental_assets import forget, runner
    from incremental_assets.operations import skip_item
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    loaded = sorted({reference.hour_of(lt) for r in lake.rows if (lt := reference.load_time(r)) is not None})
    if operation == "backfill_a_day" and loaded:
        day = data.draw(st.sampled_from(sorted({h.date() for h in loaded})), label="backfilled day")
        assert runner.backfill(day, day, instance=instance, echo=quiet, now=t).success
    elif operation in ("fail_then_resolve", "fail_then_skip") and loaded:
        hour = data.draw(st.sampled_from(loaded), label="failing hour")
        if _fail_on(monkeypatch, instance, hour, t) and operation == "fail_then_skip":
            skip_item(Settings.load(), hour_item(hour), note="bad file")
            lake.skipped_hours.add(hour)
        _resolve_all()
    elif operation == "delete":
        ids = sorted({r["event_id"] for r in lake.rows if r.get("event_id")})
        if ids:
            _delete_event(spark, lake, data.draw(st.sampled_from(ids), label="deleted event"))
    elif operation == "compact":
        _compact(spark, lake)
    elif operation == "narrow_filter" and not lake.narrowed:
        use(monkeypatch, lake.path, warehouse, INCREMENTAL_EVENT_NAMES=",".join(NARROWED))
        lake.narrowed = True
    elif operation == "erase":
        user = data.draw(st.sampled_from(("r-u1", "r-u2")), label="erased user")
        settings = Settings.load()
        tables = table_store(spark, settings.warehouse_root, settings.table_engine)
        forget.request_erasure(settings, tables, forget.erased([("domain_userid", user)]), instance=instance, now=t)
        lake.erased_users.add(user)
    _run(instance, t)


def check_sequence(spark, instance, tmp, monkeypatch, rows, data, *, rebuild: bool) -> None:
    lake = Lake(str(tmp / "events"), spark_source=data.draw(st.booleans(), label="Spark source with deletion vectors"),
                pending=sorted(arrivals(rows), key=lambda a: a[0]))
    warehouse = tmp / "warehouse"
    use(monkeypatch, lake.path, warehouse)
    for t in CHECKPOINTS:
        operation = data.draw(st.sampled_from(OPERATIONS), label=f"at {t:%m-%d %H:%M}")
        event(f"operation: {operation}")
        lake.land_until(spark, t, tmp)
        if not lake.rows:
            continue
        apply(operation, data, spark=spark, instance=instance, monkeypatch=monkeypatch, lake=lake,
              warehouse=warehouse, t=t)
    if not lake.rows:
        return
    event(f"source: {'Spark, deletion vectors' if lake.spark_source else 'delta-rs'}")
    names = NARROWED if lake.narrowed else ()
    expected = reference.expected_tables(lake.expected_rows(), reference_settings(names), AS_OF)
    assert_same_tables(pipeline_tables(warehouse), expected, "a sequence of operations vs the documented rules")
    if rebuild:
        # One rebuild: the final source processed at once in an empty warehouse that holds only
        # the operator's records (erasures, skipped hours), which are not derived from the source.
        rebuilt = tmp / "rebuilt"
        rebuilt.mkdir()
        for record in ("erasure_requests", "skipped_load_hours"):
            if (warehouse / record).exists():
                shutil.copytree(warehouse / record, rebuilt / record)
        use(monkeypatch, lake.path, rebuilt, **({"INCREMENTAL_EVENT_NAMES": ",".join(names)} if names else {}))
        _run(instance, CHECKPOINTS[-1])
        assert_same_tables(pipeline_tables(rebuilt), expected, "one rebuild after the sequence vs the documented rules")

EXAMPLE_SETTINGS = dict(deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                               HealthCheck.data_too_large])


@hypothesis_settings(max_examples=2, **EXAMPLE_SETTINGS)
@given(rows=hostile.source_rows(max_events=8), data=st.data())
def test_operation_sequences_give_the_documented_tables(spark, instance, tmp_path_factory, rows, data):
    with pytest.MonkeyPatch.context() as monkeypatch:
        check_sequence(spark, instance, tmp_path_factory.mktemp("sequence"), monkeypatch, rows, data, rebuild=False)


@pytest.mark.long
@hypothesis_settings(max_examples=LONG_EXAMPLES, **EXAMPLE_SETTINGS)
@given(rows=hostile.source_rows(max_events=10), data=st.data())
def test_many_operation_sequences_give_the_documented_tables_and_a_rebuild_too(spark, instance, tmp_path_factory,
                                                                               rows, data):
    with pytest.MonkeyPatch.context() as monkeypatch:
        check_sequence(spark, instance, tmp_path_factory.mktemp("sequence"), monkeypatch, rows, data, rebuild=True)
