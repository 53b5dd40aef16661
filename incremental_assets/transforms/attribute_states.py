"""Declared attributes (docs/rules.md 8): per-user-per-day states, merged into values as of a day.

A state is one row per (event_date, domain_userid, attribute key): the distinct values the
attribute's property took that day, each with its number of events and its first and last
event time. Every aggregation is a function of those (counts and sums add, min and max
combine, first and last compare times, distinct sets unite), so the states of any set of days
merge exactly into the values of those days together, and a day rebuilt replaces its rows alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

from incremental_assets.planning.attribute_declarations import (
    AttributeDeclaration,
    AttributeDeclarationError,
    Criterion,
    PropertyPath,
)

STATE_COLUMNS = ("event_date", "domain_userid", "attribute", "value_counts")
_RESULT_TYPES = {"count": "long", "distinct_count": "long", "sum": "double", "mean": "double"}


def _leaf(column: Column, kind: DataType, names: Sequence[str]) -> Column:
    for name in names:
        if not isinstance(kind, StructType) or name not in kind.fieldNames():
            return F.lit(None).cast("string")  # a field this data does not have: null, like a missing JSON key
        column, kind = column.getField(name), kind[name].dataType
    return F.to_json(column) if isinstance(kind, (StructType, ArrayType, MapType)) else column.cast("string")


def property_value(schema: StructType, prop: PropertyPath, where: str) -> Column:
    """The property's value as text (null where absent): a column, or a path into a JSON string
    (CSV exports) or into an array of structs / a struct (Delta and Parquet loaders)."""
    if prop.column not in schema.fieldNames():
        raise AttributeDeclarationError(f"{where}: property {prop} names column {prop.column!r}, "
                                        "which the events do not have")
    column, kind = F.col(f"`{prop.column}`"), schema[prop.column].dataType
    if not prop.fields and prop.index is None:
        return _leaf(column, kind, ())
    if isinstance(kind, StringType):
        fields = "".join(f".{f}" for f in prop.fields)
        in_list = F.get_json_object(column, f"$[{prop.index or 0}]{fields}")
        return in_list if prop.index is not None else F.coalesce(in_list, F.get_json_object(column, f"${fields}"))
    if isinstance(kind, ArrayType):  # `get`: null past the end (an index past it fails under ANSI mode)
        return _leaf(F.get(column, prop.index or 0), kind.elementType, prop.fields)
    if prop.index is not None:
        raise AttributeDeclarationError(f"{where}: property {prop} indexes {prop.column!r}, which is not a list")
    return _leaf(column, kind, prop.fields)


def _number(value: Column) -> Column:
    """The text as a number; null where it is not one. A plain cast would fail the run under ANSI
    mode, and Spark may evaluate a cast shared by several aggregates on every row, whatever
    attribute the row belongs to."""
    return value.try_cast("double")


def _condition(schema: StructType, criterion: Criterion, where: str) -> Column:
    value = property_value(schema, criterion.property_path, where)
    target, op = criterion.value, criterion.operator
    if op == "like":
        return value.like(target)
    if op == "in":
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in target)
        return (_number(value) if numeric else value).isin([v if numeric else str(v) for v in target])
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    left, right = (_number(value), F.lit(float(target))) if numeric else (value, F.lit(str(target)))
    return {"eq": left == right, "neq": left != right, "gt": left > right, "gte": left >= right,
            "lt": left < right, "lte": left <= right}[op]


def _applies(schema: StructType, declared: AttributeDeclaration) -> Column:
    """Whether an event counts for the attribute: one of its events, and its criteria."""
    where = f"attribute {declared.name!r}"
    condition = F.lit(True)
    if declared.events:
        def selected(event) -> Column:
            one = F.col("event_name") == event.name
            if event.vendor:
                one &= F.col("event_vendor") == event.vendor
            if event.version:
                one &= F.col("event_version") == event.version
            return one
        condition = _any([selected(e) for e in declared.events])
    if declared.criteria:
        conditions = [F.coalesce(_condition(schema, c, where), F.lit(False)) for c in declared.criteria]
        condition &= _any(conditions) if declared.criteria_match == "any" else _all(conditions)
    return F.coalesce(condition, F.lit(False))


def _any(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result |= condition
    return result


def _all(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result &= condition
    return result


def check_properties(schema: StructType, declared: Sequence[AttributeDeclaration]) -> None:
    """Fail before any work when a declaration names a column the events do not have."""
    for d in declared:
        _applies(schema, d)
        if d.property_path is not None:
            property_value(schema, d.property_path, f"attribute {d.name!r}")


def attribute_states(events: DataFrame, declared: Sequence[AttributeDeclaration]) -> DataFrame:
    """The states of every declared attribute for each (event_date, domain_userid) of `events`
    (filtered events: one pass over them for all attributes)."""
    schema = events.schema
    entries = [F.struct(F.lit(d.key).alias("attribute"), _applies(schema, d).alias("applies"),
                        (property_value(schema, d.property_path, f"attribute {d.name!r}") if d.property_path
                         else F.lit(None).cast("string")).alias("value"))
               for d in declared]
    hits = events.select("event_date", "domain_userid", "derived_tstamp",
                         F.explode(F.filter(F.array(*entries), lambda e: e["applies"])).alias("hit"))
    by_value = hits.groupBy("event_date", "domain_userid", F.col("hit.attribute").alias("attribute"),
                            F.col("hit.value").alias("value")).agg(
        F.count(F.lit(1)).alias("events"), F.min("derived_tstamp").alias("first_tstamp"),
        F.max("derived_tstamp").alias("last_tstamp"))
    return by_value.groupBy("event_date", "domain_userid", "attribute").agg(
        F.sort_array(F.collect_list(F.struct("value", "events", "first_tstamp", "last_tstamp"))).alias("value_counts"))


def _typed(declared: AttributeDeclaration, value: Column) -> Column:
    return _number(value) if declared.value_type == "number" else value


def _aggregate(declared: AttributeDeclaration) -> Column:
    """The attribute's value from merged (domain_userid, attribute, value) rows."""
    mine = F.col("attribute") == declared.key
    has_value = mine & F.col("value").isNotNull()
    value, events = _typed(declared, F.col("value")), F.col("events")
    has_typed = mine & value.isNotNull()  # for `type: number`, text that is no number is left out
    kind = declared.aggregation
    if kind == "count":
        return F.sum(F.when(has_value if declared.property_path else mine, events))
    if kind == "sum":
        return F.sum(F.when(has_value, _number(F.col("value")) * events))
    if kind == "mean":  # over the values that are numbers
        return F.sum(F.when(has_value, _number(F.col("value")) * events)) / F.sum(
            F.when(has_value & _number(F.col("value")).isNotNull(), events))
    if kind == "min":
        return F.min(F.when(has_typed, value))
    if kind == "max":
        return F.max(F.when(has_typed, value))
    if kind == "first":  # the earliest event; a tie goes to the smaller value
        return F.min(F.when(has_typed, F.struct(F.col("first_tstamp"), value.alias("v"))))["v"]
    if kind == "last":  # the latest event; a tie goes to the greater value
        return F.max(F.when(has_typed, F.struct(F.col("last_tstamp"), value.alias("v"))))["v"]
    if kind == "most_frequent":  # a tie goes to the value seen last
        return F.max(F.when(has_typed, F.struct(events, F.col("last_tstamp"), value.alias("v"))))["v"]
    if kind == "distinct_count":
        return F.count(F.when(has_value, F.col("value")))
    if kind == "distinct_list":
        return F.slice(F.sort_array(F.collect_list(F.when(has_typed, value))), 1, declared.cap)
    raise AttributeDeclarationError(f"attribute {declared.name!r}: aggregation {kind!r} has no rule")


def _period_start(declared: Sequence[AttributeDeclaration], as_of: date) -> Column:
    """Per state row: the first day its attribute's period covers (null: lifetime)."""
    start = F.lit(None).cast("date")
    for d in declared:
        if d.period_days is not None:
            start = F.when(F.col("attribute") == d.key, F.lit(as_of - timedelta(days=d.period_days))).otherwise(start)
    return start


def declared_values(states: DataFrame, declared: Sequence[AttributeDeclaration], *, as_of: date) -> DataFrame:
    """One row per user with a state before `as_of`: each attribute over its period, days
    [as_of - period, as_of) or every day before as_of (null where no event counted)."""
    start = _period_start(declared, as_of)
    rows = states.where(F.col("attribute").isin([d.key for d in declared]) & (F.col("event_date") < F.lit(as_of))
                        & (start.isNull() | (F.col("event_date") >= start)))
    merged = (rows.select("domain_userid", "attribute", F.explode("value_counts").alias("v"))
              .groupBy("domain_userid", "attribute", F.col("v.value").alias("value"))
              .agg(F.sum("v.events").alias("events"), F.min("v.first_tstamp").alias("first_tstamp"),
                   F.max("v.last_tstamp").alias("last_tstamp")))
    return merged.groupBy("domain_userid").agg(*[_aggregate(d).alias(d.name) for d in declared])


def result_type(declared: AttributeDeclaration) -> str:
    if declared.aggregation == "distinct_list":
        return f"array<{declared.value_type if declared.value_type == 'string' else 'double'}>"
    return _RESULT_TYPES.get(declared.aggregation, "double" if declared.value_type == "number" else "string")


def with_declared_attributes(users: DataFrame, values: DataFrame | None,
                             declared: Sequence[AttributeDeclaration]) -> DataFrame:
    """`users` (one row per domain_userid) with each declared attribute: its value in `values`,
    else its default (an empty list for a distinct list)."""
    joined = users if values is None else users.join(values, "domain_userid", "left")
    for d in declared:
        kind = result_type(d)
        fallback = (F.array().cast(kind) if d.aggregation == "distinct_list" else F.lit(d.default).cast(kind))
        value = F.col(d.name).cast(kind) if values is not None else F.lit(None).cast(kind)
        joined = joined.withColumn(d.name, F.coalesce(value, fallback))
    return joined
