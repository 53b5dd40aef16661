"""The event-day steps on a tiny warehouse, called without Dagster (docs/rules.md 6-7).

- The daily step computes everything from one snapshot of filtered_events: an hourly run that
  commits rows of the day while the step runs must not get them recorded in the day ledger as
  aggregated (the daily rows do not hold them, and the day would never be rebuilt for them).
- `attributes` in `last_n_days` mode recomputes the users queued by a daily rebuild whole: it
  consumes their queue rows, so their lifetime values must be right after it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from incremental_assets.names import ATTRIBUTES, DAILY_AGGREGATES, FILTERED_EVENTS, USERS_TO_REFRESH
from incremental_assets.state.users_to_refresh import queued
from incremental_assets.steps.daily_compute import aggregate_days, attributes_update
from incremental_assets.transforms.daily_aggregates import daily_aggregates
from incremental_assets.transforms.filtered_events import filtered_events
from incremental_assets.transforms.sessions import session_lifecycle
from resources.spark import SparkResource
from resources.warehouse import WarehouseResource
from tests.unit.transforms.conftest import event, events_frame, ts

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = ts().date()
NEXT_DAY = DAY + timedelta(days=1)
AS_OF = DAY + timedelta(days=20)


def warehouse_on(engine: str, tmp_path, monkeypatch) -> WarehouseResource:
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", (DAY - timedelta(days=30)).isoformat())
    monkeypatch.setenv("INCREMENTAL_TABLE_ENGINE", engine)
    return WarehouseResource(pyspark=SparkResource(spark_config={}))


def filtered(spark, rows: list[dict]):
    base = events_frame(spark, rows)
    return filtered_events(base, session_lifecycle(base, max_session_days=3), event_names=(),
                           start_date=ts(-1000), max_session_days=3)


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_the_day_ledger_records_the_rows_the_daily_rows_were_built_from(spark, tmp_path, monkeypatch, engine):
    warehouse = warehouse_on(engine, tmp_path, monkeypatch)
    tables = warehouse.tables
    tables.append(FILTERED_EVENTS, filtered(spark, [event("e1"), event("e2", derived=ts(1))]),
                  partition_by=["event_date"])
    results = aggregate_days(warehouse, DAY, NEXT_DAY, "daily-run")
    # An hourly run commits a late row of the day before the daily step writes its ledger.
    tables.append(FILTERED_EVENTS, filtered(spark, [event("e3", derived=ts(2), load=ts(30))]),
                  partition_by=["event_date"])

    aggregated = sum(r.events for r in results.daily.collect())
    recorded = sum(r.rows_aggregated for r in results.ledger.collect())
    assert (aggregated, recorded) == (2, 2), f"{engine}: daily rows of {aggregated} rows, ledger says {recorded}"


def _write_day(warehouse: WarehouseResource, spark, rows: list[dict]) -> None:
    warehouse.tables.overwrite(DAILY_AGGREGATES, daily_aggregates(filtered(spark, rows)), partition_by=["event_date"])


def _write_attributes(warehouse: WarehouseResource, run_type: str) -> None:
    """What the attributes step writes: the table (overwritten), then the queue rows consumed."""
    update = attributes_update(warehouse, AS_OF, run_type)
    assert update.full
    warehouse.tables.overwrite(ATTRIBUTES, update.rows)
    if update.consumed:
        warehouse.tables.delete_where_in(USERS_TO_REFRESH, "append_id", list(update.consumed))


def test_last_n_days_recomputes_the_lifetime_values_of_the_users_it_consumes(spark, tmp_path, monkeypatch):
    warehouse = warehouse_on("delta-rs", tmp_path, monkeypatch)
    first = [event("a1", user="u1", session="s1"), event("b1", user="u2", session="s2")]
    _write_day(warehouse, spark, first)
    _write_attributes(warehouse, "full")
    # A late row of u1 rebuilds the day; the daily step queues u1.
    _write_day(warehouse, spark, [*first, event("a2", user="u1", session="s1", derived=ts(1))])
    warehouse.tables.append(USERS_TO_REFRESH, queued(spark.createDataFrame([("u1",)], "domain_userid string"),
                                                     "daily-run"))

    _write_attributes(warehouse, "last_n_days")
    stored = {r.domain_userid: r.asDict() for r in warehouse.tables.read(ATTRIBUTES).collect()}
    assert stored["u1"]["lifetime_events"] == 2, stored["u1"]
    assert not warehouse.tables.read(USERS_TO_REFRESH).count()  # consumed: no later run recomputes u1
    full = {r.domain_userid: r.asDict() for r in attributes_update(warehouse, AS_OF, "full").rows.collect()}
    assert stored == full
