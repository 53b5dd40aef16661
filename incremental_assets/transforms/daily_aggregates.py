"""daily_aggregates: one row per (event_date, domain_userid) from every filtered event of the day."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.transforms.filtered_events import content_digest

REVENUE_TYPE = "decimal(28,2)"


def daily_aggregates(filtered_days: DataFrame) -> DataFrame:
    """Full-day metrics for every (event_date, domain_userid) in `filtered_days`.

    `filtered_days` must hold *all* filtered rows of the days it covers: a day is always
    rebuilt whole, never patched, so a rebuild cannot double count.
    """
    is_type = lambda name: F.col("event_name") == name  # noqa: E731
    transaction = is_type("transaction")
    # The day's sessions, kept as a list: windows over several days count each session once.
    sessions = F.collect_set("domain_sessionid")
    return filtered_days.groupBy("event_date", "domain_userid").agg(
        F.count(F.lit(1)).alias("events"),
        F.count(F.when(is_type("page_view"), 1)).alias("page_views"),
        F.count(F.when(is_type("page_ping"), 1)).alias("page_pings"),
        # The set's size, not countDistinct: a distinct aggregate beside others makes Spark
        # aggregate twice (by user and session first), one more shuffle per rebuild.
        F.size(sessions).cast("long").alias("sessions"),
        F.array_sort(sessions).alias("session_ids"),
        F.count(F.when(transaction, 1)).alias("transactions"),
        F.coalesce(F.sum(F.when(transaction, F.col("tr_total"))), F.lit(0))
         .cast(REVENUE_TYPE).alias("revenue"),
        F.min("derived_tstamp").alias("first_event_tstamp"),
        F.max("derived_tstamp").alias("last_event_tstamp"),
    )


def rows_by_day_and_load_day(filtered_days: DataFrame) -> DataFrame:
    """Filtered rows per (event_date, load_date): what a rebuild of those days aggregates."""
    return filtered_days.groupBy("event_date", F.to_date("load_tstamp").alias("load_date")).agg(
        F.count(F.lit(1)).alias("rows_aggregated"), content_digest(filtered_days).alias("digest_aggregated"))
