"""sessions_lifecycle_manifest and quarantined_sessions: one row per session, from its events.

A session's row is a function of all its base events, so recomputing it from the events
of every session touched in a window gives the same row whatever order the windows run in.

Kept events: a session's events that happened no later than its start + max_session_days.
Events past that limit never change the row (only the first one marks the session as
quarantined), which is what keeps runaway bot sessions cheap: once quarantined, their new
far-out events are ignored. No column counts them, since such a count would depend on when
the session was last recomputed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

LIFECYCLE_COLUMNS = (
    "domain_sessionid", "domain_userid", "user_id", "app_id", "domain_sessionidx",
    "start_tstamp", "end_tstamp", "event_count", "first_load_tstamp", "last_load_tstamp",
    "is_quarantined", "quarantined_at",
)


# The event columns session_lifecycle reads: a step that keeps a session's events for it keeps
# only these (base_events rows are about 130 columns wide).
SESSION_EVENT_COLUMNS = (
    "domain_sessionid", "event_id", "derived_tstamp", "load_tstamp", "domain_userid", "user_id", "app_id",
    "domain_sessionidx",
)


def session_limit(start_col, max_session_days: int):
    """The latest event time still kept for a session that started at `start_col`."""
    return start_col + F.make_interval(days=F.lit(max_session_days))


def session_lifecycle(session_events: DataFrame, *, max_session_days: int) -> DataFrame:
    """One row per domain_sessionid of `session_events` (all base events of those sessions;
    SESSION_EVENT_COLUMNS are enough).

    start_tstamp/end_tstamp are the first and last event time of the kept events, event_count
    their number, user_id the latest non-null one among them and domain_sessionidx their
    smallest (the earliest event, which gives domain_userid and app_id, is always kept);
    first_load_tstamp is the first load of any of the session's events (it bounds later
    look-ups); a session is quarantined when any event lies past the limit, and quarantined_at
    is the load time of the first such event (data-derived, so reruns and rebuilds give the
    same value).
    """
    starts = session_events.groupBy("domain_sessionid").agg(
        F.min("derived_tstamp").alias("start_tstamp"))
    events = session_events.join(starts, "domain_sessionid").withColumn(
        "_kept", F.col("derived_tstamp") <= session_limit(F.col("start_tstamp"), max_session_days))
    kept = F.col("_kept")
    return events.groupBy("domain_sessionid").agg(
        F.min_by("domain_userid", F.struct("derived_tstamp", "event_id")).alias("domain_userid"),
        F.max_by("user_id", F.when(kept & F.col("user_id").isNotNull(),
                                   F.struct("derived_tstamp", "event_id"))).alias("user_id"),
        F.min_by("app_id", F.struct("derived_tstamp", "event_id")).alias("app_id"),
        F.min(F.when(kept, F.col("domain_sessionidx"))).alias("domain_sessionidx"),
        F.first("start_tstamp").alias("start_tstamp"),
        F.max(F.when(kept, F.col("derived_tstamp"))).alias("end_tstamp"),
        F.count(F.when(kept, 1)).alias("event_count"),
        F.min("load_tstamp").alias("first_load_tstamp"),
        F.max(F.when(kept, F.col("load_tstamp"))).alias("last_load_tstamp"),
        F.min(F.when(~kept, F.col("load_tstamp"))).alias("quarantined_at"),
    ).withColumn("is_quarantined", F.col("quarantined_at").isNotNull()).select(*LIFECYCLE_COLUMNS)


def sessions_needing_update(window_events: DataFrame, stored_lifecycle: DataFrame, *,
                            max_session_days: int) -> DataFrame:
    """Sessions of the window whose lifecycle row may change, with where to start reading.

    A quarantined session whose new events all lie past its limit, and were loaded no
    earlier than it was quarantined, cannot change: it is left out (runaway bots stay cheap).
    `scan_from` is the session's first known load (or its first load in the window for a new
    session): reading base events from there finds all its events.
    """
    touched = window_events.groupBy("domain_sessionid").agg(
        F.min("derived_tstamp").alias("_new_min"), F.min("load_tstamp").alias("_new_first_load"))
    stored = stored_lifecycle.select("domain_sessionid", "start_tstamp", "is_quarantined",
                                     "first_load_tstamp", "quarantined_at")
    joined = touched.join(stored, "domain_sessionid", "left")
    frozen = (F.coalesce(F.col("is_quarantined"), F.lit(False))
              & (F.col("_new_min") > session_limit(F.col("start_tstamp"), max_session_days))
              & (F.col("_new_first_load") >= F.col("quarantined_at")))
    return joined.where(~frozen).select(
        "domain_sessionid",
        F.least(F.col("first_load_tstamp"), F.col("_new_first_load")).alias("scan_from"))


# What filtered_events copies from a session's row: when one of these changes, the session's
# filtered rows are derived again.
FILTERED_SESSION_FIELDS = ("start_tstamp", "domain_userid", "user_id")


def changed_sessions(new_rows: DataFrame, stored_rows: DataFrame) -> DataFrame:
    """Sessions whose stored row differs from the new one in a field filtered_events uses
    (domain_sessionid, and the earlier of the two first loads as `changed_from`)."""
    new = new_rows.select("domain_sessionid", *[F.col(c).alias(f"new_{c}") for c in FILTERED_SESSION_FIELDS],
                          F.col("first_load_tstamp").alias("new_first_load"))
    old = stored_rows.select("domain_sessionid", *FILTERED_SESSION_FIELDS, "first_load_tstamp")
    differs = [~F.col(f"new_{c}").eqNullSafe(F.col(c)) for c in FILTERED_SESSION_FIELDS]
    return (old.join(new, "domain_sessionid", "left")
            .where(F.col("new_start_tstamp").isNull() | differs[0] | differs[1] | differs[2])
            .select("domain_sessionid",
                    F.least("first_load_tstamp", "new_first_load").alias("changed_from")))


def quarantined_sessions(lifecycle: DataFrame) -> DataFrame:
    """The quarantined sessions among `lifecycle` rows (longer than max_session_days)."""
    return lifecycle.where(F.col("is_quarantined")).select(
        "domain_sessionid", "domain_userid", "start_tstamp", "end_tstamp", "event_count", "quarantined_at")
