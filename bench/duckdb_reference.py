"""DuckDB baseline: the pipeline's daily_aggregates and attributes of a full backfill, in SQL.

What a user would otherwise run on one machine: the same source Parquet files (the active
files of the source Delta table), the same rules, one DuckDB process, no incremental state.
The result equals a full `incremental_assets.runs.backfill` into an empty warehouse.

Rules, in the order the pipeline applies them (the module that owns each rule in brackets):
1. source rows: string columns '' -> null, load time = coalesce(load_tstamp, collector_tstamp)
   (sources/schema.py, sources/reader.py);
2. base_events: app_ids filter, validation, first-loaded copy per event_id, and no valid copy
   loaded in the duplicate look-back before the first load hour (transforms/base_events.py);
3. session lifecycle over all base events: start, user, max_session_days limit
   (transforms/sessions.py);
4. filtered_events: start_date, event_names, quarantine cut, event_date
   (transforms/filtered_events.py);
5. daily_aggregates and attributes (transforms/daily_aggregates.py, transforms/attributes.py).

Where a full backfill stops at the current hour (loads) and today (event days), this reads
every load from start_date on: a benchmark source holds no future rows.
"""

from __future__ import annotations

import datetime
from datetime import timedelta

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

from incremental_assets.sources.schema import LOAD_TIME_SQL

# The source columns the rules read, with their atomic-events types (sources/schema.py).
SOURCE_COLUMNS = {
    "event_id": "VARCHAR",
    "app_id": "VARCHAR",
    "domain_userid": "VARCHAR",
    "domain_sessionid": "VARCHAR",
    "event_name": "VARCHAR",
    "collector_tstamp": "TIMESTAMP WITH TIME ZONE",
    "dvce_created_tstamp": "TIMESTAMP WITH TIME ZONE",
    "dvce_sent_tstamp": "TIMESTAMP WITH TIME ZONE",
    "derived_tstamp": "TIMESTAMP WITH TIME ZONE",
    "load_tstamp": "TIMESTAMP WITH TIME ZONE",
    "tr_total": "DECIMAL(18,2)",
}
# base_events.MAX_FUTURE_SKEW_HOURS
MAX_FUTURE_SKEW_HOURS = 24


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _create_source_view(con: duckdb.DuckDBPyConnection, source_path: str) -> bool:
    """View `src`: the source rows in the schema's types; True when it has a load_date column."""
    table = DeltaTable(source_path)
    files = table.file_uris()
    by_load_date = "load_date" in table.metadata().partition_columns
    if not files:  # an empty source gives empty tables, like the pipeline
        columns = ", ".join(f"NULL::{t} AS {c}" for c, t in SOURCE_COLUMNS.items())
        con.execute(f"CREATE TEMP VIEW src AS SELECT {columns}, NULL::TIMESTAMPTZ AS load_time, "
                    "NULL::DATE AS load_date WHERE false")
        return by_load_date
    # Partition values live in the directory names (sources/writer.py writes hive layout).
    reader = (f"read_parquet([{', '.join(_quote(f) for f in files)}], union_by_name = true, "
              + ("hive_partitioning = true, hive_types = {'load_date': 'DATE'})" if by_load_date
                 else "hive_partitioning = false)"))
    present = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()}
    selected = []
    for name, kind in SOURCE_COLUMNS.items():
        if name not in present:  # missing optional columns are typed nulls (conform_to_atomic)
            selected.append(f"NULL::{kind} AS {name}")
        elif kind == "VARCHAR":  # Snowplow exports write null as '' (conform_to_atomic)
            selected.append(f"NULLIF({name}, '') AS {name}")
        elif present[name] != kind:  # a bad cell becomes null, as Spark's try_cast
            selected.append(f"TRY_CAST({name} AS {kind}) AS {name}")
        else:
            selected.append(name)
    selected.append(f"{LOAD_TIME_SQL} AS load_time")  # the pipeline's own rule, as SQL text
    selected.append("load_date" if by_load_date else "NULL::DATE AS load_date")
    con.execute(f"CREATE TEMP VIEW src AS SELECT {', '.join(selected)} FROM {reader}")
    return by_load_date


def _create_base_events(con, settings, by_load_date: bool) -> None:
    """Table `base`: valid, deduplicated events loaded from the first load hour on."""
    # The backfill's one load window starts at the first hourly partition: start_date's hour.
    window_start = settings.start_date.astimezone(datetime.timezone.utc).replace(
        minute=0, second=0, microsecond=0)
    # Earlier copies are looked up in the days_late_allowed + 1 days before (assets/hourly.py).
    lookback_start = window_start - timedelta(days=settings.days_late_allowed + 1)
    # reader._read_delta prunes on load_date first, then filters on the load time.
    window_days = earlier_days = "true"
    if by_load_date:
        window_end_day = (window_start - timedelta(microseconds=1)).date() + timedelta(days=1)
        window_days = f"load_date >= DATE '{window_start.date()}'"
        earlier_days = (f"load_date >= DATE '{lookback_start.date()}' "
                        f"AND load_date < DATE '{window_end_day}'")
    params = {
        "window_start": window_start,
        "lookback_start": lookback_start,
        "app_ids": list(settings.app_ids),
        "days_late_allowed": settings.days_late_allowed,
    }
    con.execute(f"""
        CREATE TEMP TABLE base AS
        WITH valid AS (
            -- Other app ids are left out before validation, so they never compete as copies.
            SELECT * FROM src
            WHERE (len($app_ids) = 0 OR list_contains($app_ids, app_id))
              AND event_id IS NOT NULL AND domain_userid IS NOT NULL
              AND domain_sessionid IS NOT NULL AND derived_tstamp IS NOT NULL
              AND load_tstamp IS NOT NULL
              AND derived_tstamp <= load_tstamp + INTERVAL {MAX_FUTURE_SKEW_HOURS} HOUR
              -- sent_too_late only when both device timestamps are known
              AND NOT (dvce_sent_tstamp IS NOT NULL AND dvce_created_tstamp IS NOT NULL
                       AND dvce_sent_tstamp > dvce_created_tstamp + to_days($days_late_allowed::INTEGER))
        ),
        earlier AS (
            SELECT event_id FROM valid
            WHERE {earlier_days} AND load_time >= $lookback_start AND load_time < $window_start
        )
        SELECT event_id, domain_userid, domain_sessionid, event_name, derived_tstamp,
               load_tstamp, tr_total
        FROM valid
        WHERE {window_days} AND load_time >= $window_start
          -- A valid copy loaded before the window always wins over the window's copies.
          AND NOT EXISTS (SELECT 1 FROM earlier e WHERE e.event_id = valid.event_id)
        -- First loaded wins: load_tstamp, then collector_tstamp (nulls last). Spark then breaks
        -- ties with xxhash64 of the whole row, which DuckDB cannot reproduce; we order by the
        -- columns used downstream, so only copies equal in load and collector time but different
        -- in those columns could pick another winner.
        QUALIFY row_number() OVER (
            PARTITION BY event_id
            ORDER BY load_tstamp, collector_tstamp NULLS LAST, domain_userid, domain_sessionid,
                     derived_tstamp, event_name, tr_total NULLS LAST) = 1
    """, params)


def _create_sessions(con, settings) -> None:
    """Table `sessions`: start, user and kept-events limit of every session (sessions.py)."""
    con.execute("""
        CREATE TEMP TABLE sessions AS
        SELECT domain_sessionid,
               -- The user of the session's earliest event; event_id breaks derived_tstamp ties.
               arg_min(domain_userid, (derived_tstamp, event_id)) AS domain_userid,
               -- The start counts every base event: all event names, also before start_date.
               min(derived_tstamp) AS start_tstamp,
               min(derived_tstamp) + to_days($max_session_days::INTEGER) AS limit_tstamp
        FROM base
        GROUP BY domain_sessionid
    """, {"max_session_days": settings.max_session_days})


def _create_daily(con, settings) -> None:
    """Table `daily`: filtered_events aggregated per (event_date, domain_userid)."""
    con.execute("""
        CREATE TEMP TABLE daily AS
        WITH filtered AS (
            SELECT b.*,
                   -- event_date: the UTC day of derived_tstamp (the session time zone is UTC)
                   CAST(b.derived_tstamp AS DATE) AS event_date
            FROM base b LEFT JOIN sessions s USING (domain_sessionid)
            WHERE b.derived_tstamp >= $start_date
              AND (len($event_names) = 0 OR list_contains($event_names, b.event_name))
              -- The quarantine cut: events after session start + max_session_days are dropped.
              AND (s.limit_tstamp IS NULL OR b.derived_tstamp <= s.limit_tstamp)
        )
        SELECT event_date,
               domain_userid,  -- the event's own user, not the session's
               count(*) AS events,
               count(*) FILTER (WHERE event_name = 'page_view') AS page_views,
               count(*) FILTER (WHERE event_name = 'page_ping') AS page_pings,
               count(DISTINCT domain_sessionid) AS sessions,
               list_sort(list_distinct(list(domain_sessionid))) AS session_ids,  -- sorted, no nulls
               count(*) FILTER (WHERE event_name = 'transaction') AS transactions,
               COALESCE(sum(tr_total) FILTER (WHERE event_name = 'transaction'), 0)
                   ::DECIMAL(28,2) AS revenue,
               min(derived_tstamp) AS first_event_tstamp,
               max(derived_tstamp) AS last_event_tstamp
        FROM filtered
        GROUP BY event_date, domain_userid
    """, {"start_date": settings.start_date, "event_names": list(settings.event_names)})


def _attributes(con, settings, as_of: datetime.date) -> pa.Table:
    """One row per user of `daily`: lifetime and [as_of - N days, as_of) metrics (attributes.py)."""
    params = {
        "as_of": as_of,
        "days_7": as_of - timedelta(days=7),
        "days_30": as_of - timedelta(days=30),
        "start_date": settings.start_date,
    }
    # DuckDB sums BIGINT into HUGEINT: cast back to Spark's long. Spark's sum of
    # decimal(28,2) is decimal(38,2); lifetime_revenue is cast to decimal(28,2), the
    # window revenue is not.
    return con.sql("""
        WITH metrics AS (
            SELECT domain_userid,
                   min(event_date) AS first_event_date,
                   max(event_date) AS last_event_date,
                   count(DISTINCT event_date) AS days_active,
                   sum(events)::BIGINT AS lifetime_events,
                   sum(page_views)::BIGINT AS lifetime_page_views,
                   sum(transactions)::BIGINT AS lifetime_transactions,
                   sum(revenue)::DECIMAL(28,2) AS lifetime_revenue,
                   COALESCE(sum(page_views) FILTER (WHERE event_date >= $days_7 AND event_date < $as_of), 0)
                       ::BIGINT AS page_views_last_7_days,
                   COALESCE(sum(revenue) FILTER (WHERE event_date >= $days_30 AND event_date < $as_of), 0)
                       ::DECIMAL(38,2) AS revenue_last_30_days,
                   COALESCE(sum(events) FILTER (WHERE event_date >= $days_30 AND event_date < $as_of), 0)
                       ::BIGINT AS events_last_30_days
            FROM daily
            GROUP BY domain_userid
        ),
        -- Lifecycle sessions, not summed daily counts (a session crossing midnight is in two
        -- days), grouped by the session's user; sessions before start_date do not count.
        -- Distinct sessions over the window's days (one crossing midnight counts once).
        window_sessions AS (
            SELECT domain_userid, count(DISTINCT session_id) AS sessions_last_7_days
            FROM (SELECT domain_userid, unnest(session_ids) AS session_id FROM daily
                  WHERE event_date >= $days_7 AND event_date < $as_of)
            GROUP BY domain_userid
        ),
        lifetime AS (
            SELECT domain_userid, count(*) AS lifetime_sessions
            FROM sessions WHERE start_tstamp >= $start_date
            GROUP BY domain_userid
        )
        SELECT m.*, COALESCE(w.sessions_last_7_days, 0)::BIGINT AS sessions_last_7_days,
               COALESCE(l.lifetime_sessions, 0)::BIGINT AS lifetime_sessions,
               $as_of::DATE AS attributes_as_of
        FROM metrics m LEFT JOIN lifetime l USING (domain_userid)
                       LEFT JOIN window_sessions w USING (domain_userid)
        ORDER BY domain_userid
    """, params=params).to_arrow_table()


def duckdb_tables(source_path: str, settings, as_of: datetime.date,
                  threads: int | None = None) -> tuple[pa.Table, pa.Table]:
    """(daily_aggregates, attributes) of a full backfill of the source at `source_path`.

    `settings` is an incremental_assets.settings.Settings; `as_of` the attributes' as-of day
    (the pipeline's settings.as_of_date(now)); `threads` caps DuckDB's threads.
    """
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")  # event days and intervals are UTC, as in Spark
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        by_load_date = _create_source_view(con, source_path)
        _create_base_events(con, settings, by_load_date)
        _create_sessions(con, settings)
        _create_daily(con, settings)
        daily = con.sql("SELECT * FROM daily ORDER BY event_date, domain_userid").to_arrow_table()
        return daily, _attributes(con, settings, as_of)
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
