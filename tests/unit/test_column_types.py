"""Which column types a write may bring to an existing table (resources.tables.column_types)."""

import pytest
from pyspark.sql import types as T

from resources.tables.column_types import ColumnTypeChanged, changed_columns, check_column_types, fits


def schema(ddl_types: dict) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in ddl_types.items()])


def test_a_type_fits_only_where_the_tables_type_holds_every_value_exactly():
    assert fits(T.LongType(), T.IntegerType()) and fits(T.IntegerType(), T.ShortType())
    assert fits(T.DoubleType(), T.IntegerType()) and fits(T.DoubleType(), T.FloatType())
    assert fits(T.DecimalType(28, 2), T.DecimalType(10, 2)) and fits(T.StringType(), T.NullType())
    assert not fits(T.IntegerType(), T.DoubleType())  # 5.7 would be stored as 5
    assert not fits(T.IntegerType(), T.LongType()) and not fits(T.DoubleType(), T.LongType())
    assert not fits(T.DecimalType(28, 2), T.DecimalType(28, 4)) and not fits(T.StringType(), T.IntegerType())
    assert not fits(T.TimestampType(), T.TimestampNTZType())


def test_nested_fields_are_compared_and_new_columns_or_fields_are_not_changes():
    table = schema({"n": T.LongType(), "ctx": T.ArrayType(T.StructType([T.StructField("v", T.IntegerType())]))})
    new = schema({"n": T.IntegerType(), "extra": T.DoubleType(), "ctx": T.ArrayType(T.StructType(
        [T.StructField("v", T.DoubleType()), T.StructField("w", T.StringType())]))})
    assert changed_columns(table, new) == [("ctx[].v", T.IntegerType(), T.DoubleType())]
    assert changed_columns(table, schema({"n": T.IntegerType()})) == []


def test_the_refusal_names_the_table_the_column_both_types_and_what_to_do():
    with pytest.raises(ColumnTypeChanged, match=r"^merge base_events: column score is int in the table but double "
                                                r"in the rows written \(and 1 more column\(s\)\);.*Give the column its "
                                                r"old type .* rebuild base_events"):
        check_column_types("base_events", schema({"score": T.IntegerType(), "n": T.IntegerType()}),
                           schema({"score": T.DoubleType(), "n": T.StringType()}), "merge")
    check_column_types("base_events", None, schema({"score": T.DoubleType()}), "merge")  # a new table
