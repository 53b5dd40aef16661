"""Column types a write may bring to an existing table: the same, or narrower ones that the
table's type holds exactly (an int into a long column). A type the table's cannot hold (a
context field that became double in a rewritten source, where the table holds int) is refused
on both engines: delta-rs would cast 5.7 to 5 silently, delta-spark refuses the merge with an
error that names neither the table nor what to do."""

from __future__ import annotations

from pyspark.sql import types as T

# Integral types by width: a narrower one fits in a wider one.
_INTEGRAL_WIDTH = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 4, T.LongType: 8}
# Integral types a double holds exactly (a long's 64 bits do not fit in its 53-bit mantissa).
_EXACT_IN_DOUBLE = (T.ByteType, T.ShortType, T.IntegerType, T.FloatType)


class ColumnTypeChanged(ValueError):
    """A write whose rows hold a column in a type the table's type cannot hold."""


def fits(table_type: T.DataType, new_type: T.DataType) -> bool:
    """True when every value of `new_type` is stored exactly in a column of `table_type`."""
    if table_type == new_type or isinstance(new_type, T.NullType):
        return True
    if type(table_type) in _INTEGRAL_WIDTH and type(new_type) in _INTEGRAL_WIDTH:
        return _INTEGRAL_WIDTH[type(new_type)] <= _INTEGRAL_WIDTH[type(table_type)]
    if isinstance(table_type, T.DoubleType):
        return isinstance(new_type, _EXACT_IN_DOUBLE)
    if isinstance(table_type, T.DecimalType) and isinstance(new_type, T.DecimalType):
        return (new_type.scale <= table_type.scale
                and new_type.precision - new_type.scale <= table_type.precision - table_type.scale)
    return False


def changed_columns(table_schema: T.StructType, new_schema: T.StructType,
                    prefix: str = "") -> list[tuple[str, T.DataType, T.DataType]]:
    """(column path, table's type, new type) of each column, nested fields included, whose new
    type the table's cannot hold. Columns or fields new to the table are not changes (they evolve
    the schema), nor are those the rows leave out."""
    table_fields = {f.name: f.dataType for f in table_schema.fields}
    changed = []
    for new in new_schema.fields:
        if new.name in table_fields:
            changed += _changed(f"{prefix}{new.name}", table_fields[new.name], new.dataType)
    return changed


def _changed(path: str, table_type: T.DataType, new_type: T.DataType) -> list[tuple[str, T.DataType, T.DataType]]:
    if isinstance(table_type, T.StructType) and isinstance(new_type, T.StructType):
        return changed_columns(table_type, new_type, f"{path}.")
    if isinstance(table_type, T.ArrayType) and isinstance(new_type, T.ArrayType):
        return _changed(f"{path}[]", table_type.elementType, new_type.elementType)
    if isinstance(table_type, T.MapType) and isinstance(new_type, T.MapType):
        return (_changed(f"{path}{{key}}", table_type.keyType, new_type.keyType)
                + _changed(f"{path}{{value}}", table_type.valueType, new_type.valueType))
    return [] if fits(table_type, new_type) else [(path, table_type, new_type)]


def check_column_types(name: str, table_schema: T.StructType | None, new_schema: T.StructType, what: str) -> None:
    """Refuse (ColumnTypeChanged) a write to table `name` whose rows hold a column in a type the
    table's cannot hold, naming the table, the column, both types and what to do."""
    if table_schema is None:
        return
    changed = changed_columns(table_schema, new_schema)
    if not changed:
        return
    path, old, new = changed[0]
    more = f" (and {len(changed) - 1} more column(s))" if len(changed) > 1 else ""
    raise ColumnTypeChanged(
        f"{what} {name}: column {path} is {old.simpleString()} in the table but {new.simpleString()} in the rows "
        f"written{more}; the table's type cannot hold every value, and values are never cast down. Give the "
        f"column its old type where it comes from (the source), or rebuild {name} and the tables after it "
        "with the new type (drop them and run their load hours again); nothing was written")
