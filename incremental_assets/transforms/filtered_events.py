"""filtered_events: the denormalised events the daily layer aggregates."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.transforms.daily_aggregates import content_digest
from incremental_assets.transforms.sessions import session_limit

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
    return rows.where(within_limit).withColumn("event_date", F.to_date("derived_tstamp"))


def rows_by_load_hour_and_day(filtered: DataFrame, *, digest: bool = False) -> DataFrame:
    """Filtered row counts by (load hour, event_date), with their content digest when asked
    (filtered_events_counts, the input of planning.late_days: `filtered` then needs
    DAILY_INPUT_COLUMNS besides load_tstamp)."""
    counts = [F.count(F.lit(1)).alias("rows"), *([content_digest()] if digest else [])]
    return filtered.groupBy(
        F.date_trunc("hour", "load_tstamp").alias("load_hour_tstamp"), "event_date",
        F.to_date("load_tstamp").alias("load_date"),
    ).agg(*counts)
