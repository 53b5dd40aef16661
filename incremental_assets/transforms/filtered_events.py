"""filtered_events: the denormalised events the daily layer aggregates."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from incremental_assets.transforms.sessions import session_limit

# Each filtered row's digest of every column it holds but its session's fields: an event day's
# content digest is their sum, so a row corrected in place in any such column, one only a
# declared attribute reads included, gets its day rebuilt though its counts stay the same (rules 6).
ROW_DIGEST = "row_digest"

SESSION_FIELDS = {
    "start_tstamp": "session_start_tstamp",
    "domain_userid": "session_domain_userid",
    "user_id": "session_user_id",
}


def filtered_events(base: DataFrame, lifecycle: DataFrame, *, event_names: tuple[str, ...],
                    start_date: datetime, max_session_days: int) -> DataFrame:
    """Relevant events of `base` with their session fields and `event_date`.

    Keeps events whose event_name is in `event_names` (all when empty) that happened on or
    after `start_date`, drops events of a session that lie past its start +
    max_session_days (the quarantine cut), and adds the session's start and user.
    """
    rows = base.where(F.col("derived_tstamp") >= F.lit(start_date))
    if event_names:
        rows = rows.where(F.col("event_name").isin(list(event_names)))
    sessions = lifecycle.select(
        "domain_sessionid", *[F.col(src).alias(dst) for src, dst in SESSION_FIELDS.items()])
    rows = rows.join(sessions, "domain_sessionid", "left")
    within_limit = F.col("session_start_tstamp").isNull() | (
        F.col("derived_tstamp") <= session_limit(F.col("session_start_tstamp"), max_session_days))
    return with_row_digest(rows.where(within_limit).withColumn("event_date", F.to_date("derived_tstamp")))


def with_row_digest(rows: DataFrame) -> DataFrame:
    """`rows` with ROW_DIGEST: 31 bits of a hash of every other column but the session's fields,
    so that the digests of a day's rows add up to a long for up to 4 billion rows.

    The session's fields are left out: a late row of a session may move its start or give it a
    user, and its earlier rows' days would then be rebuilt each time, late rows held pending
    included. The columns are hashed in the order of their names: the same row gets the same
    digest whichever path derived it (a table read back holds its columns in its own order).
    Maps and variants, which Spark does not hash, are hashed as their text."""
    def hashable(field) -> Column:
        text = field.dataType.simpleString()
        return F.col(field.name).cast("string") if "map<" in text or "variant" in text else F.col(field.name)
    left_out = {ROW_DIGEST, *SESSION_FIELDS.values()}
    hashed = [hashable(f) for f in sorted(rows.schema.fields, key=lambda f: f.name) if f.name not in left_out]
    return rows.withColumn(ROW_DIGEST, F.pmod(F.xxhash64(*hashed), F.lit(2 ** 31)))


def content_digest(rows: DataFrame) -> Column:
    """The sum of the rows' ROW_DIGEST, additive as their counts are; null when a row has none
    (written before digests were kept: such pairs are compared by count only)."""
    if ROW_DIGEST not in rows.columns:
        return F.lit(None).cast("long")
    return F.when(F.count(F.lit(1)) == F.count(ROW_DIGEST), F.sum(ROW_DIGEST))


def rows_by_load_hour_and_day(filtered: DataFrame, *, digest: bool = False) -> DataFrame:
    """Filtered row counts by (load hour, event_date), with their content digest when asked
    (filtered_events_counts, the input of planning.late_days)."""
    counts = [F.count(F.lit(1)).alias("rows"), *([content_digest(filtered).alias("rows_digest")] if digest else [])]
    return filtered.groupBy(
        F.date_trunc("hour", "load_tstamp").alias("load_hour_tstamp"), "event_date",
        F.to_date("load_tstamp").alias("load_date"),
    ).agg(*counts)
