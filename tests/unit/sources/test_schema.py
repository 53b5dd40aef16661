"""conform_to_atomic: types, typed nulls for missing columns, extras kept, bad cells -> null."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

from pyspark.sql.types import DateType, DecimalType, IntegerType, StringType, TimestampType

from incremental_assets.sources.schema import (
    ATOMIC_EVENTS_SCHEMA,
    REQUIRED_COLUMNS,
    conform_to_atomic,
)
from tests.helpers import utc


def instant(value: datetime | None) -> datetime | None:
    """PySpark returns naive local-time datetimes: make them comparable to aware UTC ones."""
    return None if value is None else value.astimezone(timezone.utc)


def test_schema_has_snowplow_names_and_types():
    types = {f.name: f.dataType for f in ATOMIC_EVENTS_SCHEMA.fields}
    for name in ["collector_tstamp", "dvce_created_tstamp", "dvce_sent_tstamp", "derived_tstamp", "load_tstamp"]:
        assert types[name] == TimestampType(), name
    for name in ["event_id", "app_id", "platform", "event_name", "event", "domain_userid", "user_id",
                 "network_userid", "domain_sessionid", "page_url", "page_urlpath", "page_title", "refr_urlhost",
                 "refr_medium", "mkt_source", "mkt_medium", "mkt_campaign", "geo_country", "geo_timezone",
                 "os_timezone", "br_lang", "useragent", "tr_orderid"]:
        assert types[name] == StringType(), name
    assert types["domain_sessionidx"] == IntegerType()
    assert types["tr_total"] == DecimalType(18, 2)
    assert types["load_date"] == DateType()
    assert ATOMIC_EVENTS_SCHEMA.fieldNames()[-1] == "load_date"
    assert REQUIRED_COLUMNS == ("event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp")


def test_conform_types_strings_and_keeps_extras_after_the_schema(spark):
    raw = spark.createDataFrame(
        [
            ("e1", "2021-03-01 21:39:43.815", "2021-03-01 21:39:40.000", "12.345", "3", "ctx-1", "true"),
            ("e2", "", "2021-03-02 23:59:59.999", "", "", "", ""),
            ("e3", "not a time", "2021-03-03 00:00:00.000", "twelve", "2.5", None, "maybe"),
        ],
        ["event_id", "load_tstamp", "collector_tstamp", "tr_total", "domain_sessionidx", "my_context",
         "dvce_ismobile"],
    )
    df = conform_to_atomic(raw)

    assert df.columns == ATOMIC_EVENTS_SCHEMA.fieldNames() + ["my_context"]
    assert [(f.name, f.dataType) for f in df.schema.fields[:-1]] == [
        (f.name, f.dataType) for f in ATOMIC_EVENTS_SCHEMA.fields
    ]
    rows = {r.event_id: r for r in df.collect()}

    assert instant(rows["e1"].load_tstamp) == utc(2021, 3, 1, 21, 39, 43, 815000)
    assert rows["e1"].tr_total == Decimal("12.35")
    assert rows["e1"].domain_sessionidx == 3
    assert rows["e1"].dvce_ismobile is True
    assert rows["e1"].load_date == date(2021, 3, 1)
    assert rows["e1"].my_context == "ctx-1"
    # Empty strings are null; load_date falls back to the collector day.
    assert rows["e2"].load_tstamp is None and rows["e2"].tr_total is None
    assert rows["e2"].load_date == date(2021, 3, 2)
    assert rows["e2"].my_context == ""  # extras pass through untouched
    # Cells that cannot be read become null: no error.
    assert rows["e3"].load_tstamp is None
    assert rows["e3"].tr_total is None
    assert rows["e3"].domain_sessionidx is None
    assert rows["e3"].dvce_ismobile is None
    assert instant(rows["e3"].collector_tstamp) == utc(2021, 3, 3)


def test_conform_adds_missing_columns_as_typed_nulls_and_is_idempotent(spark):
    df = conform_to_atomic(spark.createDataFrame([("e1",)], ["event_id"]))
    assert df.schema == ATOMIC_EVENTS_SCHEMA
    row = df.collect()[0]
    assert row.event_id == "e1" and row.derived_tstamp is None and row.load_date is None

    again = conform_to_atomic(df)
    assert again.schema == df.schema
    assert again.collect() == df.collect()
