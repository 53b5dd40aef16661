"""Selections of rows: time ranges on a column, optionally narrowed to some key values. Bounds,
checks, and the literals and predicates that select them, for Spark and for delta-rs. Values
are always bound or quoted, never pasted as text."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

UTC = dt.timezone.utc
# Range columns: Delta/Spark type names that a time range can be taken on.
_RANGE_TYPES = ("timestamp", "date")


def _plain_datetime(value: dt.datetime) -> dt.datetime:
    """A plain UTC datetime (also from subclasses such as pendulum's, which Spark and pyarrow
    may not recognise)."""
    utc = value.astimezone(UTC)
    return dt.datetime(utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                       utc.microsecond, tzinfo=UTC)


def _normalise_bound(value: Any, column_type: str, column: str, side: str):
    """A range bound as the Python value the column compares with (UTC datetime or date)."""
    if value is None:
        return None
    if column_type == "timestamp":
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError(
                    f"range {side} for timestamp column {column!r} must be timezone-aware "
                    f"(UTC), got naive {value!r}"
                )
            return _plain_datetime(value)
        if isinstance(value, dt.date):
            return dt.datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif column_type == "date":
        if isinstance(value, dt.datetime):
            # A partition time window gives midnight datetimes; anything else is ambiguous.
            utc = _plain_datetime(value) if value.tzinfo else value
            if utc.time() != dt.time(0):
                raise ValueError(
                    f"range {side} for date column {column!r} must be a date or a midnight "
                    f"UTC datetime, got {value!r}"
                )
            return dt.date(utc.year, utc.month, utc.day)
        if isinstance(value, dt.date):
            return dt.date(value.year, value.month, value.day)
    else:
        raise ValueError(
            f"column {column!r} has type {column_type!r}; ranges are supported on "
            f"{' and '.join(_RANGE_TYPES)} columns only"
        )
    raise ValueError(f"range {side} for column {column!r} must be a datetime or date, got {value!r}")


def normalise_range(column: str, column_type: str, start, end):
    lo = _normalise_bound(start, column_type, column, "start")
    hi = _normalise_bound(end, column_type, column, "end")
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"empty range on {column!r}: start {lo} is not before end {hi}")
    return lo, hi


def spark_range_condition(column: str, lo, hi):
    """Spark Column for lo <= column < hi (None = unbounded); literals bound, not formatted."""
    condition = F.col(column).isNotNull()
    if lo is not None:
        condition = condition & (F.col(column) >= F.lit(lo))
    if hi is not None:
        condition = condition & (F.col(column) < F.lit(hi))
    return condition


def _timestamp_iso_utc(value: dt.datetime) -> str:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def quote_string(value: str) -> str:
    # Standard SQL: a quote inside a literal is doubled; nothing else is special.
    return "'" + value.replace("'", "''") + "'"


def delta_rs_literal(value: Any, column_type: str, column: str) -> str:
    """A delta-rs (DataFusion) SQL literal for `value` compared with a column of this type."""
    if column_type == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is not None:
        # A bare TIMESTAMP '...' literal is tz-naive nanoseconds and does not compare with
        # delta-rs's timestamp[us, UTC] columns; cast explicitly to the column's Arrow type.
        return f"arrow_cast('{_timestamp_iso_utc(value)}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if column_type == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    if column_type == "string" and isinstance(value, str):
        return quote_string(value)
    if column_type in ("byte", "short", "integer", "long") and isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    if column_type == "boolean" and isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    raise ValueError(f"cannot compare column {column!r} of type {column_type!r} with {value!r}")


# The most values an IN list handed to delta-rs may hold: its SQL handling recurses per value,
# and some 30,000 (item ids of a 300-day backfill) overflowed the native stack (a segfault).
DELTA_RS_IN_LIST_LIMIT = 2_000


def delta_rs_in_predicate(column: str, column_type: str, values) -> str:
    """delta-rs SQL selecting the rows whose column equals one of `values` (none: no row)."""
    if not values:
        return "FALSE"
    if len(values) > DELTA_RS_IN_LIST_LIMIT:
        raise ValueError(f"{len(values)} values of {column!r} in one delta-rs predicate; at most "
                         f"{DELTA_RS_IN_LIST_LIMIT} are safe (more overflow delta-rs's native stack)")
    return f'"{column}" IN ({", ".join(delta_rs_literal(v, column_type, column) for v in values)})'


def delta_rs_range_predicate(column: str, column_type: str, lo, hi) -> str:
    parts = [f'"{column}" IS NOT NULL']
    if lo is not None:
        parts.append(f'"{column}" >= {delta_rs_literal(lo, column_type, column)}')
    if hi is not None:
        parts.append(f'"{column}" < {delta_rs_literal(hi, column_type, column)}')
    return " AND ".join(parts)


def spark_sql_range_predicate(column: str, column_type: str, lo, hi) -> str:
    """Spark SQL text for lo <= column < hi (delta-spark's replaceWhere takes a string)."""

    def literal(value):
        if column_type == "timestamp":
            return f"TIMESTAMP '{_timestamp_iso_utc(value)}'"  # explicit zone: session tz ignored
        return f"DATE '{value.isoformat()}'"

    parts = [f"`{column}` IS NOT NULL"]
    if lo is not None:
        parts.append(f"`{column}` >= {literal(lo)}")
    if hi is not None:
        parts.append(f"`{column}` < {literal(hi)}")
    return " AND ".join(parts)


def out_of_range_error(column: str, lo, hi, value) -> ValueError:
    return ValueError(
        f"replace: every row must have {lo} <= {column} < {hi} (None = unbounded); "
        f"column {column!r} has a row outside the range: first offending value {value}"
    )


def spark_type_name(schema, column: str, what: str) -> str:
    """Delta/Spark type name ("timestamp", "date", ...) of a column in a Spark StructType."""
    for field in schema.fields:
        if field.name == column:
            return field.dataType.typeName()
    raise ValueError(f"{what}: column {column!r} not found; columns are {schema.names}")


# -- selections: a union of ranges, each optionally narrowed to key values ---------------------

@dataclass(frozen=True)
class RowRange:
    """The rows with start <= column < end (None: unbounded on that side) and, when `key` is
    given, whose `key` column equals one of `values`."""

    column: str
    start: Any = None
    end: Any = None
    key: str | None = None
    values: tuple = ()


@dataclass(frozen=True)
class ResolvedRange:
    """A RowRange with its bounds normalised for the column's type."""

    column: str
    column_type: str
    lo: Any
    hi: Any
    key: str | None
    key_type: str | None
    values: tuple


def resolve_rows(rows: Sequence[RowRange], schema, what: str) -> list[ResolvedRange]:
    """The ranges of `rows` against a Spark schema; ranges narrowed to no key value select
    nothing and are left out."""
    resolved = []
    for row_range in rows:
        if row_range.key is not None and not row_range.values:
            continue
        if row_range.key is not None and any(v is None for v in row_range.values):
            raise ValueError(f"{what}: key values must not contain None (null never matches)")
        column_type = spark_type_name(schema, row_range.column, what)
        lo, hi = normalise_range(row_range.column, column_type, row_range.start, row_range.end)
        key_type = spark_type_name(schema, row_range.key, what) if row_range.key else None
        resolved.append(ResolvedRange(row_range.column, column_type, lo, hi, row_range.key, key_type,
                                      tuple(row_range.values)))
    return resolved


def fits_delta_rs_predicate(ranges: Sequence[ResolvedRange]) -> bool:
    """Whether the key values of all `ranges` together fit in one delta-rs predicate."""
    return sum(len(r.values) for r in ranges) <= DELTA_RS_IN_LIST_LIMIT


def delta_rs_rows_predicate(ranges: Sequence[ResolvedRange]) -> str:
    """delta-rs SQL selecting the rows of any of `ranges` (refused when they do not fit)."""
    if not fits_delta_rs_predicate(ranges):
        raise ValueError(f"{sum(len(r.values) for r in ranges)} key values in one delta-rs predicate; at most "
                         f"{DELTA_RS_IN_LIST_LIMIT} are safe (more overflow delta-rs's native stack)")
    parts = []
    for r in ranges:
        part = delta_rs_range_predicate(r.column, r.column_type, r.lo, r.hi)
        if r.key is not None:
            part += " AND " + delta_rs_in_predicate(r.key, r.key_type, r.values)
        parts.append(f"({part})")
    return " OR ".join(parts) or "FALSE"


def spark_rows_condition(ranges: Sequence[ResolvedRange]):
    """Spark Column true for the rows of any of `ranges`, false (never null) for every other row."""
    condition = F.lit(False)
    for r in ranges:
        part = spark_range_condition(r.column, r.lo, r.hi)
        if r.key is not None:
            part = part & F.col(r.key).isin(*r.values)
        condition = condition | F.coalesce(part, F.lit(False))
    return condition


def _spark_sql_string(value: str) -> str:
    # Spark SQL string literals treat a backslash as an escape character.
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_sql_rows_predicate(ranges: Sequence[ResolvedRange]) -> str:
    """Spark SQL text selecting the rows of any of `ranges` (delta-spark's replaceWhere)."""
    parts = []
    for r in ranges:
        part = spark_sql_range_predicate(r.column, r.column_type, r.lo, r.hi)
        if r.key is not None:
            literals = [_spark_sql_string(v) if isinstance(v, str) else str(int(v)) for v in r.values]
            part += f" AND `{r.key}` IN ({', '.join(literals)})"
        parts.append(f"({part})")
    return " OR ".join(parts) or "FALSE"


def check_arrow_rows_in_ranges(data: pa.Table, ranges: Sequence[ResolvedRange]) -> None:
    """Every row lies inside the time range of one of `ranges` (their key values are not checked)."""
    if not ranges:
        if data.num_rows:
            raise ValueError("replace: rows were given but the selection selects nothing")
        return
    inside = None
    for r in ranges:
        values = data.column(r.column)
        mask = pc.is_valid(values)
        if r.lo is not None:
            mask = pc.and_kleene(mask, pc.greater_equal(values, pa.scalar(r.lo, type=values.type)))
        if r.hi is not None:
            mask = pc.and_kleene(mask, pc.less(values, pa.scalar(r.hi, type=values.type)))
        mask = pc.fill_null(mask, False)
        inside = mask if inside is None else pc.or_(inside, mask)
    outside = pc.invert(inside)
    if pc.any(outside).as_py():
        first, r = pc.index(outside, True).as_py(), ranges[0]
        raise out_of_range_error(r.column, r.lo, r.hi, data.column(r.column)[first].as_py())
