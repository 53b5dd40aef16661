"""The attributes_users_to_refresh queue: users whose daily rows or states changed since the
attributes step consumed them."""

from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def queued(users: DataFrame, run_id: str) -> DataFrame:
    """Queue rows for these users. Their append id is the daily run's id: attributes delete
    exactly what they consumed, and leave the rows of a daily run still in progress (its
    daily_aggregates commit comes after them)."""
    return users.select("domain_userid", F.lit(run_id).alias("append_id"),
                        F.lit(datetime.now(timezone.utc)).alias("queued_at"))
