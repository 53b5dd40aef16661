"""Contract tests of the Delta table store, run against every engine.

One set of tests, parametrized over the engines: delta-rs runs everywhere; delta-spark runs
where the Spark session loads the Delta jars and skips (with the reason) elsewhere.
Engine-internal checks of the delta-rs engine (file pruning, fallbacks) are at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from resources.tables import NoTableAt, RowRange, WriteResult, delta_log, delta_rs
from resources.tables.delta_rs import DeltaRsTableStore
from resources.tables.delta_spark import delta_spark_unavailable_reason
from resources.tables.stores import table_store

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
SCHEMA = "ts timestamp, event_date date, n long, s string"


def utc(day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> dt.datetime:
    return dt.datetime(2026, 1, day, hour, minute, second, micro, tzinfo=UTC)


def micros(value: dt.datetime) -> int:
    return (value - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def events(spark, *rows, schema: str = SCHEMA):
    """Rows given as (ts, n) or (ts, n, s); event_date is the UTC date of ts."""
    full = [(ts, ts.date(), n, rest[0] if rest else f"s{n}") for ts, n, *rest in rows]
    return spark.createDataFrame(full, schema)


def ns(df) -> list[int]:
    return sorted(r[0] for r in df.select("n").collect())


def instants(df) -> dict[int, int]:
    """n -> ts as exact microseconds since the epoch (no local-time conversion on the way)."""
    return {r.n: r.us for r in df.select("n", F.unix_micros("ts").alias("us")).collect()}


@pytest.fixture(params=["delta-rs", "delta-spark"])
def store(request, spark, tmp_path):
    if request.param == "delta-spark":
        # `make setup` caches the Delta jars and every session loads them: never a skip.
        reason = delta_spark_unavailable_reason(spark)
        assert reason is None, reason
    return table_store(spark, str(tmp_path / "warehouse"), engine=request.param)


@pytest.fixture
def rs_store(spark, tmp_path) -> DeltaRsTableStore:
    return table_store(spark, str(tmp_path / "warehouse"), engine="delta-rs")


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------


def test_table_names_must_be_plain_identifiers(store):
    assert store.path("base_events").endswith("/warehouse/base_events")
    for bad in ["../x", "a;b", "", "a b", "a/b", "a.b"]:
        with pytest.raises(ValueError, match="identifier"):
            store.path(bad)
    assert not store.exists("base_events")
    assert store.version("base_events") is None


# ---------------------------------------------------------------------------------------
# Reading a time range
# ---------------------------------------------------------------------------------------


def test_read_range_start_inclusive_end_exclusive(store, spark):
    # Several commits -> several files, so statistics pruning has something to prune.
    store.append("t", events(spark, (utc(5, 0), 0), (utc(5, 0, 59, 59, 999999), 1)))
    store.append("t", events(spark, (utc(5, 1), 2), (utc(5, 1, 30), 3)))
    store.append("t", events(spark, (utc(5, 2, 59, 59, 999999), 4), (utc(5, 3), 5)))
    store.append("t", events(spark, (utc(5, 4), 6)))

    assert ns(store.read_range("t", "ts", utc(5, 1), utc(5, 3))) == [2, 3, 4]
    assert ns(store.read_range("t", "ts", None, utc(5, 1))) == [0, 1]
    assert ns(store.read_range("t", "ts", utc(5, 3), None)) == [5, 6]
    assert ns(store.read_range("t", "ts", None, None)) == list(range(7))
    # Microsecond-exact bounds, inside one file's [min, max].
    assert ns(store.read_range("t", "ts", utc(5, 0, 59, 59, 999999), utc(5, 1, 0, 0, 1))) == [1, 2]
    # A date bound on a timestamp column means midnight UTC.
    assert ns(store.read_range("t", "ts", dt.date(2026, 1, 5), dt.date(2026, 1, 6))) == list(range(7))
    # Columns are selected after filtering.
    assert store.read_range("t", "ts", utc(5, 4), None, columns=["n"]).columns == ["n"]


def test_read_path_gives_every_row_null_range_values_too_at_a_version(store, spark, tmp_path):
    # The source read of an unpartitioned table: a row without a load_tstamp is still a row.
    store.append("p", spark.createDataFrame([(utc(5, 1), utc(5).date(), 1, "a"), (None, None, 2, "b")], SCHEMA))
    store.append("p", events(spark, (utc(6, 1), 3)))
    path = str(tmp_path / "warehouse" / "p")

    assert ns(store.read_path(path)) == [1, 2, 3]
    assert ns(store.read_path(path, version=0)) == [1, 2]
    assert store.read_path(path, columns=["n", "s"]).columns == ["n", "s"]


def test_read_range_on_partition_column_and_on_stats_of_partitioned_table(store, spark):
    rows = [(utc(day, hour), day * 100 + hour) for day in (4, 5, 6, 7) for hour in (0, 12, 23)]
    store.replace_range("p", events(spark, *rows), column="event_date",
                        start=dt.date(2026, 1, 4), end=dt.date(2026, 1, 8), partition_by=["event_date"])

    got = store.read_range("p", "event_date", dt.date(2026, 1, 5), dt.date(2026, 1, 7))
    assert ns(got) == [500, 512, 523, 600, 612, 623]
    # Midnight datetimes (a partition time window) work on a date column too.
    assert ns(store.read_range("p", "event_date", utc(7), utc(8))) == [700, 712, 723]
    with pytest.raises(ValueError, match="midnight"):
        store.read_range("p", "event_date", utc(7, 1), utc(8))
    # A range on a non-partition column of a partitioned table: statistics pruning, exact rows.
    assert ns(store.read_range("p", "ts", utc(5, 12), utc(6, 12))) == [512, 523, 600]
    # Partition columns come back with their values and types, in table order.
    df = store.read("p")
    assert df.columns == ["ts", "event_date", "n", "s"]
    assert dict(df.dtypes)["event_date"] == "date"
    assert {(r.n, r.event_date) for r in df.collect()} == {(n, ts.date()) for ts, n in rows}


def test_range_bounds_must_be_aware_and_ordered(store, spark):
    store.append("t", events(spark, (utc(5), 1)))
    with pytest.raises(ValueError, match="timezone-aware"):
        store.read_range("t", "ts", dt.datetime(2026, 1, 5), None)
    with pytest.raises(ValueError, match="empty range"):
        store.read_range("t", "ts", utc(6), utc(5))
    with pytest.raises(ValueError, match="not found"):
        store.read_range("t", "nope", utc(5), utc(6))
    with pytest.raises(ValueError, match="identifier"):
        store.read_range("t", "ts; DROP", utc(5), utc(6))


def test_timestamps_round_trip_exactly(store, spark):
    moments = {
        1: utc(5, 1, 2, 3, 456789),
        2: dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        3: dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC),
        4: dt.datetime(2026, 3, 29, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),  # not UTC
        5: dt.datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    }
    store.append("t", events(spark, *[(ts, n) for n, ts in moments.items()]))

    expected = {n: micros(ts) for n, ts in moments.items()}
    assert instants(store.read("t")) == expected
    assert instants(store.read_range("t", "ts", moments[2], moments[3])) == {
        n: us for n, us in expected.items() if n not in (3, 5)}  # 3 is the end, 5 is before the start
    arrow = store.read_arrow("t", columns=["n", "ts"])
    assert arrow.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert {n: ts for n, ts in zip(arrow["n"].to_pylist(), arrow["ts"].to_pylist())} == {
        n: ts.astimezone(UTC) for n, ts in moments.items()}


# ---------------------------------------------------------------------------------------
# Replacing a range
# ---------------------------------------------------------------------------------------


def test_replace_range_replaces_only_that_range_in_one_commit(store, spark):
    store.replace_range("t", events(spark, *[(utc(day, h), day * 10 + h) for day in (4, 5, 6) for h in (0, 1)]),
                        column="ts", start=utc(4), end=utc(7))
    before = store.version("t")

    result = store.replace_range("t", events(spark, (utc(5, 3), 53), (utc(5, 4), 54), (utc(5, 5), 55)),
                                 column="ts", start=utc(5), end=utc(6))

    assert result == WriteResult(rows_written=3, version=before + 1, rows_deleted=2)
    assert store.version("t") == before + 1
    assert ns(store.read("t")) == [40, 41, 53, 54, 55, 60, 61]
    # Rerunning the same replace is idempotent.
    store.replace_range("t", events(spark, (utc(5, 3), 53), (utc(5, 4), 54), (utc(5, 5), 55)),
                        column="ts", start=utc(5), end=utc(6))
    assert ns(store.read("t")) == [40, 41, 53, 54, 55, 60, 61]


def test_replace_range_refuses_rows_outside_the_range(store, spark):
    store.replace_range("t", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5), end=utc(6))
    version = store.version("t")

    outside = events(spark, (utc(5, 2), 2), (utc(6, 0), 3))  # end is exclusive
    with pytest.raises(ValueError, match=r"'ts'.*2026-01-06 00:00:00"):
        store.replace_range("t", outside, column="ts", start=utc(5), end=utc(6))
    nulls = spark.createDataFrame([(None, None, 4, "x")], SCHEMA)
    with pytest.raises(ValueError, match="'ts'.*None"):
        store.replace_range("t", nulls, column="ts", start=utc(5), end=utc(6))

    assert store.version("t") == version
    assert ns(store.read("t")) == [1]


def test_replace_range_failing_midway_keeps_old_rows(store, spark):
    store.replace_range("t", events(spark, (utc(5, 1), 1), (utc(5, 2), 2)), column="ts", start=utc(5), end=utc(6))
    version = store.version("t")

    # The new rows fail while Spark computes them (a bad row deep in the data).
    failing = events(spark, *[(utc(5, h), 10 + h) for h in range(10)]).withColumn(
        "n", F.when(F.col("n") == 17, F.raise_error(F.lit("bad row"))).otherwise(F.col("n")))
    with pytest.raises(Exception, match="bad row"):
        store.replace_range("t", failing, column="ts", start=utc(5), end=utc(6))

    assert store.version("t") == version
    assert ns(store.read("t")) == [1, 2]


def test_replace_range_with_empty_df_creates_an_empty_table(store, spark):
    empty = spark.createDataFrame([], SCHEMA)
    result = store.replace_range("t", empty, column="event_date", start=dt.date(2026, 1, 5),
                                 end=dt.date(2026, 1, 6), partition_by=["event_date"])

    assert result.rows_written == 0 and result.version == 0
    assert store.exists("t")
    df = store.read("t")
    assert df.count() == 0
    assert dict(df.dtypes) == {"ts": "timestamp", "event_date": "date", "n": "bigint", "s": "string"}
    assert store.read_range("t", "ts", utc(5), utc(6)).count() == 0
    assert store.read_range("t", "event_date", dt.date(2026, 1, 5), None).count() == 0
    assert store.describe("t")["num_files"] == 0

    # An empty df on an existing table empties the range.
    store.replace_range("t", events(spark, (utc(5, 1), 1), (utc(6, 1), 2)), column="event_date",
                        start=dt.date(2026, 1, 5), end=dt.date(2026, 1, 7))
    store.replace_range("t", empty, column="event_date", start=dt.date(2026, 1, 5), end=dt.date(2026, 1, 6))
    assert ns(store.read("t")) == [2]
    # Also on a range of a column that is not the partition column (no file written at all).
    store.replace_range("t", empty, column="ts", start=utc(6), end=utc(7))
    assert ns(store.read("t")) == []


def test_an_empty_replace_with_an_open_start_deletes_everything_before_the_end(store, spark):
    # What a start_date moved later removes (incremental_assets/state/start_moved.py): every row
    # before the start, on a partition column and on a column that is not one.
    store.append("t", events(spark, (utc(4, 1), 1), (utc(5, 23), 2)), partition_by=["event_date"])
    store.append("t", events(spark, (utc(6, 0), 3), (utc(7, 1), 4)))
    empty = spark.createDataFrame([], SCHEMA)

    store.replace_range("t", empty, column="ts", start=None, end=utc(5, 23))
    assert ns(store.read("t")) == [2, 3, 4]
    store.replace_range("t", empty, column="event_date", start=None, end=dt.date(2026, 1, 7))
    assert ns(store.read("t")) == [4]


def test_replace_with_keyed_ranges_replaces_only_those_keys_in_one_commit(store, spark):
    from resources.tables import RowRange

    store.replace_range("t", events(spark, (utc(5, 1), 1, "a"), (utc(5, 2), 2, "b"), (utc(6, 1), 3, "a"),
                                    (utc(6, 2), 4, "c"), (utc(7, 1), 5, "a")),
                        column="ts", start=utc(5), end=utc(8))
    before = store.version("t")

    # The window's rows (day 5) and, from day 6 on, the rows of key 'a' only (it's 3 and 5).
    result = store.replace("t", events(spark, (utc(5, 3), 10, "x"), (utc(6, 5), 30, "a")),
                           rows=[RowRange("ts", utc(5), utc(6)), RowRange("ts", utc(6), None, key="s", values=("a",))])

    assert result == WriteResult(rows_written=2, version=before + 1, rows_deleted=4)
    assert ns(store.read("t")) == [4, 10, 30]
    # No key values: the keyed range selects nothing (and a row there is outside every range).
    with pytest.raises(ValueError, match="'ts'"):
        store.replace("t", events(spark, (utc(6, 7), 99, "zz")),
                      rows=[RowRange("ts", utc(5), utc(6)), RowRange("ts", utc(6), None, key="s", values=())])
    assert store.version("t") == before + 1


def test_replace_keys_replaces_and_deletes_exactly_the_given_keys(store, spark):
    store.replace_keys("k", events(spark, (utc(5), 1, "a"), (utc(5), 2, "b"), (utc(5), 3, "it's")),
                       key="s", keys=spark.createDataFrame([("a",), ("b",), ("it's",)], "s string"))
    version = store.version("k")

    # 'a' gets a new row, "it's" has none left (deleted), 'new' is inserted, 'b' is untouched.
    # A key of df outside `keys` ('extra') is written too; a key listed twice counts once.
    keys = spark.createDataFrame([("a",), ("it's",), ("new",), ("new",)], "s string")
    result = store.replace_keys("k", events(spark, (utc(6), 10, "a"), (utc(6), 40, "new"), (utc(7), 50, "extra")),
                                key="s", keys=keys)

    assert store.version("k") == version + 1
    assert result.rows_written == 3
    rows = store.read("k").select("s", "n", F.unix_micros("ts").alias("ts")).collect()
    assert sorted((r.s, r.n, r.ts) for r in rows) == sorted(
        [("a", 10, micros(utc(6))), ("b", 2, micros(utc(5))), ("new", 40, micros(utc(6))),
         ("extra", 50, micros(utc(7)))])
    # The errors name the write and the table, whichever engine raised them.
    with pytest.raises(ValueError, match="^replace_keys k: .*not unique"):
        store.replace_keys("k", events(spark, (utc(6), 1, "a"), (utc(6), 2, "a")), key="s", keys=keys)
    with pytest.raises(ValueError, match="^replace_keys k: .*null"):
        store.replace_keys("k", events(spark, (utc(6), 1, None)), key="s", keys=keys)
    assert store.version("k") == version + 1


# ---------------------------------------------------------------------------------------
# Merge, append, overwrite, delete
# ---------------------------------------------------------------------------------------


def test_merge_updates_matches_and_inserts_new_keys(store, spark):
    store.merge("m", events(spark, (utc(5), 1, "a"), (utc(5), 2, "b")), keys=["n"])
    result = store.merge("m", events(spark, (utc(6), 2, "B"), (utc(6), 3, "c")), keys=["n"])

    assert result.rows_written == 2
    assert result.version == store.version("m") == 1
    got = {r.n: (r.s, r.ts) for r in store.read("m").select("n", "s", F.unix_micros("ts").alias("ts")).collect()}
    assert got == {1: ("a", micros(utc(5))), 2: ("B", micros(utc(6))), 3: ("c", micros(utc(6)))}


def test_merge_refuses_duplicate_or_null_keys(store, spark):
    store.merge("m", events(spark, (utc(5), 1, "a")), keys=["n", "s"])
    with pytest.raises(ValueError, match="^merge m: .*not unique"):
        store.merge("m", events(spark, (utc(5), 2, "x"), (utc(6), 2, "x")), keys=["n", "s"])
    with pytest.raises(ValueError, match="^merge m: .*null"):
        store.merge("m", spark.createDataFrame([(utc(5), None, None, "x")], SCHEMA), keys=["n", "s"])
    with pytest.raises(ValueError, match="not found"):
        store.merge("m", events(spark, (utc(5), 3)), keys=["missing"])
    assert store.version("m") == 0


def test_append_with_a_token_writes_once(store, spark):
    first = store.append("a", events(spark, (utc(5), 1), (utc(5), 2)), token="load-2026-01-05T00")
    again = store.append("a", events(spark, (utc(5), 1), (utc(5), 2)), token="load-2026-01-05T00")
    other = store.append("a", events(spark, (utc(5), 3)), token="load-2026-01-05T01")
    untokened = [store.append("a", events(spark, (utc(5), 4))) for _ in range(2)]

    assert first == WriteResult(rows_written=2, version=0)
    assert again.skipped and again.rows_written == 0 and again.version == 0
    assert not other.skipped and other.version == 1
    assert [r.version for r in untokened] == [2, 3]
    assert ns(store.read("a")) == [1, 2, 3, 4, 4]


def test_compact_merges_small_files_of_the_partitions_given_and_vacuum_deletes_unreferenced(store, spark, tmp_path):
    for day, n in ((5, 1), (5, 2), (6, 3), (6, 4), (6, 5), (7, 6), (7, 7)):  # one file per append
        store.append("m", events(spark, (utc(day, n), n)), partition_by=["event_date"])
    store.replace_range("m", events(spark, (utc(6, 5), 50)), column="ts", start=utc(6, 5), end=utc(6, 6))
    table_dir = tmp_path / "warehouse" / "m"
    on_disk = lambda: {p.name for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts}  # noqa: E731

    def files_per_day() -> dict[str, int]:
        paths = DeltaTable(str(table_dir)).get_add_actions().column("path").to_pylist()
        return {day: sum(p.startswith(f"event_date={day}/") for p in paths) for day in ("2026-01-05", "2026-01-06",
                                                                                      "2026-01-07")}

    before = store.file_bytes_by_partition("m")
    assert {day: len(sizes) for day, sizes in before.items()} == files_per_day() == \
        {"2026-01-05": 2, "2026-01-06": 3, "2026-01-07": 2}
    assert all(size > 0 for sizes in before.values() for size in sizes)
    assert store.compact("m", partitions=[]) == 0
    assert files_per_day() == {"2026-01-05": 2, "2026-01-06": 3, "2026-01-07": 2}
    assert store.compact("m", partitions=["2026-01-06", "2026-01-07"]) == 5  # not day 5's
    assert files_per_day() == {"2026-01-05": 2, "2026-01-06": 1, "2026-01-07": 1}
    live = {Path(p).name for p in DeltaTable(str(table_dir)).get_add_actions().column("path").to_pylist()}
    unreferenced = on_disk() - live
    assert unreferenced  # removed files stay on disk until vacuumed
    assert store.vacuum("m", retention_hours=0) == len(unreferenced)
    assert on_disk() == live
    assert ns(store.read("m")) == [1, 2, 3, 4, 6, 7, 50]
    assert ns(store.read_range("m", "ts", utc(6), utc(7))) == [3, 4, 50]
    assert store.compact("m") == 2  # every partition: day 5's too
    assert files_per_day() == {"2026-01-05": 1, "2026-01-06": 1, "2026-01-07": 1}
    assert ns(store.read("m")) == [1, 2, 3, 4, 6, 7, 50]
    assert store.file_bytes_by_partition("m").keys() == before.keys()


def test_added_columns_evolve_the_schema_and_read_as_null_in_old_rows(store, spark):
    store.append("e", events(spark, (utc(5, 1), 1)))
    wider = "ts timestamp, event_date date, n long, s string, referrer string"
    store.append("e", spark.createDataFrame([(utc(5, 2), utc(5).date(), 2, "s2", "web")], wider))
    store.replace_range("e", spark.createDataFrame([(utc(6, 1), utc(6).date(), 3, "s3", "ads")], wider),
                        column="ts", start=utc(6), end=utc(7))
    widest = wider + ", score double"
    store.merge("e", spark.createDataFrame([(utc(5, 2), utc(5).date(), 2, "s2", "web", 0.5)], widest), keys=["n"])

    rows = {r.n: (r.referrer, r.score) for r in store.read("e").collect()}
    assert rows == {1: (None, None), 2: ("web", 0.5), 3: ("ads", None)}
    assert {r.n for r in store.read_range("e", "ts", utc(5), utc(6), columns=["n", "referrer"]).collect()} == {1, 2}
    assert store.read_arrow("e").column_names == ["ts", "event_date", "n", "s", "referrer", "score"]


TYPED = "ts timestamp, event_date date, n long, s string, score int, ctx array<struct<v:int>>"


def typed(spark, n: int, score, v, schema: str = TYPED):
    return spark.createDataFrame([(utc(5, n), utc(5).date(), n, f"s{n}", score, [(v,)])], schema)


def test_a_column_whose_type_widens_is_refused_by_every_write_naming_it_never_cast_down(store, spark):
    store.append("e", typed(spark, 1, 5, 7))
    writes = {
        "append": lambda df: store.append("e", df),
        "replace_range": lambda df: store.replace_range("e", df, column="ts", start=utc(5), end=utc(6)),
        "merge": lambda df: store.merge("e", df, keys=["n"]),
        "replace_keys": lambda df: store.replace_keys("e", df, key="n", keys=df.select("n")),
    }
    # A context field that became double in a rewritten source (top level, then nested).
    top = typed(spark, 1, 5.7, 7, TYPED.replace("score int", "score double"))
    nested = typed(spark, 1, 5, 7.5, TYPED.replace("v:int", "v:double"))
    for write in writes.values():
        with pytest.raises(ValueError, match=r"e: column score is int in the table but double in the rows written; "
                                             r".* never cast down\. Give the column its old type"):
            write(top)
        with pytest.raises(ValueError, match=r"e: column ctx\[\]\.v is int in the table but double"):
            write(nested)
    assert [(r.score, r.ctx[0].v) for r in store.read("e").collect()] == [(5, 7)]
    assert store.read("e").schema["score"].dataType.simpleString() == "int"
    # A narrower type the table's holds exactly is written as the table's.
    writes["merge"](typed(spark, 1, 6, 8, TYPED.replace("n long", "n int")))
    assert [(r.n, r.score, r.ctx[0].v) for r in store.read("e").collect()] == [(1, 6, 8)]


def test_overwrite_replaces_the_whole_table_in_one_commit(store, spark):
    store.append("o", events(spark, (utc(5), 1), (utc(6), 2)))
    result = store.overwrite("o", spark.createDataFrame([(7, "x")], "user_id long, label string"))

    assert result == WriteResult(rows_written=1, version=1, rows_deleted=2)
    assert store.read("o").collect() == [(7, "x")]
    assert store.read("o").columns == ["user_id", "label"]


HOSTILE = ["it's", "' OR 1=1 --", "a'); DROP TABLE x; --", "line1\nline2", "back\\slash", "\\'", '"quoted"', "%_*"]


def test_delete_where_in_deletes_exact_matches_of_hostile_values(store, spark):
    near_misses = ["its", "' OR 1=1", "line1", "backslash", "plain", "quoted", "%"]
    store.append("d", events(spark, *[(utc(5), i, s) for i, s in enumerate(HOSTILE + near_misses)]))

    result = store.delete_where_in("d", "s", HOSTILE)

    assert result.rows_deleted == len(HOSTILE)
    assert result.version == 1
    assert sorted(r.s for r in store.read("d").collect()) == sorted(near_misses)
    assert store.delete_where_in("d", "s", []).rows_deleted == 0
    assert store.delete_where_in("d", "n", [len(HOSTILE)]).rows_deleted == 1  # integers too
    with pytest.raises(ValueError, match="identifier"):
        store.delete_where_in("d", "s OR 1=1", ["x"])


def test_delete_where_in_takes_tens_of_thousands_of_values_in_one_commit(store, spark):
    # As one IN predicate, some 30,000 values overflowed delta-rs's native stack (a segfault).
    store.append("d", events(spark, *[(utc(5), n) for n in range(5)]))
    version = store.version("d")

    result = store.delete_where_in("d", "s", [f"s{n}" for n in range(1, 40_000, 2)])

    assert result.rows_deleted == 2 and result.version == version + 1
    assert ns(store.read("d")) == [0, 2, 4]


def test_read_arrow_and_describe(store, spark):
    store.replace_range("r", events(spark, (utc(5, 1), 1, "a"), (utc(6, 1), 2, "b"), (utc(6, 2), 3, "c")),
                        column="event_date", start=dt.date(2026, 1, 5), end=dt.date(2026, 1, 7),
                        partition_by=["event_date"])

    table = store.read_arrow("r", columns=["n", "s"], filters=[("event_date", "=", dt.date(2026, 1, 6))])
    assert sorted(table["n"].to_pylist()) == [2, 3] and table.column_names == ["n", "s"]
    dnf = store.read_arrow("r", filters=[[("s", "=", "a")], [("n", ">=", 3)]])
    assert sorted(dnf["n"].to_pylist()) == [1, 3]

    info = store.describe("r")
    assert info["path"] == store.path("r")
    assert info["version"] == 0
    assert info["num_files"] == 2  # one per event_date partition
    assert info["size_bytes"] > 0
    with pytest.raises(FileNotFoundError):
        store.describe("missing")


@pytest.mark.parametrize("there", ["nothing", "a folder without a Delta log"])
def test_every_operation_that_needs_a_table_names_the_path_it_found_none_at(store, there):
    missing = store.path("missing")
    if there != "nothing":
        os.makedirs(missing)
    operations = {"read": lambda: store.read("missing"), "describe": lambda: store.describe("missing"),
                  "read_range": lambda: store.read_range("missing", "ts", utc(1), utc(2)),
                  "read_arrow": lambda: store.read_arrow("missing"),
                  "compact": lambda: store.compact("missing"),
                  "vacuum": lambda: store.vacuum("missing", retention_hours=0),
                  "file_bytes_by_partition": lambda: store.file_bytes_by_partition("missing")}
    for name, operation in operations.items():
        with pytest.raises(NoTableAt) as raised:
            operation()
        assert raised.value.path == missing and missing in str(raised.value), name
    assert not store.exists("missing")  # none of them created a table


# ---------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------


def run_together(*jobs):
    """Run the jobs in threads released at the same moment; re-raise the first failure."""
    barrier = threading.Barrier(len(jobs))
    failures: list[BaseException] = []

    def run(job):
        barrier.wait()
        try:
            job()
        except BaseException as error:  # noqa: BLE001 - reported to the test below
            failures.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def test_concurrent_writers_to_different_ranges_keep_each_others_rows(store, spark):
    def writer(day: int, n0: int):
        df = events(spark, *[(utc(day, h), n0 + h) for h in range(3)])
        return lambda: store.replace_range("c", df, column="ts", start=utc(day), end=utc(day + 1))

    # The table does not exist yet: the writers also race to create it.
    run_together(writer(5, 500), writer(6, 600), writer(7, 700))
    assert ns(store.read("c")) == [500, 501, 502, 600, 601, 602, 700, 701, 702]

    run_together(writer(5, 510), writer(6, 610), writer(8, 810))
    assert ns(store.read("c")) == [510, 511, 512, 610, 611, 612, 700, 701, 702, 810, 811, 812]


def test_concurrent_writers_to_the_same_range_leave_one_writers_rows(store, spark):
    store.replace_range("c", events(spark, (utc(4), 1)), column="ts", start=utc(4), end=utc(5))
    frames = [events(spark, *[(utc(5, h), n0 + h) for h in range(2)]) for n0 in (100, 200, 300)]
    run_together(*[lambda df=df: store.replace_range("c", df, column="ts", start=utc(5), end=utc(6))
                   for df in frames])
    in_range = ns(store.read_range("c", "ts", utc(5), utc(6)))
    assert in_range in ([100, 101], [200, 201], [300, 301])
    assert ns(store.read_range("c", "ts", utc(4), utc(5))) == [1]


def test_concurrent_appends_with_the_same_token_write_once(store, spark):
    frames = [events(spark, (utc(5), n)) for n in (1, 2, 3)]
    results: list[WriteResult] = []
    run_together(*[lambda df=df: results.append(store.append("a", df, token="same")) for df in frames])
    assert store.read("a").count() == 1
    assert sorted(r.skipped for r in results) == [False, True, True]


# ---------------------------------------------------------------------------------------
# Choosing an engine
# ---------------------------------------------------------------------------------------


def test_engine_selection(spark, tmp_path):
    root = str(tmp_path)
    assert delta_spark_unavailable_reason(spark) is None  # the session loads the cached jars
    assert table_store(spark, root).engine_name == "delta-spark"  # auto
    assert table_store(spark, root, engine="delta-rs").engine_name == "delta-rs"
    with pytest.raises(ValueError, match=r"table_engine.*'auto', 'delta-rs', 'delta-spark'"):
        table_store(spark, root, engine="delta")


class _SessionWithoutDelta:
    """A Spark session as seen through Spark Connect without the Delta extension."""

    class conf:  # noqa: N801 - stands in for SparkSession.conf
        @staticmethod
        def get(key, default=None):
            return default


def test_delta_spark_unavailable_says_how_to_enable_it():
    reason = delta_spark_unavailable_reason(_SessionWithoutDelta())
    assert "spark.sql.extensions does not include io.delta.sql.DeltaSparkSessionExtension" in reason
    assert re.search(r"make setup.*io\.delta:delta-spark_\d\.\d_2\.13:\d", reason), reason


# ---------------------------------------------------------------------------------------
# delta-rs engine internals: file pruning, reading fallbacks, a write failing mid-stream
# ---------------------------------------------------------------------------------------


def test_delta_rs_prunes_files_by_partition_values_and_statistics(rs_store, spark):
    for day in (4, 5, 6, 7):  # one commit (one file) per day
        rs_store.append("t", events(spark, (utc(day, 1), day * 10 + 1), (utc(day, 2, 0, 0, 123456), day * 10 + 2)))
    assert len(rs_store.read("t").inputFiles()) == 4

    by_stats = rs_store.read_range("t", "ts", utc(5), utc(6))
    assert len(by_stats.inputFiles()) == 1 and ns(by_stats) == [51, 52]
    # Statistics are stored in milliseconds (x.123 for x.123456): a start just after the
    # stored maximum must still read the file.
    late = rs_store.read_range("t", "ts", utc(5, 2, 0, 0, 123400), utc(5, 3))
    assert len(late.inputFiles()) == 1 and ns(late) == [52]
    assert rs_store.read_range("t", "ts", utc(5, 2, 0, 0, 123457), utc(5, 3)).count() == 0
    assert rs_store.read_range("t", "ts", utc(9), utc(10)).count() == 0

    rs_store.replace_range("p", rs_store.read("t"), column="ts", start=utc(4), end=utc(8),
                           partition_by=["event_date"])
    by_partition = rs_store.read_range("p", "event_date", dt.date(2026, 1, 6), dt.date(2026, 1, 8))
    assert len(by_partition.inputFiles()) == 2 and ns(by_partition) == [61, 62, 71, 72]


def test_delta_rs_opens_many_files_without_a_spark_job(rs_store, spark):
    # An hourly table holds a file per load hour: opening 40 files must not start a Spark job to
    # list what the Delta log already lists (Spark does from 33 paths on by default).
    rows = [(utc(4, minute // 60, minute % 60), minute) for minute in range(200)]  # 5 rows a file
    rs_store.replace_range("t", events(spark, *rows).repartition(40), column="ts", start=utc(4), end=utc(5))
    context = spark.sparkContext
    context.setJobGroup("open-many-files", "opening a table of 40 files")
    try:
        opened = rs_store.read("t")
        listing_jobs = context.statusTracker().getJobIdsForGroup("open-many-files")
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(key, None)  # no group for the session's later jobs
    assert len(opened.inputFiles()) == 40
    assert listing_jobs == []
    assert ns(opened) == sorted(n for _, n in rows)


@pytest.mark.parametrize("partition_by", [["event_date"], ["s", "event_date"], ["event_date", "ts"], ["s"]])
def test_delta_rs_reads_partitioned_tables_in_the_tables_column_order(rs_store, spark, partition_by):
    # Spark's partition discovery puts partition columns last, in directory order; the store
    # restores the table's order from the Delta log without asking Spark for the columns.
    rows = [(utc(4, 1), 1), (utc(5, 2), 2), (utc(5, 3), 3, "other")]
    rs_store.append("t", events(spark, *rows), partition_by=partition_by)
    assert len(rs_store.read("t").inputFiles()) >= 2  # read as files (Spark), not through Arrow
    for df in (rs_store.read("t"), rs_store.read_range("t", "ts", utc(5), utc(6))):
        assert df.columns == ["ts", "event_date", "n", "s"]
        assert df.schema.simpleString() == "struct<ts:timestamp,event_date:date,n:bigint,s:string>"
    assert {tuple(r) for r in rs_store.read("t").collect()} == {
        (ts.replace(tzinfo=None), ts.date(), n, rest[0] if rest else f"s{n}") for ts, n, *rest in rows}  # UTC session


def test_delta_rs_reads_unusual_partition_values_exactly(rs_store, spark):
    # Spark decodes partition directories byte-wise; non-ASCII values are read via Arrow.
    labels = ["a b", "x:y/z=%", "c{d}*?[e]", "ü'\"#", None, "plain"]
    df = spark.createDataFrame([(utc(5), i, label) for i, label in enumerate(labels)], "ts timestamp, n long, s string")
    rs_store.append("u", df, partition_by=["s"])
    assert {(r.n, r.s) for r in rs_store.read("u").collect()} == set(enumerate(labels))
    assert {(r.n, r.s) for r in rs_store.read_range("u", "ts", utc(5), utc(6)).collect()} == set(enumerate(labels))

    ascii_only = [label for label in labels if label is None or label.isascii()]
    rs_store.overwrite("v", spark.createDataFrame([(utc(5), i, s) for i, s in enumerate(ascii_only)],
                                                  "ts timestamp, n long, s string"), partition_by=["s"])
    files = rs_store.read("v").inputFiles()  # read natively: Spark parses these directories
    assert len(files) == len(ascii_only)
    assert {(r.n, r.s) for r in rs_store.read("v").collect()} == set(enumerate(ascii_only))

    # A replace of a table partitioned by such strings goes through delta-rs's writer (Spark
    # would name the directories its own way): the same exact values.
    rs_store.replace_range("w", df, column="ts", start=utc(5), end=utc(6), partition_by=["s"])
    rs_store.replace_range("w", df.where("n < 3"), column="ts", start=utc(5), end=utc(6))
    assert {(r.n, r.s) for r in rs_store.read("w").collect()} == set(enumerate(labels[:3]))


@pytest.mark.parametrize("configuration", [
    {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
    {"delta.enableDeletionVectors": "true"},
], ids=["column mapping", "deletion vectors"])
def test_delta_rs_reads_tables_spark_cannot_read_as_files(rs_store, spark, configuration):
    """Through Spark's Delta reader where the session has one (the tests' has), else delta-rs's Arrow."""
    from deltalake import write_deltalake

    data = pa.table({"ts": pa.array([utc(5, 1), utc(6, 1)], pa.timestamp("us", tz="UTC")), "n": [1, 2]})
    write_deltalake(rs_store.path("cm"), data, configuration=configuration)
    assert not delta_log.spark_can_read_files(DeltaTable(rs_store.path("cm")))

    assert instants(rs_store.read("cm")) == {1: micros(utc(5, 1)), 2: micros(utc(6, 1))}
    assert ns(rs_store.read_range("cm", "ts", utc(6), utc(7))) == [2]
    assert rs_store.read_arrow("cm", filters=[("n", "=", 1)])["n"].to_pylist() == [1]


def test_delta_rs_write_failing_mid_stream_commits_nothing(rs_store, spark, monkeypatch):
    # A write delta-rs streams itself: a replace that adds a column (schema evolution).
    rs_store.replace_range("t", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5), end=utc(6))
    version = rs_store.version("t")
    real_write = delta_rs.write_deltalake

    def write_then_fail(target, data, **options):
        batches = data.read_all().to_batches(max_chunksize=1)  # data: the staged rows, a stream

        def stream():
            yield batches[0]  # delta-rs starts writing Parquet files...
            raise OSError("disk full (simulated)")  # ...and the data stream breaks

        real_write(target, pa.RecordBatchReader.from_batches(data.schema, stream()), **options)

    monkeypatch.setattr(delta_rs, "write_deltalake", write_then_fail)
    with pytest.raises(Exception, match="disk full"):
        rs_store.replace_range("t", events(spark, (utc(5, 2), 2), (utc(5, 3), 3)).withColumn("extra", F.lit(1)),
                               column="ts", start=utc(5), end=utc(6))

    assert rs_store.version("t") == version
    assert ns(rs_store.read("t")) == [1]


def _parquet_files(table_dir: Path) -> set[str]:
    return {str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet")}


@pytest.mark.parametrize("in_list_limit", [2_000, 1], ids=["files removed whole", "other rows rewritten by Spark"])
def test_delta_rs_direct_replace_failing_at_its_commit_commits_nothing_and_leaves_no_files(
        rs_store, spark, monkeypatch, in_list_limit):
    # A direct replace moves Spark's files into the table directory just before its commit: a
    # failed commit must take them out again (the rows Spark rewrote from a partly replaced
    # file too; it does so when the selection is too large for a delta-rs predicate).
    monkeypatch.setattr("resources.tables.ranges.DELTA_RS_IN_LIST_LIMIT", in_list_limit)
    rs_store.replace_range("t", events(spark, (utc(5, 1), 1), (utc(5, 9), 9)), column="ts",
                           start=utc(5), end=utc(6))
    version, table_dir = rs_store.version("t"), Path(rs_store.path("t"))
    files = _parquet_files(table_dir)

    def fail(*args, **kwargs):
        raise OSError("log store unavailable (simulated)")

    monkeypatch.setattr(delta_rs, "commit_replace", fail)
    rows = [RowRange("ts", utc(5), utc(6), key="s", values=("s1", "s9"))] if in_list_limit == 1 else \
        [RowRange("ts", utc(5), utc(6))]
    with pytest.raises(OSError, match="log store unavailable"):
        rs_store.replace("t", events(spark, (utc(5, 2), 2)), rows=rows)

    assert rs_store.version("t") == version
    assert ns(rs_store.read("t")) == [1, 9]
    assert _parquet_files(table_dir) == files
    staging = Path(rs_store.root) / "_staging"
    assert not staging.exists() or not any(staging.iterdir())


@pytest.mark.parametrize("in_list_limit", [2_000, 1], ids=["by delta-rs", "by Spark"])
def test_delta_rs_replace_removes_whole_files_and_rewrites_only_the_rest_of_partial_ones(
        rs_store, spark, monkeypatch, in_list_limit):
    # Partly replaced files have their other rows rewritten: by delta-rs (a predicate
    # overwrite), or by Spark into the same commit when the selection's key values are too
    # many for a delta-rs predicate.
    monkeypatch.setattr("resources.tables.ranges.DELTA_RS_IN_LIST_LIMIT", in_list_limit)
    rs_store.replace_range("w", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5, 1), end=utc(5, 2))
    rs_store.replace_range("w", events(spark, (utc(5, 2), 2), (utc(5, 3), 3), (utc(5, 3, 5), 4)), column="ts",
                           start=utc(5, 2), end=utc(5, 4))
    table_dir = Path(rs_store.path("w"))
    hour_1 = {p for p in DeltaTable(str(table_dir)).file_uris()
              if ns(spark.read.parquet(p)) == [1]}

    # The hour-2 row and the hour-3 row of key s3 are replaced; the key-s4 row stays.
    result = rs_store.replace("w", events(spark, (utc(5, 2, 30), 20)),
                              rows=[RowRange("ts", utc(5, 2), utc(5, 3)),
                                    RowRange("ts", utc(5, 3), utc(5, 4), key="s", values=("s3", "s9"))])

    assert result.rows_written == 1 and result.rows_deleted == 2
    assert ns(rs_store.read("w")) == [1, 4, 20]
    assert hour_1 <= set(DeltaTable(str(table_dir)).file_uris())  # a file wholly outside stays
    actions = delta_log.add_actions(DeltaTable(str(table_dir)))
    assert actions["min.ts"].null_count == 0  # statistics kept: range reads prune by them
    assert ns(rs_store.read_range("w", "ts", utc(5, 3), utc(5, 4))) == [4]


@pytest.mark.parametrize("case", ["different ranges", "same range", "same token"])
def test_delta_rs_interleaved_commits_are_rebased_or_retried(rs_store, spark, monkeypatch, case):
    # Force the race: both writers load the same snapshot before either commits. delta-rs
    # rebases non-conflicting commits itself; a real conflict fails the commit and the
    # store reruns the whole operation on a fresh snapshot.
    rs_store.replace_range("i", events(spark, (utc(4), 1)), column="ts", start=utc(4), end=utc(5))
    version = rs_store.version("i")
    barrier = threading.Barrier(2)
    seen = threading.local()
    real_write, real_commit = DeltaRsTableStore._write_arrow, delta_rs.commit_replace

    def wait_for_the_other_once():
        if not getattr(seen, "first_write_done", False):
            seen.first_write_done = True
            barrier.wait(timeout=60)

    def write_after_both_read(self, target, data, **options):  # appends: delta-rs writes
        wait_for_the_other_once()
        real_write(self, target, data, **options)

    def commit_after_both_read(table, removes, adds):  # replaces: a commit of Spark's files
        wait_for_the_other_once()
        return real_commit(table, removes, adds)

    monkeypatch.setattr(DeltaRsTableStore, "_write_arrow", write_after_both_read)
    monkeypatch.setattr(delta_rs, "commit_replace", commit_after_both_read)
    results: list[WriteResult] = []
    days = {"different ranges": (5, 6), "same range": (5, 5), "same token": (5, 5)}[case]
    frames = [events(spark, (utc(day, 1), n)) for day, n in zip(days, (100, 200))]
    if case == "same token":
        jobs = [lambda df=df: results.append(rs_store.append("i", df, token="t1")) for df in frames]
    else:
        jobs = [lambda df=df, day=day: results.append(
            rs_store.replace_range("i", df, column="ts", start=utc(day), end=utc(day + 1)))
            for df, day in zip(frames, days)]
    run_together(*jobs)

    rows = ns(rs_store.read("i"))
    if case == "different ranges":
        assert rows == [1, 100, 200]
        assert sorted(r.version for r in results) == [version + 1, version + 2]
    elif case == "same range":
        assert rows in ([1, 100], [1, 200])  # the later writer's rows, never both
        assert sorted(r.version for r in results) == [version + 1, version + 2]
    else:
        assert rows in ([1, 100], [1, 200])
        assert sorted(r.skipped for r in results) == [False, True]
        assert rs_store.version("i") == version + 1


def test_delta_rs_staged_rows_are_removed_after_a_write_and_after_a_refused_one(rs_store, spark):
    # Writes stage the DataFrame's rows as Parquet under <root>/_staging (bounded memory).
    staging = Path(rs_store.root) / "_staging"
    rs_store.replace_range("s", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5), end=utc(6))
    with pytest.raises(ValueError, match="outside the range"):
        rs_store.replace_range("s", events(spark, (utc(7, 1), 2)), column="ts", start=utc(5), end=utc(6))
    assert not staging.exists() or not any(staging.iterdir())
    assert ns(rs_store.read("s")) == [1]


def test_delta_rs_staged_rows_are_removed_when_the_spark_job_fails(rs_store, spark):
    staging = Path(rs_store.root) / "_staging"
    rs_store.replace_range("s", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5), end=utc(6))
    # The error fires while Spark writes the staged files, after some may exist.
    failing = events(spark, (utc(5, 2), 2)).withColumn(
        "n", F.when(F.col("n") > 0, F.raise_error(F.lit("boom in the job"))).otherwise(F.col("n")))
    with pytest.raises(Exception, match="boom in the job"):
        rs_store.replace_range("s", failing, column="ts", start=utc(5), end=utc(6))
    assert not staging.exists() or not any(staging.iterdir())
    assert ns(rs_store.read("s")) == [1]


@pytest.mark.parametrize("write", ["replace", "merge"])
def test_delta_rs_refuses_to_commit_staged_files_missing_rows_spark_wrote(rs_store, spark, monkeypatch, write):
    """A cluster without a shared disk: executors' files never reach the driver. Simulated by
    a staged file vanishing after Spark wrote it: the write counted its rows (an Observation)
    and the footers hold fewer, so nothing is committed and the old rows stay."""
    from resources.tables import direct_write
    from resources.tables import staging as staging_module
    from resources.tables.staging import StagingIncomplete

    rows = [(utc(5, h), h) for h in range(6)]
    rs_store.replace_range("s", events(spark, *rows[:2]), column="ts", start=utc(5), end=utc(6))
    rs_store.merge("m", events(spark, *rows[:2]), keys=["n"])
    real = staging_module.write_parquet_counted

    def losing_a_file(df, path, partition_by=()):
        written = real(df, path, partition_by)
        next(Path(path).rglob("part-*.parquet")).unlink()
        return written

    monkeypatch.setattr(direct_write, "write_parquet_counted", losing_a_file)
    monkeypatch.setattr(staging_module, "write_parquet_counted", losing_a_file)
    new_rows = events(spark, *[(utc(5, h), 10 + h) for h in range(6)]).repartition(3)
    with pytest.raises(StagingIncomplete, match=r"Spark wrote 6 row\(s\) .* hold [0-5]: nothing was committed"):
        if write == "replace":
            rs_store.replace_range("s", new_rows, column="ts", start=utc(5), end=utc(6))
        else:
            rs_store.merge("m", new_rows, keys=["n"])
    assert ns(rs_store.read("s")) == [0, 1] and ns(rs_store.read("m")) == [0, 1]
    staging = Path(rs_store.root) / "_staging"
    assert not staging.exists() or not any(staging.iterdir())
