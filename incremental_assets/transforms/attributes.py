"""attributes: one row per user, recomputed from daily_aggregates (drop and recompute)."""

from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.transforms.daily_aggregates import REVENUE_TYPE

# (column, daily column summed, days back from attributes_as_of)
WINDOW_METRICS = (
    ("page_views_last_7_days", "page_views", 7),
    ("sessions_last_7_days", "sessions", 7),
    ("revenue_last_30_days", "revenue", 30),
    ("events_last_30_days", "events", 30),
)
WINDOW_COLUMNS = tuple(name for name, _, _ in WINDOW_METRICS)


def _in_last_days(as_of: date, days: int):
    """event_date in [as_of - days, as_of)."""
    return (F.col("event_date") >= F.lit(as_of - timedelta(days=days))) & (
        F.col("event_date") < F.lit(as_of))


def _zero(source: str):
    return F.lit(0).cast(REVENUE_TYPE if source == "revenue" else "long")


def _window_aggs(as_of: date):
    return [F.coalesce(F.sum(F.when(_in_last_days(as_of, days), F.col(source))), _zero(source)).alias(name)
            for name, source, days in WINDOW_METRICS]


def window_metrics(daily: DataFrame, *, as_of: date) -> DataFrame:
    """Only the last-N-days metrics per user (the `last_n_days` run type)."""
    return daily.groupBy("domain_userid").agg(*_window_aggs(as_of))


def lifetime_sessions(lifecycle: DataFrame, *, start_date) -> DataFrame:
    """Distinct sessions per user since start_date, from the lifecycle manifest.

    Daily session counts cannot be summed (a session crossing midnight is in two days), and
    the lifecycle row of a session is final whatever order its events arrived in.
    """
    return (lifecycle.where(F.col("start_tstamp") >= F.lit(start_date))
            .groupBy("domain_userid").agg(F.count(F.lit(1)).alias("lifetime_sessions")))


def user_attributes(daily: DataFrame, sessions: DataFrame, *, as_of: date) -> DataFrame:
    """Lifetime and last-N-days metrics per domain_userid of `daily`.

    Last-N-days metrics cover event dates in [as_of - N days, as_of); `sessions` is
    `lifetime_sessions(...)`.
    """
    metrics = daily.groupBy("domain_userid").agg(
        F.min("event_date").alias("first_event_date"),
        F.max("event_date").alias("last_event_date"),
        F.countDistinct("event_date").alias("days_active"),
        F.sum("events").alias("lifetime_events"),
        F.sum("page_views").alias("lifetime_page_views"),
        F.sum("transactions").alias("lifetime_transactions"),
        F.sum("revenue").cast(REVENUE_TYPE).alias("lifetime_revenue"),
        *_window_aggs(as_of),
    )
    return (metrics.join(sessions, "domain_userid", "left")
            .withColumn("lifetime_sessions", F.coalesce("lifetime_sessions", F.lit(0).cast("long")))
            .withColumn("attributes_as_of", F.lit(as_of)))


def refresh_window_metrics(stored: DataFrame, daily_window: DataFrame, *, as_of: date) -> DataFrame:
    """Stored attributes with only their last-N-days metrics recomputed."""
    fresh = window_metrics(daily_window, as_of=as_of)
    kept = stored.drop(*WINDOW_COLUMNS, "attributes_as_of")
    joined = kept.join(fresh, "domain_userid", "left")
    for name, source, _ in WINDOW_METRICS:
        joined = joined.withColumn(name, F.coalesce(F.col(name), _zero(source)))
    result = joined.withColumn("attributes_as_of", F.lit(as_of))
    return result.select(*stored.columns) if set(result.columns) == set(stored.columns) else result
