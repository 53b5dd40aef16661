"""Writes marked `small` (TableStore): the delta-rs engine collects their rows to the driver as
Arrow instead of staging Parquet files, up to COLLECTED_VALUES_MAX values, and stages them past
that. Either way the table ends the same: each write is made twice, small and not, on two
tables, and the two compared.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from resources.tables import RowRange, interface
from resources.tables import direct_write as direct_write_module
from resources.tables import staging as staging_module
from resources.tables.stores import table_store
from tests.integration.test_table_store_contract import SCHEMA, events, micros, ns, utc

pytestmark = pytest.mark.spark


def rows_of(store, name: str) -> list[tuple]:
    table = store.read(name)
    return sorted(tuple(r) for r in table.select(*[F.unix_micros(c).alias(c) if t == "timestamp" else F.col(c)
                                                    for c, t in table.dtypes]).collect())


@pytest.fixture
def staged_writes(monkeypatch):
    """Count the Spark Parquet writes (staged or direct): a collected write makes none."""
    calls = []
    real = staging_module.write_parquet_counted

    def counted(df, path, partition_by=()):
        calls.append(path)
        return real(df, path, partition_by)

    monkeypatch.setattr(staging_module, "write_parquet_counted", counted)
    monkeypatch.setattr(direct_write_module, "write_parquet_counted", counted)
    return calls


def each_write(store, spark, small: bool) -> list:
    """Every kind of write, in turn, on tables of their own; returns their results."""
    day = [(utc(5, h, 0, 0, 123457), h) for h in range(4)]
    return [
        store.replace_range("r", events(spark, *day, (utc(6, 1), 9)), column="ts", start=utc(5), end=utc(7),
                            partition_by=["event_date"], small=small),
        store.replace("r", events(spark, (utc(5, 7), 70, "a"), (utc(6, 2), 80, "s9")),
                      rows=[RowRange("ts", utc(5, 5), utc(5, 8)),
                            RowRange("ts", utc(6), None, key="s", values=("s9",))],
                      small=small),
        store.replace_keys("k", events(spark, (utc(5), 1, "a"), (utc(5), 2, "b")),
                           key="s", keys=spark.createDataFrame([("a",), ("b",)], "s string"), small=small),
        store.replace_keys("k", events(spark, (utc(6), 10, "a")),
                           key="s", keys=spark.createDataFrame([("a",), ("b",)], "s string"), small=small),
        store.merge("m", events(spark, (utc(5), 1, "a"), (utc(5), 2, "b")), keys=["n"], small=small),
        store.merge("m", events(spark, (utc(6), 2, "B"), (utc(6), 3, "c")), keys=["n"], small=small),
        store.append("a", events(spark, (utc(5), 1)), token="t1", small=small),
        store.append("a", events(spark, (utc(5), 1)), token="t1", small=small),
        store.append("a", events(spark, (utc(5), 2)), small=small),
        store.overwrite("o", events(spark, (utc(5), 1)), small=small),
        store.overwrite("o", events(spark, (utc(6), 2)).withColumn("extra", F.lit("x")), small=small),
        store.replace_range("e", spark.createDataFrame([], SCHEMA), column="ts", start=utc(5), end=utc(6),
                            small=small),
    ]


def test_small_writes_collect_their_rows_and_end_with_the_same_tables(spark, tmp_path, staged_writes):
    staged = table_store(spark, str(tmp_path / "staged"), "delta-rs")
    collected = table_store(spark, str(tmp_path / "collected"), "delta-rs")

    staged_results = each_write(staged, spark, small=False)
    assert staged_writes, "the writes not marked small stage their rows through Spark"
    staged_writes.clear()
    collected_results = each_write(collected, spark, small=True)

    assert staged_writes == []
    assert collected_results == staged_results
    for name in ("r", "k", "m", "a", "o", "e"):
        assert rows_of(collected, name) == rows_of(staged, name), name
        assert collected.read(name).dtypes == staged.read(name).dtypes, name
    # Microseconds survive the Arrow round trip; the partitioned table reads by partition.
    assert micros(utc(5, 1, 0, 0, 123457)) in [r[0] for r in rows_of(collected, "r")]
    assert ns(collected.read_range("r", "event_date", dt.date(2026, 1, 6), None)) == [80]
    assert (Path(collected.path("r")) / "event_date=2026-01-06").is_dir()
    assert not (tmp_path / "collected" / "_staging").exists()


def test_small_writes_past_the_limit_are_staged(spark, tmp_path, staged_writes, monkeypatch):
    store = table_store(spark, str(tmp_path / "w"), "delta-rs")
    monkeypatch.setattr(interface, "COLLECTED_VALUES_MAX", 3 * len(SCHEMA.split(",")))  # 3 rows of 4 columns
    few, many = [(utc(5, h), h) for h in range(3)], [(utc(6, h), h) for h in range(4)]

    store.replace_range("t", events(spark, *few), column="ts", start=utc(5), end=utc(6), small=True)
    assert staged_writes == []
    result = store.replace_range("t", events(spark, *many).repartition(2), column="ts", start=utc(6), end=utc(7),
                                 small=True)
    assert len(staged_writes) == 1 and result.rows_written == 4
    store.merge("m", events(spark, *many), keys=["n"], small=True)
    assert len(staged_writes) == 2
    assert ns(store.read("t")) == [0, 0, 1, 1, 2, 2, 3] and ns(store.read("m")) == [0, 1, 2, 3]


def test_small_writes_refuse_what_staged_ones_refuse_and_write_nothing(spark, tmp_path):
    store = table_store(spark, str(tmp_path / "w"), "delta-rs")
    store.replace_range("t", events(spark, (utc(5, 1), 1)), column="ts", start=utc(5), end=utc(6), small=True)
    store.replace_keys("k", events(spark, (utc(5), 1, "a")), key="s",
                       keys=spark.createDataFrame([("a",)], "s string"), small=True)
    versions = store.version("t"), store.version("k")

    with pytest.raises(ValueError, match=r"'ts'.*2026-01-06 00:00:00"):
        store.replace_range("t", events(spark, (utc(5, 2), 2), (utc(6), 3)), column="ts", start=utc(5), end=utc(6),
                            small=True)
    with pytest.raises(ValueError, match="^replace_keys k: .*not unique"):
        store.replace_keys("k", events(spark, (utc(6), 1, "a"), (utc(6), 2, "a")), key="s",
                           keys=spark.createDataFrame([("a",)], "s string"), small=True)
    failing = events(spark, (utc(5, 2), 2)).withColumn(
        "n", F.when(F.col("n") > 0, F.raise_error(F.lit("bad row"))).otherwise(F.col("n")))
    with pytest.raises(Exception, match="bad row"):
        store.replace_range("t", failing, column="ts", start=utc(5), end=utc(6), small=True)

    assert (store.version("t"), store.version("k")) == versions
    assert ns(store.read("t")) == [1] and ns(store.read("k")) == [1]


def test_the_delta_spark_engine_takes_the_hint_and_writes_as_before(spark, tmp_path):
    store = table_store(spark, str(tmp_path / "w"), "delta-spark")
    store.replace_range("t", events(spark, (utc(5, 1), 1), (utc(5, 2), 2)), column="ts", start=utc(5), end=utc(6),
                        small=True)
    store.merge("m", events(spark, (utc(5), 1, "a")), keys=["n"], small=True)
    assert ns(store.read("t")) == [1, 2] and ns(store.read("m")) == [1]
