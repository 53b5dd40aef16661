"""Declared attributes (docs/rules.md 8): states merged over days equal the plain computation.

- Random histories and declarations: states built per day, some days then rebuilt after rows
  arrived or were removed, merged as of a day, equal every user's attributes computed at once
  from the final rows (tests/declared_reference.py), for every aggregation, criterion, period,
  and a property in an atomic column, a JSON context column and an array-of-structs column.
- Snowplow's batch-engine events (../shared/peer) give their expected attributes, straight
  from the source rows (the pipeline test adds this product's validation rules to it).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.sql.window import Window

from incremental_assets.planning.attribute_declarations import declarations, parse_declarations
from incremental_assets.sources.csv_loader import read_snowplow_csv
from incremental_assets.sources.schema import conform_to_atomic
from incremental_assets.transforms.attribute_states import (
    attribute_states,
    declared_values,
    with_declared_attributes,
)
from tests.declared_reference import as_snowplow_text, comparable
from tests.declared_reference import declared_values as reference_values

pytestmark = [pytest.mark.spark]

CART = "contexts_com_acme_cart_1_0_0"  # a JSON string, as in CSV exports
DEVICE = "contexts_com_acme_device_1_0_0"  # an array of structs, as Delta and Parquet loaders write it
SCHEMA = StructType([
    StructField("event_date", DateType()), StructField("domain_userid", StringType()),
    StructField("derived_tstamp", TimestampType()), StructField("event_name", StringType()),
    StructField("event_vendor", StringType()), StructField("event_version", StringType()),
    StructField("geo_country", StringType()), StructField(CART, StringType()),
    StructField(DEVICE, ArrayType(StructType([StructField("os", StringType()), StructField("memory", LongType())]))),
])
FIRST_DAY = dt.date(2026, 3, 1)
AS_OF = dt.date(2026, 3, 7)


def pool(rng: random.Random) -> list[dict]:
    def period():
        return rng.choice(["lifetime", 1, 3, 7])

    amount = f"{CART}.amount"
    return [
        {"name": "views", "aggregation": "count", "events": ["page_view"], "period": period()},
        {"name": "events_all", "aggregation": "count"},
        {"name": "countries_n", "aggregation": "distinct_count", "property": "geo_country", "period": period()},
        {"name": "spend", "aggregation": "sum", "property": amount,
         "events": [{"name": "purchase", "vendor": "com.acme"}], "default": 0, "period": period()},
        {"name": "spend_mean", "aggregation": "mean", "property": amount},
        {"name": "spend_min", "aggregation": "min", "type": "number", "property": amount, "period": period()},
        {"name": "country_max", "aggregation": "max", "property": "geo_country"},
        {"name": "country_first", "aggregation": "first", "property": "geo_country", "period": period()},
        {"name": "os_last", "aggregation": "last", "property": f"{DEVICE}.os", "default": "unknown"},
        {"name": "name_top", "aggregation": "most_frequent", "property": "event_name", "period": period()},
        {"name": "countries", "aggregation": "distinct_list", "property": "geo_country", "cap": 2},
        {"name": "big_or_german", "aggregation": "count", "period": period(), "criteria": {"any": [
            {"property": amount, "operator": "gte", "value": 50},
            {"property": "geo_country", "operator": "in", "value": ["DE"]}]}},
        {"name": "memory_max", "aggregation": "max", "type": "number", "property": f"{DEVICE}[0].memory"},
        # A number attribute over text that is sometimes no number ("70" is one, "n/a" is not).
        {"name": "amount_last", "aggregation": "last", "type": "number", "property": amount, "period": period()},
        {"name": "amount_first", "aggregation": "first", "type": "number", "property": amount},
        {"name": "amount_top", "aggregation": "most_frequent", "type": "number", "property": amount},
        {"name": "snowplow_not_pings", "aggregation": "count", "criteria": {"all": [
            {"property": "event_vendor", "operator": "like", "value": "com.snow%"},
            {"property": "event_name", "operator": "neq", "value": "page_ping"}]}},
        {"name": "version_two_views", "aggregation": "count",
         "events": [{"name": "page_view", "version": "2-0-0"}]},
    ]


def random_event(rng: random.Random, day: dt.date) -> dict:
    name = rng.choice(["page_view", "page_view", "page_ping", "purchase"])
    cart = None
    if name == "purchase" or rng.random() < 0.2:
        cart = json.dumps([{"amount": rng.choice([5, 12.5, 50, 99.99, "70", "n/a"]), "currency": "EUR"}])
    device = None if rng.random() < 0.2 else [{"os": rng.choice(["Mac", "Linux", None]),
                                              "memory": rng.choice([4, 8, 16, None])}]
    # Whole minutes of a few hours: some events of a user share their time (ties).
    at = dt.datetime.combine(day, dt.time(rng.randrange(3), rng.choice([0, 15, 30])))
    return {"event_date": day, "domain_userid": rng.choice(["u1", "u2", "u3", "u4"]), "derived_tstamp": at,
            "event_name": name, "event_vendor": "com.acme" if name == "purchase" else "com.snowplowanalytics.snowplow",
            "event_version": rng.choice(["1-0-0", "2-0-0"]), "geo_country": rng.choice(["DE", "FR", "UK", None]),
            CART: cart, DEVICE: device}


def as_dicts(df, names) -> dict[str, dict]:
    return {row.domain_userid: {n: comparable(row[n]) for n in names} for row in df.collect()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_states_rebuilt_by_day_and_merged_equal_the_attributes_computed_at_once(spark, seed):
    rng = random.Random(seed)
    declared = declarations(pool(rng))
    days = [FIRST_DAY + dt.timedelta(days=n) for n in range(8)]  # the last two are on or after AS_OF
    history = [random_event(rng, rng.choice(days)) for _ in range(80)]

    states = attribute_states(spark.createDataFrame(history, SCHEMA), declared).cache()
    # Late rows land on some days and others go (a replay, an erasure): those days are rebuilt.
    changed = set(rng.sample(days, 3))
    final = [row for row in history if row["event_date"] not in changed or rng.random() < 0.7]
    final += [random_event(rng, day) for day in changed for _ in range(6)]
    rebuilt = attribute_states(spark.createDataFrame([r for r in final if r["event_date"] in changed], SCHEMA),
                               declared)
    states = states.where(~F.col("event_date").isin(sorted(changed))).unionByName(rebuilt)

    users = spark.createDataFrame([(u,) for u in sorted({r["domain_userid"] for r in final})], "domain_userid string")
    got = with_declared_attributes(users, declared_values(states, declared, as_of=AS_OF), declared)
    names = [d.name for d in declared]
    expected = reference_values(final, sorted({r["domain_userid"] for r in final}), declared, AS_OF)
    assert as_dicts(got, names) == {u: {n: comparable(v) for n, v in values.items()} for u, values in expected.items()}


def test_a_user_without_any_state_gets_every_default(spark):
    declared = declarations([{"name": "views", "aggregation": "count", "events": ["page_view"]},
                             {"name": "os", "aggregation": "last", "property": f"{DEVICE}.os", "default": "none"},
                             {"name": "oses", "aggregation": "distinct_list", "property": f"{DEVICE}.os"},
                             {"name": "spend", "aggregation": "sum", "property": f"{CART}.amount"}])
    states = attribute_states(spark.createDataFrame([], SCHEMA), declared)
    users = spark.createDataFrame([("u9",)], "domain_userid string")
    (row,) = with_declared_attributes(users, declared_values(states, declared, as_of=AS_OF), declared).collect()
    assert (row.views, row.os, row.oses, row.spend) == (0, "none", [], None)


def test_batch_engine_events_give_snowplows_attributes(spark, peer_dir):
    """The declaration of tests/peer/batch_engine_attributes.yml on their events, deduplicated
    (the first-loaded copy counts) and from their start date, as of their current day."""
    folder = peer_dir / "snowplow_batch_engine"
    events = conform_to_atomic(read_snowplow_csv(spark, folder / "snowplow_batch_engine_events.csv"))
    first_load = Window.partitionBy("event_id").orderBy("load_tstamp")
    first_copies = events.withColumn("copy", F.row_number().over(first_load)).where("copy = 1").drop("copy")
    rows = (first_copies.where(F.col("derived_tstamp") >= F.lit(dt.datetime(2025, 1, 1)))
            .withColumn("event_date", F.to_date("derived_tstamp")))
    yaml_path = Path(__file__).parents[2] / "peer" / "batch_engine_attributes.yml"
    declared = parse_declarations(yaml_path.read_text(), where=str(yaml_path))
    users = rows.select("domain_userid").distinct()
    got = with_declared_attributes(users, declared_values(attribute_states(rows, declared), declared,
                                                          as_of=dt.date(2025, 1, 6)), declared).toPandas()

    expected = pd.read_csv(folder / "snowplow_batch_engine_attributes_expected.csv", dtype=str,
                           keep_default_na=False).set_index("domain_userid")
    got = got.set_index("domain_userid")

    differences = {(u, c): (as_snowplow_text(got.at[u, c]), expected.at[u, c])
                   for u in expected.index for c in expected.columns
                   if as_snowplow_text(got.at[u, c]) != expected.at[u, c]}
    # user_2's page view event_7949, loaded two days late and the only late row of its day: Snowplow's
    # incremental runs left it out of their daily aggregates; computed at once it counts.
    assert differences == {("user_2", "page_view_events_count_last_7_days"): ("6", "5")}


def test_numbers_of_one_attribute_beside_text_of_others_compute(spark):
    """The benchmark's 50 declarations on a few rows: sums, means, minima and maxima of a
    number property in several periods share their conversion to a number, which Spark then
    evaluates on every row, text values of other attributes included (under ANSI mode a plain
    cast failed the run on 'web')."""
    bench_file = Path(__file__).parents[3] / "bench" / "attributes-50.yml"
    declared = parse_declarations(bench_file.read_text(), where=str(bench_file))
    schema = ("event_date date, domain_userid string, derived_tstamp timestamp, event_name string, "
              "event_vendor string, event_version string, app_id string, tr_total decimal(18,2), "
              "domain_sessionid string, user_id string")
    rows = [(FIRST_DAY + dt.timedelta(days=day), user, dt.datetime(2026, 3, 1 + day, hour), name, None, None, app,
             total, f"s-{user}-{day}", None if user == "u2" else f"id-{user}")
            for day, user, hour, name, app, total in [
                (0, "u1", 1, "page_view", "web", None), (0, "u1", 2, "transaction", "web", Decimal("12.50")),
                (3, "u1", 5, "transaction", "mobile", Decimal("60.00")), (5, "u2", 3, "page_ping", "web", None),
                (5, "u2", 4, "link_click", "mobile", None), (6, "u2", 1, "transaction", "web", Decimal("1.00"))]]
    events = spark.createDataFrame(rows, schema)
    got = with_declared_attributes(events.select("domain_userid").distinct(),
                                   declared_values(attribute_states(events, declared), declared, as_of=AS_OF), declared)
    names = [d.name for d in declared]
    plain = [dict(zip(events.columns, row)) for row in rows]
    expected = reference_values(plain, ["u1", "u2"], declared, AS_OF)
    assert as_dicts(got, names) == {u: {n: comparable(v) for n, v in values.items()} for u, values in expected.items()}


def test_an_attribute_with_no_row_of_a_user_gets_its_default_though_other_attributes_have_rows(spark):
    """u1 has page views but no purchase: the purchase attributes take their declared defaults
    (a distinct count merged from the other attributes' rows once gave 0 instead)."""
    declared = declarations([{"name": "views", "aggregation": "count", "events": ["page_view"]},
                             {"name": "purchase_countries", "aggregation": "distinct_count", "property": "geo_country",
                              "events": ["purchase"], "default": -1},
                             {"name": "purchases", "aggregation": "count", "events": ["purchase"], "default": -1}])
    at = dt.datetime(2026, 3, 2, 10)
    events = spark.createDataFrame([random_event(random.Random(0), FIRST_DAY) | {
        "domain_userid": "u1", "event_name": "page_view", "derived_tstamp": at, "geo_country": "DE"}], SCHEMA)
    users = spark.createDataFrame([("u1",)], "domain_userid string")
    (row,) = with_declared_attributes(users, declared_values(attribute_states(events, declared), declared, as_of=AS_OF),
                                      declared).collect()
    assert (row.views, row.purchase_countries, row.purchases) == (1, -1, -1)
