"""Build small atomic-event DataFrames for transform tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from incremental_assets.sources.schema import conform_to_atomic

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


def ts(hours: float = 0, days: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, days=days)


def event(event_id="e1", *, session="s1", user="u1", name="page_view", derived=None, load=None,
          collector=None, created=None, sent=None, app="web", revenue=None, **extra) -> dict:
    derived = derived or ts()
    row = {
        "event_id": event_id, "domain_sessionid": session, "domain_userid": user, "event_name": name,
        "event": name, "app_id": app, "derived_tstamp": derived,
        "collector_tstamp": collector or derived, "dvce_created_tstamp": created or derived,
        "dvce_sent_tstamp": sent or created or derived,
        "load_tstamp": load if load is not None else derived + timedelta(minutes=5),
        "tr_total": revenue, "domain_sessionidx": 1,
    }
    row.update(extra)
    return row


@pytest.fixture
def events_df(spark):
    from pyspark.sql.types import DecimalType, IntegerType, StringType, StructField, StructType, TimestampType

    fields = [("event_id", StringType()), ("domain_sessionid", StringType()), ("domain_userid", StringType()),
              ("event_name", StringType()), ("event", StringType()), ("app_id", StringType()),
              ("derived_tstamp", TimestampType()), ("collector_tstamp", TimestampType()),
              ("dvce_created_tstamp", TimestampType()), ("dvce_sent_tstamp", TimestampType()),
              ("load_tstamp", TimestampType()), ("tr_total", DecimalType(18, 2)),
              ("domain_sessionidx", IntegerType()), ("user_id", StringType()), ("page_url", StringType())]
    schema = StructType([StructField(n, t, True) for n, t in fields])

    def build(rows: list[dict]):
        from decimal import Decimal

        data = [tuple(Decimal(str(r[n])) if n == "tr_total" and r.get(n) is not None else r.get(n)
                      for n, _ in fields) for r in rows]
        return conform_to_atomic(spark.createDataFrame(data, schema))

    return build


def naive(value: datetime) -> datetime:
    """What collect() returns for a UTC instant: a naive datetime (the process runs in UTC)."""
    return value.astimezone(timezone.utc).replace(tzinfo=None)
