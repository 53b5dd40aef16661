"""Copies of one event_id within the dedupe look-back (docs/rules.md 3), as DataFrames: what the
event_id_unique check counts. Rows are (table, event_id, load_tstamp); each table is compared
with itself only."""

from datetime import datetime, timedelta
from typing import Any, Protocol, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

COUNT_NAMES = ("rows_checked", "duplicate_event_ids", "null_event_ids")


class RowRange(Protocol):
    """The rows with start <= column < end (None: unbounded) and, with a key, whose key is one of
    values: the shape of the table store's RowRange, which this layer does not import."""

    column: str
    start: Any
    end: Any
    key: str | None
    values: tuple


def in_range(rows: RowRange) -> Column:
    """True for the rows of `rows`' range (its key values aside)."""
    condition = F.lit(True)
    if rows.start is not None:
        condition = condition & (F.col(rows.column) >= F.lit(rows.start))
    if rows.end is not None:
        condition = condition & (F.col(rows.column) < F.lit(rows.end))
    return condition


def rows_once_written(stored: DataFrame, new: DataFrame, replaced: Sequence[RowRange]) -> DataFrame:
    """What a replace write leaves in a table (TableStore.replace's rule): the stored rows outside
    every replaced range, and the new rows; with the new rows' columns. A range narrowed to key
    values matches them through a broadcast join (a changed session's or a dominated copy's ids
    can number thousands: too many for one `isin`)."""
    remaining = stored
    for number, rows in enumerate(replaced):
        if rows.key is None:
            remaining = remaining.where(~in_range(rows))
            continue
        if not rows.values:
            continue  # narrowed to no key value: replaces nothing
        hit = f"_replaced_{number}"
        key_type = stored.schema[rows.key].dataType.simpleString()
        values = stored.sparkSession.createDataFrame([(value, True) for value in rows.values],
                                                     f"{rows.key} {key_type}, {hit} boolean")
        remaining = (remaining.join(F.broadcast(values), rows.key, "left")
                     .where(~(in_range(rows) & F.col(hit).isNotNull())).drop(hit))
    return remaining.select(*new.columns).unionByName(new)


def compared_rows(table: str, in_window: DataFrame, stored: DataFrame, new_around: DataFrame,
                  replaced: Sequence[RowRange], *, broadcast_ids: bool) -> DataFrame:
    """The rows a check compares for one table: the window's rows (`in_window`), and the rows the
    table will hold in the look-back on either side once written (`rows_once_written` of the
    `stored` rows, `new_around` and the `replaced` ranges) that share an event_id with them.
    Only those can be a window row's other copy: the semi-join keeps the window function from
    sorting every row of the look-back. The stored rows are semi-joined before the replaced rows
    are taken out, so that a range narrowed to key values (a changed session's) is looked up in
    those few rows, not in every row of the look-back (the result is the same: both are filters
    of one row at a time). With `broadcast_ids` the window's ids are broadcast (Spark cannot
    tell that materialized rows are few, and would shuffle the whole look-back to join them)."""
    ids = in_window.select("event_id")
    ids = F.broadcast(ids) if broadcast_ids else ids
    around = rows_once_written(stored.join(ids, "event_id", "left_semi"), new_around, replaced)
    rows = (around.select("event_id", "load_tstamp").join(ids, "event_id", "left_semi")
            .unionByName(in_window.where(F.col("event_id").isNull()).select("event_id", "load_tstamp")))
    return rows.withColumn("table", F.lit(table))


def counts_by_hour(rows: DataFrame, lookback: timedelta, window: tuple[datetime, datetime]) -> DataFrame:
    """Per table and load hour of the window: rows checked, event_ids with another copy in the
    same table loaded within `lookback` (of either side), rows without an event_id. One window
    function over the union of the tables' rows (one shuffle for all of them)."""
    copies = Window.partitionBy("table", "event_id").orderBy("load_tstamp")
    previous, following = F.lag("load_tstamp").over(copies), F.lead("load_tstamp").over(copies)
    limit = F.make_dt_interval(secs=F.lit(int(lookback.total_seconds())))
    close = F.coalesce((F.col("load_tstamp") < previous + limit) | (following < F.col("load_tstamp") + limit),
                       F.lit(False))
    # The first copy of its event_id in its load hour: the look-back is at least a day, so the
    # id's other copies of that hour are close to it, and counting the close first copies per
    # hour counts the ids without a distinct aggregation (one shuffle fewer).
    first_in_hour = previous.isNull() | (F.date_trunc("hour", previous) != F.date_trunc("hour", "load_tstamp"))
    duplicate = F.col("event_id").isNotNull() & F.col("close")
    in_window = (F.col("load_tstamp") >= F.lit(window[0])) & (F.col("load_tstamp") < F.lit(window[1]))
    return (rows.withColumn("close", close).withColumn("first_in_hour", first_in_hour).where(in_window)
            .groupBy("table", F.date_trunc("hour", "load_tstamp").alias("hour"))
            .agg(F.count(F.lit(1)).alias("rows_checked"),
                 F.count(F.when(duplicate & F.col("first_in_hour"), 1)).alias("duplicate_event_ids"),
                 F.count(F.when(F.col("event_id").isNull(), 1)).alias("null_event_ids")))
