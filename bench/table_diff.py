"""Comparing two tables row by row, and the tables DuckDB wrote with the pipeline's.

`compare(ours, theirs, keys)`: human-readable differences between two Arrow tables keyed by
`keys` (row count, duplicate keys, keys on one side only, values column by column).

`compare_written(out_dir, warehouse)`: each table bench.duckdb_reference.duckdb_write_tables
wrote, against the pipeline's table of the same name in the warehouse: column names and
types, row count, key set, and every value where cheap enough (tables of at most
FULL_COMPARE_CELLS values; larger ones by key only, to stay within memory).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from bench.duckdb_reference import WRITTEN_TABLES, read_written
from bench.duckdb_rules import connect
from incremental_assets.names import (
    ATTRIBUTES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    EVENT_COPIES,
    FILTERED_EVENTS,
    LIFECYCLE,
    QUARANTINED,
    REJECTED_EVENTS,
)
from incremental_assets.transforms.filtered_events import ROW_DIGEST
from resources.tables import read_delta_arrow

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


def _columns_on_one_side(ours: list[str], theirs: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(columns only in ours, columns only in theirs, the differences that makes)."""
    only_ours = [c for c in ours if c not in theirs]
    only_theirs = [c for c in theirs if c not in ours]
    diffs = [f"columns only in ours: {only_ours}"] if only_ours else []
    return only_ours, only_theirs, diffs + ([f"columns only in theirs: {only_theirs}"] if only_theirs else [])


def compare(ours: pa.Table, theirs: pa.Table, keys: list[str]) -> list[str]:
    """Human-readable differences between two tables keyed by `keys`; [] when equal."""
    only_ours, only_theirs, diffs = _columns_on_one_side(ours.column_names, theirs.column_names)
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


# -- the tables DuckDB wrote against the pipeline's ------------------------------------------

# What identifies a row of each table. base_events keeps a later copy of an event loaded at
# least dedupe_lookback_days after every better copy, so event_id alone is unique only within
# the look-back (the event_id_unique check); (event_id, load_tstamp) is unique in the table.
KEYS = {
    BASE_EVENTS: ("event_id", "load_tstamp"),
    EVENT_COPIES: ("event_id", "load_tstamp", "collector_tstamp"),
    REJECTED_EVENTS: ("load_hour_tstamp", "reject_reason"),
    LIFECYCLE: ("domain_sessionid",),
    QUARANTINED: ("domain_sessionid",),
    FILTERED_EVENTS: ("event_id", "load_tstamp"),
    DAILY_AGGREGATES: ("event_date", "domain_userid"),
    ATTRIBUTES: ("domain_userid",),
}
# No column identifies a rejected row (identical copies are all rejected, event_id may be
# null): its rows are compared as counts per key.
COUNTED = (REJECTED_EVENTS,)
# Columns whose values DuckDB cannot reproduce: compared by name and type only.
# Spark's xxhash64 of the row; DuckDB hashes with its own.
UNMATCHABLE = {EVENT_COPIES: ("copy_hash",), FILTERED_EVENTS: (ROW_DIGEST,)}
# Every value is compared up to this many cells (rows x columns) per side, read into memory
# at once (about 0.6 GB of Arrow per side for base_events' wide rows); larger tables by key only.
FULL_COMPARE_CELLS = 50_000_000


def compare_written(out_dir: str | Path, warehouse: str | Path) -> dict[str, dict]:
    """Per written table: {"rows": {"ours", "duckdb"}, "compared": what was, "differences": [...]}."""
    return {name: compare_table(name, f"{warehouse}/{name}", str(out_dir)) for name, _ in WRITTEN_TABLES}


def compare_table(name: str, ours_path: str, out_dir: str) -> dict:
    keys = list(KEYS[name])
    ours_keys = read_delta_arrow(ours_path, keys)
    if ours_keys is None:
        return {"rows": {}, "compared": "nothing", "differences": [f"no table at {ours_path}"]}
    theirs_keys = read_written(out_dir, name, keys)
    if theirs_keys is None:  # DuckDB writes no file for a partitioned table without rows
        missing = [f"row count: ours {ours_keys.num_rows}, theirs 0 (no file)"] if ours_keys.num_rows else []
        return {"rows": {"ours": ours_keys.num_rows, "duckdb": 0}, "compared": "row count", "differences": missing}
    rows = {"ours": ours_keys.num_rows, "duckdb": theirs_keys.num_rows}
    ours_schema = read_delta_arrow(ours_path, predicate="false").schema
    differences = schema_differences(ours_schema, read_written(out_dir, name, limit=0).schema)
    if name in COUNTED:
        compared = f"rows per ({', '.join(keys)})"
        differences += compare(_counts(ours_keys, keys), _counts(theirs_keys, keys), keys)
    elif ours_keys.num_rows * len(ours_schema) > FULL_COMPARE_CELLS:
        compared = f"keys only (over {FULL_COMPARE_CELLS:,} cells: every value would not fit in memory)"
        differences += compare(ours_keys, theirs_keys, keys)
    else:
        ours, theirs = read_delta_arrow(ours_path), read_written(out_dir, name)
        unmatchable = UNMATCHABLE.get(name, ())
        # Names only on one side are reported above; their values cannot be compared.
        common = [c for c in ours.column_names if c in theirs.column_names and c not in unmatchable]
        compared = "every column" + (f" but {', '.join(unmatchable)} (name and type only)" if unmatchable else "")
        differences += compare(ours.select(common), theirs.select(common), keys)
    return {"rows": rows, "compared": compared, "differences": differences}


def _counts(table: pa.Table, keys: list[str]) -> pa.Table:
    """Rows per key."""
    con = connect()
    try:
        con.register("counted", table)
        key_list = ", ".join(f'"{k}"' for k in keys)
        return con.sql(f"SELECT {key_list}, count(*) AS rows FROM counted GROUP BY ALL").to_arrow_table()
    finally:
        con.close()


def schema_differences(ours: pa.Schema, theirs: pa.Schema) -> list[str]:
    """Columns on one side only, and columns whose types differ (column order is not compared)."""
    _, _, diffs = _columns_on_one_side(ours.names, theirs.names)
    for column in ours.names:
        if column in theirs.names and not _same_type(ours.field(column).type, theirs.field(column).type):
            diffs.append(f"{column}: type ours {ours.field(column).type}, theirs {theirs.field(column).type}")
    return diffs


def _same_type(ours: pa.DataType, theirs: pa.DataType) -> bool:
    """Equal types, where a list's element name and nullability and a time zone's spelling
    (UTC, Etc/UTC) do not count."""
    if pa.types.is_list(ours) and pa.types.is_list(theirs):
        return _same_type(ours.value_type, theirs.value_type)
    if pa.types.is_timestamp(ours) and pa.types.is_timestamp(theirs):
        return ours.unit == theirs.unit and (ours.tz is None) == (theirs.tz is None)
    return ours == theirs
