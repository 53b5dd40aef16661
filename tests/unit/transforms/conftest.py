"""Build small atomic-event DataFrames for transform tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

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


_FIELDS = (("event_id", "string"), ("domain_sessionid", "string"), ("domain_userid", "string"),
           ("event_name", "string"), ("event", "string"), ("app_id", "string"),
           ("derived_tstamp", "timestamp"), ("collector_tstamp", "timestamp"),
           ("dvce_created_tstamp", "timestamp"), ("dvce_sent_tstamp", "timestamp"),
           ("load_tstamp", "timestamp"), ("tr_total", "decimal(18,2)"),
           ("domain_sessionidx", "int"), ("user_id", "string"), ("page_url", "string"))


def events_frame(spark, rows: list[dict]):
    """Atomic events of `rows` (as `event` builds them), conformed to the atomic schema."""
    schema = ", ".join(f"{name} {kind}" for name, kind in _FIELDS)
    data = [tuple(Decimal(str(r[n])) if n == "tr_total" and r.get(n) is not None else r.get(n)
                  for n, _ in _FIELDS) for r in rows]
    return conform_to_atomic(spark.createDataFrame(data, schema))


@pytest.fixture
def events_df(spark):
    return lambda rows: events_frame(spark, rows)


def naive(value: datetime) -> datetime:
    """What collect() returns for a UTC instant: a naive datetime (the process runs in UTC)."""
    return value.astimezone(timezone.utc).replace(tzinfo=None)
