"""DuckDB baseline: the pipeline's daily_aggregates and attributes of a full backfill, in SQL.

What a user would otherwise run on one machine: the same source Parquet files (the active
files of the source Delta table), the same rules (bench/duckdb_rules.py, one SQL definition
per rule), one DuckDB process, no incremental state. The result equals a full
`incremental_assets.runner.backfill` into an empty warehouse.
"""

from __future__ import annotations

import datetime

import duckdb
import pyarrow as pa

from bench.duckdb_rules import RULE_COLUMNS, connect, create_all
from incremental_assets.names import ATTRIBUTES, DAILY_AGGREGATES


def duckdb_tables(source_path: str, settings, as_of: datetime.date,
                  threads: int | None = None) -> tuple[pa.Table, pa.Table]:
    """(daily_aggregates, attributes) of a full backfill of the source at `source_path`, in memory.

    `settings` is an incremental_assets.settings.Settings; `as_of` the attributes' as-of day
    (the pipeline's settings.as_of_date(now)); `threads` caps DuckDB's threads.
    """
    con = connect(threads)
    try:
        create_all(con, source_path, settings, as_of, columns=RULE_COLUMNS)
        daily = con.sql(f"SELECT * FROM {DAILY_AGGREGATES} ORDER BY event_date, domain_userid").to_arrow_table()
        return daily, con.sql(f"SELECT * FROM {ATTRIBUTES} ORDER BY domain_userid").to_arrow_table()
    finally:
        con.close()


# -- comparing two tables ---------------------------------------------------------------

EXAMPLES = 3
FLOAT_TOLERANCE = 1e-9  # relative, for columns where either side is a float


def _differs(column: str, ours: pa.DataType, theirs: pa.DataType) -> str:
    """A SQL condition: the column's values of o and t differ (nulls equal only to nulls)."""
    o, t = f'o."{column}"', f't."{column}"'
    if pa.types.is_floating(ours) or pa.types.is_floating(theirs):
        return (f"({o} IS NULL) <> ({t} IS NULL) OR abs({o}::DOUBLE - {t}::DOUBLE) > "
                f"{FLOAT_TOLERANCE} * greatest(1, abs({o}::DOUBLE), abs({t}::DOUBLE))")
    if pa.types.is_timestamp(ours) or pa.types.is_timestamp(theirs):
        # Instants: a naive timestamp is read as UTC (the connection's time zone).
        return f"{o}::TIMESTAMPTZ IS DISTINCT FROM {t}::TIMESTAMPTZ"
    if (pa.types.is_decimal(ours) or pa.types.is_integer(ours)) and \
            (pa.types.is_decimal(theirs) or pa.types.is_integer(theirs)):
        return f"{o} IS DISTINCT FROM {t}"  # exact, whatever the scale
    return f"{o}::VARCHAR IS DISTINCT FROM {t}::VARCHAR"


def compare(ours: pa.Table, theirs: pa.Table, keys: list[str]) -> list[str]:
    """Human-readable differences between two tables keyed by `keys`; [] when equal."""
    diffs = []
    only_ours = [c for c in ours.column_names if c not in theirs.column_names]
    only_theirs = [c for c in theirs.column_names if c not in ours.column_names]
    if only_ours:
        diffs.append(f"columns only in ours: {only_ours}")
    if only_theirs:
        diffs.append(f"columns only in theirs: {only_theirs}")
    missing_keys = [k for k in keys if k in only_ours or k in only_theirs]
    if missing_keys:
        return diffs + [f"key columns {missing_keys} are not on both sides: rows not compared"]
    if ours.num_rows != theirs.num_rows:
        diffs.append(f"row count: ours {ours.num_rows}, theirs {theirs.num_rows}")

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("ours", ours)
        con.register("theirs", theirs)
        key_list = ", ".join(f'"{k}"' for k in keys)
        for name in ("ours", "theirs"):
            dupes, = con.execute(f"SELECT count(*) FROM (SELECT {key_list} FROM {name} "
                                 f"GROUP BY ALL HAVING count(*) > 1)").fetchone()
            if dupes:
                diffs.append(f"{name}: {dupes} keys occur more than once")

        for name, other in (("ours", "theirs"), ("theirs", "ours")):
            only = f"SELECT {key_list} FROM {name} EXCEPT SELECT {key_list} FROM {other}"
            count, = con.execute(f"SELECT count(*) FROM ({only})").fetchone()
            if count:
                examples = con.execute(f"{only} ORDER BY ALL LIMIT {EXAMPLES}").fetchall()
                diffs.append(f"{count} keys only in {name}, e.g. {examples}")

        on = " AND ".join(f'o."{k}" IS NOT DISTINCT FROM t."{k}"' for k in keys)
        key_cols = ", ".join(f'o."{k}"' for k in keys)
        for column in ours.column_names:
            if column in keys or column in only_ours:
                continue
            condition = _differs(column, ours.schema.field(column).type, theirs.schema.field(column).type)
            count, = con.execute(f"SELECT count(*) FROM ours o JOIN theirs t ON {on} WHERE {condition}").fetchone()
            if count:
                examples = con.execute(f'SELECT {key_cols}, o."{column}", t."{column}" FROM ours o '
                                       f"JOIN theirs t ON {on} WHERE {condition} ORDER BY ALL "
                                       f"LIMIT {EXAMPLES}").fetchall()
                shown = "; ".join(f"{row[:len(keys)]}: ours={row[-2]!r} theirs={row[-1]!r}"
                                  for row in examples)
                diffs.append(f"{column}: {count} rows differ, e.g. {shown}")
    finally:
        con.close()
    return diffs
