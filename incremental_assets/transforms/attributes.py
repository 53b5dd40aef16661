"""attributes: one row per user, as of a day A, from daily_aggregates (docs/rules.md 7).

Every metric covers event days before A: lifetime sums, and the last-N-days windows
[A - N days, A). Sessions are counted from the days' session lists, so a session over
midnight counts once.
"""

from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from incremental_assets.transforms.daily_aggregates import REVENUE_TYPE

# (column, what it measures, days back from attributes_as_of)
WINDOW_METRICS = (
    ("page_views_last_7_days", "page_views", 7),
    ("sessions_last_7_days", "sessions", 7),
    ("revenue_last_30_days", "revenue", 30),
    ("events_last_30_days", "events", 30),
)
WINDOW_COLUMNS = tuple(name for name, _, _ in WINDOW_METRICS)
# The columns `user_attributes` writes: no declared attribute may take one of these names.
BUILT_IN_COLUMNS = ("domain_userid", "first_event_date", "last_event_date", "days_active", "lifetime_events",
                    "lifetime_page_views", "lifetime_transactions", "lifetime_revenue", "lifetime_sessions",
                    *WINDOW_COLUMNS, "attributes_as_of")
LONGEST_WINDOW_DAYS = max(days for _, _, days in WINDOW_METRICS)


def _in_last_days(as_of: date, days: int) -> Column:
    """event_date in [as_of - days, as_of)."""
    return (F.col("event_date") >= F.lit(as_of - timedelta(days=days))) & (F.col("event_date") < F.lit(as_of))


def _distinct_sessions(when: Column | None = None) -> Column:
    sessions = F.col("session_ids") if when is None else F.when(when, F.col("session_ids"))
    return F.size(F.array_distinct(F.flatten(F.collect_list(sessions)))).cast("long")


def _window_metric(name: str, source: str, days: int, as_of: date) -> Column:
    in_window = _in_last_days(as_of, days)
    if source == "sessions":
        return _distinct_sessions(in_window).alias(name)
    zero = F.lit(0).cast(REVENUE_TYPE if source == "revenue" else "long")
    return F.coalesce(F.sum(F.when(in_window, F.col(source))), zero).alias(name)


def window_metrics(daily: DataFrame, *, as_of: date) -> DataFrame:
    """Only the last-N-days metrics per user (the `last_n_days` run type)."""
    rows = daily.where(F.col("event_date") < F.lit(as_of))
    return rows.groupBy("domain_userid").agg(*[_window_metric(*m, as_of) for m in WINDOW_METRICS])


def user_attributes(daily: DataFrame, *, as_of: date) -> DataFrame:
    """Lifetime and last-N-days metrics, as of `as_of`, per user of `daily` with a day before it."""
    rows = daily.where(F.col("event_date") < F.lit(as_of))
    return rows.groupBy("domain_userid").agg(
        F.min("event_date").alias("first_event_date"),
        F.max("event_date").alias("last_event_date"),
        # Not countDistinct: a distinct aggregate beside the others costs a second aggregation.
        F.size(F.collect_set("event_date")).cast("long").alias("days_active"),
        F.sum("events").alias("lifetime_events"),
        F.sum("page_views").alias("lifetime_page_views"),
        F.sum("transactions").alias("lifetime_transactions"),
        F.sum("revenue").cast(REVENUE_TYPE).alias("lifetime_revenue"),
        _distinct_sessions().alias("lifetime_sessions"),
        *[_window_metric(*m, as_of) for m in WINDOW_METRICS],
    ).withColumn("attributes_as_of", F.lit(as_of))


def refresh_window_metrics(stored: DataFrame, daily_window: DataFrame, new_users: DataFrame, *,
                           as_of: date) -> DataFrame:
    """Stored attributes with only their last-N-days metrics recomputed, plus `new_users` (full
    rows of users not stored yet)."""
    fresh = window_metrics(daily_window, as_of=as_of)
    kept = stored.drop(*WINDOW_COLUMNS, "attributes_as_of").join(fresh, "domain_userid", "left")
    for name, source, _ in WINDOW_METRICS:
        kept = kept.withColumn(name, F.coalesce(F.col(name), F.lit(0).cast(
            REVENUE_TYPE if source == "revenue" else "long")))
    kept = kept.withColumn("attributes_as_of", F.lit(as_of))
    return kept.select(*new_users.columns).unionByName(new_users)


def users_an_as_of_move_changes(daily: DataFrame, before: date, as_of: date, window_days: set[int]) -> DataFrame:
    """The users whose attributes change when the as-of day moves from `before` to a later
    `as_of`, no daily row having changed: those with a row on a day that enters them
    ([before, as_of): every metric covers the days before the as-of day) or leaves a window of
    N days ([before - N, as_of - N), for each N of `window_days`). The others' values stay."""
    ranges = [(before, as_of), *((before - timedelta(days=n), as_of - timedelta(days=n)) for n in sorted(window_days))]
    moved = F.lit(False)
    for first, end in ranges:
        moved = moved | ((F.col("event_date") >= F.lit(first)) & (F.col("event_date") < F.lit(end)))
    return daily.where(moved).select("domain_userid").distinct()
