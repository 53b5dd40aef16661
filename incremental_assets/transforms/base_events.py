"""base_events: validate, reject with a reason, keep one copy of each event (docs/rules.md 2-3).

DataFrame in, DataFrames out; no I/O. A load window's valid rows are *copies*; every copy is
recorded (`copies`, the event_copies index) and a copy is kept unless a copy that ranks
before it was loaded less than the dedupe look-back before it. The caller passes the
recorded copies of the look-back before the window (`earlier`) and of the look-back after it
(`later`): the window's kept copies are decided against the first, and the stored copies the
window now dominates are found in the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from incremental_assets.sources.schema import REQUIRED_COLUMNS, load_time

# An event cannot be loaded before it happened; a day of slack absorbs clock skew.
MAX_FUTURE_SKEW_HOURS = 24
REJECTED_EXTRA_COLUMNS = ("reject_reason", "load_hour_tstamp")
# What the event_copies index keeps of every valid copy: enough to rank it and find its session.
COPY_COLUMNS = ("event_id", "load_tstamp", "collector_tstamp", "copy_hash", "domain_sessionid")
# What identifies a copy: rows with equal keys are identical (copy_hash hashes the whole row).
_COPY_KEY = ("event_id", "load_tstamp", "collector_tstamp", "copy_hash")
# Verdicts up to this many rows (narrow: a few tens of MB) are broadcast to the wide rows
# instead of shuffling them (docs/performance.md has the measure).
BROADCAST_VERDICTS_MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class ValidatedRows:
    """The window's rows, each with copy_hash and reject_reason (null when valid): one
    DataFrame, so that a caller computes them once and splits them as often as it reads."""

    checked: DataFrame

    @property
    def valid(self) -> DataFrame:
        """The valid rows, with copy_hash."""
        return self.checked.where(F.col("reject_reason").isNull()).drop("reject_reason")

    @property
    def rejected(self) -> DataFrame:
        """The rejected rows, with reject_reason and load_hour_tstamp."""
        return (self.checked.where(F.col("reject_reason").isNotNull()).drop("copy_hash")
                .withColumn("load_hour_tstamp", F.date_trunc("hour", load_time())))


def reject_reason(*, days_late_allowed: int, allow_null_dvce_tstamps: bool) -> Column:
    """Why a row is not a usable event (the first reason that applies), or null when it is."""
    collector = F.col("collector_tstamp")
    sent = F.coalesce(F.col("dvce_sent_tstamp"), collector)
    created = F.coalesce(F.col("dvce_created_tstamp"), collector)
    checks = [(F.col(c).isNull(), f"null {c}") for c in REQUIRED_COLUMNS]
    checks.append((F.col("derived_tstamp") > F.col("load_tstamp") + F.make_interval(
        hours=F.lit(MAX_FUTURE_SKEW_HOURS)), "derived_tstamp after load_tstamp"))
    if not allow_null_dvce_tstamps:
        checks.append((F.col("dvce_created_tstamp").isNull() | F.col("dvce_sent_tstamp").isNull(),
                       "null dvce_tstamp"))
    checks.append((F.coalesce(sent > created + F.make_interval(days=F.lit(days_late_allowed)), F.lit(False)),
                   "sent_too_late"))
    reason = F.lit(None).cast("string")
    for condition, label in reversed(checks):
        reason = F.when(condition, F.lit(label)).otherwise(reason)
    return reason


def validate(rows: DataFrame, *, days_late_allowed: int, allow_null_dvce_tstamps: bool,
             app_ids: tuple[str, ...] = ()) -> ValidatedRows:
    """The window's rows split into valid copies and rejected rows; rows of other app ids are
    left out (neither)."""
    if app_ids:
        rows = rows.where(F.col("app_id").isin(list(app_ids)))
    # The tie-break of copies loaded at the same instant: a hash of the whole row.
    checked = rows.withColumn("copy_hash", F.xxhash64(*[F.col(c) for c in rows.columns]))
    return ValidatedRows(checked.withColumn("reject_reason", reject_reason(
        days_late_allowed=days_late_allowed, allow_null_dvce_tstamps=allow_null_dvce_tstamps)))


def copies(valid: DataFrame) -> DataFrame:
    """The event_copies rows of the window: every valid copy's rank and session."""
    return valid.select(*COPY_COLUMNS).dropDuplicates(list(_COPY_KEY)) \
        .withColumn("load_date", F.to_date("load_tstamp"))


def _loaded_within(later: Column, earlier: Column, lookback: timedelta) -> Column:
    """The load time `later` is less than `lookback` after the load time `earlier`."""
    return later < earlier + F.make_dt_interval(secs=F.lit(int(lookback.total_seconds())))


def copy_verdicts(valid: DataFrame, earlier: DataFrame, *, lookback: timedelta) -> DataFrame:
    """The keys of the window's copies that a better copy (in the window, or among `earlier`
    copies) loaded less than `lookback` before them dominates, or that several identical rows
    share: (event_id, load_tstamp, collector_tstamp, copy_hash, dominated, repeated). Few, as
    duplicates are; `kept_copies` applies them.

    A copy's rank is in its key, so which copies are dominated is decided on those narrow columns
    alone, in one pass over each event's copies in rank order: the copy just before a copy has the
    latest load_tstamp of all that rank before it, so it alone decides whether one was loaded
    within the look-back."""
    window_keys = valid.select(*_COPY_KEY)
    # Only the recorded copies of the window's events take part. No broadcast hint: in a full
    # rebuild the window is every event; adaptive execution broadcasts an hour's ids by size.
    recorded = earlier.select(*_COPY_KEY).join(window_keys.select("event_id"), "event_id", "left_semi")
    keys = (window_keys.withColumn("in_window", F.lit(True))
            .unionByName(recorded.withColumn("in_window", F.lit(False))))
    in_rank_order = Window.partitionBy("event_id").orderBy(
        "load_tstamp", F.col("collector_tstamp").asc_nulls_last(), "copy_hash")
    ranked = keys.withColumns({f"previous_{column}": F.lag(column).over(in_rank_order) for column in _COPY_KEY})
    # An identical copy sorts next to its twin: it neither dominates it nor is dominated by it.
    repeat = _same_copy("", "previous_")
    dominated = ~repeat & F.col("previous_load_tstamp").isNotNull() & _loaded_within(
        F.col("load_tstamp"), F.col("previous_load_tstamp"), lookback)
    # Per key of the window (the grouping keeps the window's partitioning by event_id: no shuffle).
    return (ranked.select(*_COPY_KEY, "in_window", dominated.alias("dominated"), repeat.alias("repeat"))
            .where(F.col("in_window") & (F.col("dominated") | F.col("repeat")))
            .groupBy(*_COPY_KEY).agg(F.max("dominated").alias("dominated"), F.max("repeat").alias("repeated")))


def kept_copies(valid: DataFrame, verdicts: DataFrame, *, broadcast_verdicts: bool) -> DataFrame:
    """The valid rows of the window whose key `verdicts` (`copy_verdicts`) does not say is
    dominated; identical rows once. Adds `load_date`; drops copy_hash.

    The wide rows (every atomic column) are only filtered by the verdicts' keys. With
    `broadcast_verdicts` (the caller counted them: few) only the repeated rows are shuffled, to
    keep each once; otherwise (a rebuild of a history full of duplicates) the joins shuffle, as
    Spark chooses."""
    flags = (F.broadcast(verdicts) if broadcast_verdicts else verdicts).alias("x")
    untouched = valid.alias("v").join(flags, _same_copy("v.", "x."), "left_anti")
    repeated_once = (valid.alias("v").join(flags.where(~F.col("x.dominated")), _same_copy("v.", "x."), "left_semi")
                     .dropDuplicates(list(_COPY_KEY)))
    return (untouched.unionByName(repeated_once).drop("copy_hash")
            .withColumn("load_date", F.to_date("load_tstamp")))


def _same_copy(left: str, right: str) -> Column:
    """The key columns named with the prefix `left` equal those named with `right` ("v." for an
    alias, "previous_" for the lagged ones); null-safe: a copy may have no collector_tstamp."""
    condition = F.lit(True)
    for column in _COPY_KEY:
        condition = condition & F.col(f"{left}{column}").eqNullSafe(F.col(f"{right}{column}"))
    return condition


def copies_gone(recorded: DataFrame, current: DataFrame) -> DataFrame:
    """The event_ids of copies an earlier run of a window recorded (`recorded`, event_copies
    rows) that the window's valid copies now (`current`) no longer include: deleted or erased
    from the source, or invalid or left out under the rules as they are now."""
    return (recorded.alias("r").join(current.alias("c"), _same_copy("r.", "c."), "left_anti")
            .select("r.event_id").distinct())


def dominated_later(window_copies: DataFrame, later: DataFrame, *, lookback: timedelta) -> DataFrame:
    """The recorded copies after the window (`later`) that one of the window's valid copies,
    kept or dropped, dominates: same event_id, loaded less than `lookback` after it
    (event_id, load_tstamp, domain_sessionid)."""
    k = window_copies.select("event_id", "load_tstamp").alias("k")  # no hint: the window may be every event
    s = later.alias("s")
    return (s.join(k, (F.col("s.event_id") == F.col("k.event_id"))
                  & _loaded_within(F.col("s.load_tstamp"), F.col("k.load_tstamp"), lookback), "left_semi")
            .select("event_id", "load_tstamp", "domain_sessionid"))
