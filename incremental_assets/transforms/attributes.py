"""attributes: one row per user, as of a day A, from daily_aggregates (docs/rules.md 7).

The attributes daily_aggregates holds what they read (the default declaration's, and any
declared like them: `planning.default_attributes.daily_measure`) are computed here from the
users' daily rows. Every period covers event days before A: lifetime, or the last N days
[A - N days, A). Sessions are counted from the days' session lists, so a session over
midnight counts once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from incremental_assets.planning.attribute_declarations import AttributeDeclaration
from incremental_assets.planning.default_attributes import AS_OF_COLUMN, KEY_COLUMN, daily_measure
from incremental_assets.transforms.attribute_states import result_type, with_declared_attributes


def _in_last_days(as_of: date, days: int) -> Column:
    """event_date in [as_of - days, as_of)."""
    return (F.col("event_date") >= F.lit(as_of - timedelta(days=days))) & (F.col("event_date") < F.lit(as_of))


def _daily_value(declared: AttributeDeclaration, as_of: date) -> Column:
    """The attribute over the user's daily rows before `as_of` (the rows' own filter), its
    default where its period holds no row."""
    measure = daily_measure(declared)
    column = F.col(measure)
    if declared.period_days is not None:
        column = F.when(_in_last_days(as_of, declared.period_days), column)
    if measure == "session_ids":
        value = F.size(F.array_distinct(F.flatten(F.collect_list(column))))
    elif measure == "event_date" and declared.aggregation == "distinct_count":
        # Not countDistinct: a distinct aggregate beside the others costs a second aggregation.
        value = F.size(F.collect_set(column))
    elif measure == "event_date":
        value = F.min(column) if declared.aggregation == "min" else F.max(column)
    else:
        value = F.sum(column)
    kind = result_type(declared)
    value = value.cast(kind)
    if declared.default is not None:
        value = F.coalesce(value, F.lit(declared.default).cast(kind))
    return value.alias(declared.name)


def user_attributes(daily: DataFrame, *, as_of: date, declared: Sequence[AttributeDeclaration]) -> DataFrame:
    """Per user of `daily` with a day before `as_of`: the `declared` attributes daily_aggregates
    holds (every other one is left to the states), and `attributes_as_of`."""
    rows = daily.where(F.col("event_date") < F.lit(as_of))
    measured = [_daily_value(d, as_of) for d in declared if daily_measure(d) is not None]
    users = rows.groupBy(KEY_COLUMN).agg(*measured) if measured else rows.select(KEY_COLUMN).distinct()
    return users.withColumn(AS_OF_COLUMN, F.lit(as_of))


def periodic(declared: Sequence[AttributeDeclaration]) -> tuple[AttributeDeclaration, ...]:
    """The attributes daily_aggregates holds that cover the last N days (they move with A)."""
    return tuple(d for d in declared if daily_measure(d) is not None and d.period_days is not None)


def refresh_window_metrics(stored: DataFrame, daily_window: DataFrame, new_users: DataFrame, *,
                           as_of: date, declared: Sequence[AttributeDeclaration]) -> DataFrame:
    """Stored attributes with only their last-N-days attributes of `declared` recomputed, plus
    `new_users` (full rows of users not stored yet)."""
    windows = periodic(declared)
    kept = stored.drop(*[d.name for d in windows], AS_OF_COLUMN)
    if windows:
        # A user with no day in any window gets each one's default.
        fresh = daily_window.where(F.col("event_date") < F.lit(as_of)).groupBy(KEY_COLUMN).agg(
            *[_daily_value(d, as_of) for d in windows])
        kept = with_declared_attributes(kept, fresh, windows)
    kept = kept.withColumn(AS_OF_COLUMN, F.lit(as_of))
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
    return daily.where(moved).select(KEY_COLUMN).distinct()


def users_with_changed_rows(before: DataFrame, after: DataFrame) -> DataFrame:
    """The users (KEY_COLUMN) with a row in one of `before` and `after` that the other does not
    hold, column for column (`after`'s columns): a rebuilt day whose rows of a user came out the
    same leaves that user's attributes as they are. One aggregation: each row counted +1 after,
    -1 before; a row whose count is not 0 changed."""
    columns = [F.col(f"`{c}`") for c in after.columns]
    signed = (after.select(*columns, F.lit(1).alias("side"))
              .unionByName(before.select(*columns, F.lit(-1).alias("side"))))
    return (signed.groupBy(*columns).agg(F.sum("side").alias("net")).where(F.col("net") != 0)
            .select(KEY_COLUMN).distinct())
