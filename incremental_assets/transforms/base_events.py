"""base_events: validate, drop late-sent events, keep the first-loaded copy of each event.

DataFrame in, DataFrames out; no I/O. The caller passes the source rows loaded in the
window *and* those loaded in a look-back before it, so a duplicate whose first copy arrived
in an earlier hour (or an earlier run) is recognised without depending on what base_events
already holds: the result for a load window is a function of the source alone, and
therefore the same whatever order or grouping the windows are processed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from incremental_assets.sources.schema import REQUIRED_COLUMNS, load_time

# An event cannot be loaded before it happened; a day of slack absorbs clock skew.
MAX_FUTURE_SKEW_HOURS = 24
REJECTED_EXTRA_COLUMNS = ("reject_reason", "load_hour_tstamp")


@dataclass(frozen=True)
class BaseEventsResult:
    events: DataFrame  # valid, deduplicated events loaded in the window
    rejected: DataFrame  # source rows of the window that failed validation, with a reason


def reject_reason(*, days_late_allowed: int):
    """A column with why a row is not a usable event, or null when it is."""
    reason = F.lit(None).cast("string")
    sent_too_late = (
        F.col("dvce_sent_tstamp").isNotNull()
        & F.col("dvce_created_tstamp").isNotNull()
        & (F.col("dvce_sent_tstamp")
           > F.col("dvce_created_tstamp") + F.make_interval(days=F.lit(days_late_allowed)))
    )
    in_future = F.col("derived_tstamp") > F.col("load_tstamp") + F.make_interval(
        hours=F.lit(MAX_FUTURE_SKEW_HOURS))
    # Checked in this order; a row is rejected for the first one that fails.
    checks = [(F.col(c).isNull(), f"null {c}") for c in REQUIRED_COLUMNS]
    checks.append((in_future, "derived_tstamp after load_tstamp"))
    checks.append((sent_too_late, "sent_too_late"))
    for condition, label in reversed(checks):
        reason = F.when(condition, F.lit(label)).otherwise(reason)
    return reason


def base_events(window_rows: DataFrame, earlier_rows: DataFrame, *, window_start: datetime,
                window_end: datetime, days_late_allowed: int,
                app_ids: tuple[str, ...] = ()) -> BaseEventsResult:
    """Valid events first loaded in [window_start, window_end), and the window's rejected rows.

    `window_rows` are the source rows whose load time is in the window; `earlier_rows` the
    source rows loaded in the duplicate look-back before it (only event_id, the timestamps,
    the required columns and app_id are read). Rows of other app ids are left out (not
    rejected). Among valid copies of one event_id the first loaded wins: earliest
    load_tstamp, then collector_tstamp, then a hash of the row so ties break the same way
    every time. A valid copy loaded before the window always wins over the window's copies.
    """
    def usable(rows: DataFrame) -> DataFrame:
        if app_ids:
            rows = rows.where(F.col("app_id").isin(list(app_ids)))
        return rows.withColumn("reject_reason", reject_reason(days_late_allowed=days_late_allowed))

    rows = usable(window_rows)
    rejected = rows.where(F.col("reject_reason").isNotNull()).withColumn(
        "load_hour_tstamp", F.date_trunc("hour", load_time()))

    valid = rows.where(F.col("reject_reason").isNull()).drop("reject_reason")
    first_copy = Window.partitionBy("event_id").orderBy(
        F.col("load_tstamp").asc(), F.col("collector_tstamp").asc_nulls_last(),
        F.xxhash64(*[F.col(c) for c in valid.columns]).asc())
    firsts_in_window = (valid.withColumn("_copy", F.row_number().over(first_copy))
                        .where(F.col("_copy") == 1).drop("_copy"))
    earlier_ids = (usable(earlier_rows.select(*EARLIER_COPY_COLUMNS))
                   .where(F.col("reject_reason").isNull()).select("event_id"))
    events = (firsts_in_window.join(earlier_ids, "event_id", "left_anti")
              .withColumn("load_date", F.to_date("load_tstamp")))
    return BaseEventsResult(events=events, rejected=rejected)


# What deciding "a valid earlier copy exists" needs: the look-back reads only these columns.
EARLIER_COPY_COLUMNS = ("event_id", "app_id", *REQUIRED_COLUMNS[1:], "collector_tstamp",
                        "dvce_created_tstamp", "dvce_sent_tstamp")
