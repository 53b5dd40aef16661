"""Time ranges on a table column: bounds, checks, and the literals and predicates that select
them, for Spark and for delta-rs. Values are always bound or quoted, never pasted as text."""

from __future__ import annotations

import datetime as dt
from typing import Any

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


def delta_rs_in_predicate(column: str, column_type: str, values) -> str:
    """delta-rs SQL selecting the rows whose column equals one of `values` (none: no row)."""
    if not values:
        return "FALSE"
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
        f"replace_range: every row must have {lo} <= {column} < {hi} (None = unbounded); "
        f"column {column!r} has a row outside the range: first offending value {value}"
    )


def check_arrow_rows_in_range(data: pa.Table, column: str, lo, hi) -> None:
    values = data.column(column)
    inside = pc.is_valid(values)
    if lo is not None:
        inside = pc.and_kleene(inside, pc.greater_equal(values, pa.scalar(lo, type=values.type)))
    if hi is not None:
        inside = pc.and_kleene(inside, pc.less(values, pa.scalar(hi, type=values.type)))
    outside = pc.invert(pc.fill_null(inside, False))
    if pc.any(outside).as_py():
        first = pc.index(outside, True).as_py()
        raise out_of_range_error(column, lo, hi, values[first].as_py())


def spark_type_name(schema, column: str, what: str) -> str:
    """Delta/Spark type name ("timestamp", "date", ...) of a column in a Spark StructType."""
    for field in schema.fields:
        if field.name == column:
            return field.dataType.typeName()
    raise ValueError(f"{what}: column {column!r} not found; columns are {schema.names}")
