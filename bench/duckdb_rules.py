"""The pipeline's rules (docs/rules.md) as DuckDB SQL: one function per rule, each creating in a
DuckDB connection the view or table named after the pipeline's table it computes.

Shared by the DuckDB baselines of bench/duckdb_reference.py, so that each rule has one
definition here. The pipeline's names and constants are imported, not copied; the module that
owns each rule in the pipeline is named beside it.

Created, in order (each from the ones before):
- `src` (view): the source rows of the read window in the atomic-events types;
- `checked` (view): `src` rows of the app ids, with `reject_reason`; `rejected_events` and
  `valid` (views) split it;
- `base_events` (table) and `event_copies` (view);
- `sessions_lifecycle_manifest` (table) and `quarantined_sessions` (view);
- `filtered_events` (view), `daily_aggregates` (table), `attributes` (view).

Where a full backfill stops at the current hour (loads), this reads every load from
start_date's hour on: a benchmark source holds no future rows. It starts from an empty
warehouse, like the benchmark's rebuild: no copy recorded before the window takes part.
"""

from __future__ import annotations

import datetime
from datetime import timedelta

import duckdb
from deltalake import DeltaTable

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
from incremental_assets.sources.schema import ATOMIC_EVENTS_SCHEMA, LOAD_TIME_SQL, PARTITION_COLUMN, REQUIRED_COLUMNS
from incremental_assets.state.progress import first_load_hour
from incremental_assets.transforms.base_events import COPY_COLUMNS, MAX_FUTURE_SKEW_HOURS
from incremental_assets.transforms.filtered_events import ROW_DIGEST, SESSION_FIELDS

# Spark's type names (DataType.simpleString) in DuckDB; decimals keep their precision.
_DUCKDB_TYPES = {"string": "VARCHAR", "timestamp": "TIMESTAMP WITH TIME ZONE", "date": "DATE", "int": "INTEGER",
                 "double": "DOUBLE", "boolean": "BOOLEAN"}


def _duckdb_type(spark_type) -> str:
    name = spark_type.simpleString()
    return name.upper() if name.startswith("decimal") else _DUCKDB_TYPES[name]


# The atomic-events columns in their schema order and types (sources/schema.py); load_date is
# derived, not read.
SOURCE_TYPES = {field.name: _duckdb_type(field.dataType) for field in ATOMIC_EVENTS_SCHEMA.fields
                if field.name != PARTITION_COLUMN}
# The source columns the rules read: all that the final tables need (a narrower read).
RULE_COLUMNS = ("app_id", "collector_tstamp", "dvce_created_tstamp", "event_id", "user_id", "domain_userid",
                "domain_sessionidx", "tr_total", "dvce_sent_tstamp", "domain_sessionid", "derived_tstamp",
                "event_name", "load_tstamp")


def quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _in(column: str, values: tuple[str, ...]) -> str:
    """`column` is one of `values`; every row when `values` is empty (as the settings mean it)."""
    return f"{column} IN ({', '.join(quote(v) for v in values)})" if values else "true"


def connect(threads: int | None = None, temp_directory: str | None = None,
            memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB in UTC; `threads`, `memory_limit` (e.g. '8GB'): DuckDB's defaults
    (every core, 80% of the machine's memory) when None; what goes past the limit spills to
    `temp_directory`."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # event days and intervals are UTC, as in Spark's session
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = {quote(memory_limit)}")
    if temp_directory:
        con.execute(f"SET temp_directory = {quote(temp_directory)}")
    return con


def create_source_view(con, source_path: str, settings, columns: tuple[str, ...] | None = None) -> None:
    """View `src`: the source rows loaded from the first load hour on, conformed to the atomic
    schema (sources/schema.py conform_to_atomic, sources/reader.py), plus `load_time`.

    `columns`: only these source columns (the rules' own, RULE_COLUMNS, for the final tables);
    None: every schema column, then any other column of the source unchanged, as the pipeline
    carries them into base_events.
    """
    # A backfill's one load window starts at the first load hour: start_date's hour.
    window_start = first_load_hour(settings)
    table = DeltaTable(source_path)
    by_load_date = PARTITION_COLUMN in table.metadata().partition_columns
    # reader._read_delta prunes the source's load_date partitions first, then filters on the load time.
    files = table.file_uris(file_pruning_predicate=[(PARTITION_COLUMN, ">=", window_start.date())]) \
        if by_load_date else table.file_uris()
    wanted = {name: SOURCE_TYPES[name] for name in columns or SOURCE_TYPES}
    if not files:  # an empty source gives empty tables, like the pipeline
        typed = ", ".join(f'NULL::{kind} AS "{name}"' for name, kind in wanted.items())
        con.execute(f"CREATE TEMP VIEW src AS SELECT {typed}, NULL::DATE AS load_date, "
                    "NULL::TIMESTAMPTZ AS load_time WHERE false")
        return
    reader = f"read_parquet([{', '.join(quote(f) for f in files)}], union_by_name = true, hive_partitioning = false)"
    present = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()}
    selected = [_conformed(name, present.get(name), kind) for name, kind in wanted.items()]
    # conform_to_atomic derives load_date from the load time (the partition value is not read).
    selected.append(f"CAST({LOAD_TIME_SQL} AS DATE) AS {PARTITION_COLUMN}")
    if columns is None:  # other columns pass through unchanged, after the schema's
        selected += [f'"{name}"' for name in present if name not in SOURCE_TYPES and name != PARTITION_COLUMN]
    selected.append(f"{LOAD_TIME_SQL} AS load_time")  # the pipeline's own rule, as SQL text
    con.execute(f"""
        CREATE TEMP VIEW src AS
        SELECT {', '.join(selected)} FROM {reader}
        WHERE {LOAD_TIME_SQL} >= TIMESTAMPTZ '{window_start.isoformat()}'
    """)


def _conformed(name: str, present_kind: str | None, kind: str) -> str:
    """One source column in its schema type (sources/schema.py _conformed)."""
    if present_kind is None:  # a missing schema column is a typed null
        return f'NULL::{kind} AS "{name}"'
    column = f'"{name}"'
    if present_kind == "VARCHAR":  # Snowplow exports write null as ''
        column = f"NULLIF({column}, '')"
        if kind != "VARCHAR":  # surrounding blanks are noise in an export
            column = f"trim({column})"
    if present_kind != kind:  # a bad cell becomes null, as Spark's try_cast
        column = f"TRY_CAST({column} AS {kind})"
    return f'{column} AS "{name}"'


def create_checked_rows(con, settings) -> None:
    """Views `checked` (rows of the app ids, with `reject_reason`), `rejected_events` and `valid`
    (transforms/base_events.py reject_reason and validate)."""
    checks = [(f"{c} IS NULL", f"null {c}") for c in REQUIRED_COLUMNS]
    checks.append((f"derived_tstamp > load_tstamp + to_hours({MAX_FUTURE_SKEW_HOURS})",
                   "derived_tstamp after load_tstamp"))
    if not settings.allow_null_dvce_tstamps:
        checks.append(("dvce_created_tstamp IS NULL OR dvce_sent_tstamp IS NULL", "null dvce_tstamp"))
    # Device times missing: the collector time stands in; with all three null the row is not late.
    checks.append((f"coalesce(dvce_sent_tstamp, collector_tstamp) > coalesce(dvce_created_tstamp, collector_tstamp) "
                   f"+ to_days({int(settings.days_late_allowed)})", "sent_too_late"))
    reason = "CASE " + " ".join(f"WHEN {condition} THEN {quote(label)}" for condition, label in checks) + " END"
    # Other app ids are left out before validation: neither kept nor rejected.
    con.execute(f"CREATE TEMP VIEW checked AS SELECT *, {reason} AS reject_reason FROM src "
                f"WHERE {_in('app_id', settings.app_ids)}")
    con.execute(f"""
        CREATE TEMP VIEW {REJECTED_EVENTS} AS
        SELECT * EXCLUDE (load_time), date_trunc('hour', load_time) AS load_hour_tstamp
        FROM checked WHERE reject_reason IS NOT NULL
    """)
    row = [f'"{name}"' for name, *_ in con.execute("DESCRIBE SELECT * EXCLUDE (load_time) FROM src").fetchall()]
    # The tie-break of copies loaded at the same instant: a hash of the whole row. Spark's is
    # xxhash64, which DuckDB does not have: its own hash, as a long like Spark's (one bit less).
    con.execute(f"""
        CREATE TEMP VIEW valid AS
        SELECT * EXCLUDE (reject_reason), (hash({', '.join(row)}) >> 1)::BIGINT AS copy_hash
        FROM checked WHERE reject_reason IS NULL
    """)


def create_base_events(con, settings) -> None:
    """Table `base_events` and view `event_copies` (transforms/base_events.py copies, kept_copies).

    A copy is kept unless a copy of the same event_id that ranks before it (load_tstamp, then
    collector_tstamp nulls last, then the row hash) was loaded less than dedupe_lookback_days
    before it; identical rows once. The copy just before it in rank order was loaded last of
    all better copies, so it alone decides.
    """
    con.execute(f"""
        CREATE TEMP TABLE {BASE_EVENTS} AS
        SELECT * EXCLUDE (copy_hash, load_time) REPLACE (CAST(load_tstamp AS DATE) AS load_date)
        FROM valid
        WINDOW copies AS (PARTITION BY event_id ORDER BY load_tstamp, collector_tstamp NULLS LAST, copy_hash)
        QUALIFY coalesce(load_tstamp >= lag(load_tstamp) OVER copies + to_days({int(settings.dedupe_lookback_days)}),
                         true)
    """)
    con.execute(f"""
        CREATE TEMP VIEW {EVENT_COPIES} AS
        SELECT DISTINCT {', '.join(COPY_COLUMNS)}, CAST(load_tstamp AS DATE) AS load_date FROM valid
    """)


def create_sessions(con, settings) -> None:
    """Table `sessions_lifecycle_manifest` and view `quarantined_sessions`: one row per session
    of base_events, from all its events (transforms/sessions.py)."""
    limit_days = int(settings.max_session_days)
    con.execute(f"""
        CREATE TEMP TABLE {LIFECYCLE} AS
        WITH events AS (
            SELECT domain_sessionid, domain_userid, user_id, app_id, domain_sessionidx, event_id,
                   derived_tstamp, load_tstamp,
                   -- Kept: no later than the session's start + max_session_days (its limit).
                   derived_tstamp <= min(derived_tstamp) OVER (PARTITION BY domain_sessionid)
                                     + to_days({limit_days}) AS kept
            FROM {BASE_EVENTS}
        ),
        session_rows AS (
            SELECT domain_sessionid,
                   -- Of the earliest event (derived_tstamp, then event_id), null or not.
                   arg_min_null(domain_userid, (derived_tstamp, event_id)) AS domain_userid,
                   -- user_id and domain_sessionidx: of the kept events only (rules.md section 4).
                   arg_max(user_id, (derived_tstamp, event_id)) FILTER (WHERE kept AND user_id IS NOT NULL)
                       AS user_id,
                   arg_min_null(app_id, (derived_tstamp, event_id)) AS app_id,
                   min(domain_sessionidx) FILTER (WHERE kept) AS domain_sessionidx,
                   min(derived_tstamp) AS start_tstamp,
                   max(derived_tstamp) FILTER (WHERE kept) AS end_tstamp,
                   count(*) FILTER (WHERE kept) AS event_count,
                   min(load_tstamp) AS first_load_tstamp,
                   max(load_tstamp) FILTER (WHERE kept) AS last_load_tstamp,
                   min(load_tstamp) FILTER (WHERE NOT kept) AS quarantined_at
            FROM events GROUP BY domain_sessionid
        )
        -- the columns in the order of sessions.py's LIFECYCLE_COLUMNS
        SELECT * EXCLUDE (quarantined_at), quarantined_at IS NOT NULL AS is_quarantined, quarantined_at
        FROM session_rows
    """)
    con.execute(f"""
        CREATE TEMP VIEW {QUARANTINED} AS
        SELECT domain_sessionid, domain_userid, start_tstamp, end_tstamp, event_count, quarantined_at
        FROM {LIFECYCLE} WHERE is_quarantined
    """)


def create_filtered_events(con, settings) -> None:
    """View `filtered_events`: relevant events with their session's fields and event_date
    (transforms/filtered_events.py)."""
    session_fields = ", ".join(f"s.{src} AS {dst}" for src, dst in SESSION_FIELDS.items())
    con.execute(f"""
        CREATE TEMP VIEW {FILTERED_EVENTS} AS
        -- row_digest: DuckDB's own hash of the row (Spark's is xxhash64), 31 bits as ours
        SELECT f.*, (hash(f) % 2147483648)::BIGINT AS {ROW_DIGEST} FROM (
        SELECT b.*, {session_fields},
               -- event_date: the UTC day of derived_tstamp (the session time zone is UTC)
               CAST(b.derived_tstamp AS DATE) AS event_date
        FROM {BASE_EVENTS} b LEFT JOIN {LIFECYCLE} s USING (domain_sessionid)
        WHERE b.derived_tstamp >= TIMESTAMPTZ '{settings.start_date.isoformat()}'
          AND {_in('b.event_name', settings.event_names)}
          -- The quarantine cut: events after session start + max_session_days are dropped.
          AND (s.start_tstamp IS NULL
               OR b.derived_tstamp <= s.start_tstamp + to_days({int(settings.max_session_days)}))) f
    """)


def create_daily(con) -> None:
    """Table `daily_aggregates`: filtered_events per (event_date, domain_userid)
    (transforms/daily_aggregates.py)."""
    con.execute(f"""
        CREATE TEMP TABLE {DAILY_AGGREGATES} AS
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
        FROM {FILTERED_EVENTS}
        GROUP BY event_date, domain_userid
    """)


def create_attributes(con, as_of: datetime.date) -> None:
    """View `attributes`: one row per user with a daily row before `as_of`, its lifetime and
    [as_of - N days, as_of) metrics (transforms/attributes.py)."""
    def day(d: datetime.date) -> str:
        return f"DATE '{d.isoformat()}'"

    # The windows [as_of - N days, as_of): their upper bound is the WHERE below.
    last_7 = f"event_date >= {day(as_of - timedelta(days=7))}"
    last_30 = f"event_date >= {day(as_of - timedelta(days=30))}"

    def distinct_sessions(where: str = "true") -> str:
        # From the days' session lists: a session over midnight counts once.
        return f"COALESCE(len(list_distinct(flatten(list(session_ids) FILTER (WHERE {where})))), 0)::BIGINT"

    # DuckDB sums BIGINT into HUGEINT: cast back to Spark's long. Both revenue columns are
    # decimal(28,2) (`type: decimal` in the default declaration).
    con.execute(f"""
        CREATE TEMP VIEW {ATTRIBUTES} AS
        SELECT domain_userid,
               min(event_date) AS first_event_date,
               max(event_date) AS last_event_date,
               count(DISTINCT event_date) AS days_active,
               sum(events)::BIGINT AS lifetime_events,
               sum(page_views)::BIGINT AS lifetime_page_views,
               sum(transactions)::BIGINT AS lifetime_transactions,
               sum(revenue)::DECIMAL(28,2) AS lifetime_revenue,
               {distinct_sessions()} AS lifetime_sessions,
               COALESCE(sum(page_views) FILTER (WHERE {last_7}), 0)::BIGINT AS page_views_last_7_days,
               {distinct_sessions(last_7)} AS sessions_last_7_days,
               COALESCE(sum(revenue) FILTER (WHERE {last_30}), 0)::DECIMAL(28,2) AS revenue_last_30_days,
               COALESCE(sum(events) FILTER (WHERE {last_30}), 0)::BIGINT AS events_last_30_days,
               {day(as_of)} AS attributes_as_of
        FROM {DAILY_AGGREGATES}
        WHERE event_date < {day(as_of)}
        GROUP BY domain_userid
    """)


def create_all(con, source_path: str, settings, as_of: datetime.date,
               columns: tuple[str, ...] | None = None) -> None:
    """Every view and table above, in rule order."""
    create_source_view(con, source_path, settings, columns)
    create_checked_rows(con, settings)
    create_base_events(con, settings)
    create_sessions(con, settings)
    create_filtered_events(con, settings)
    create_daily(con)
    create_attributes(con, as_of)
