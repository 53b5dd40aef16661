"""What every asset shares: its input check, run-state metadata and the schema metadata of a DataFrame."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from dagster import FreshnessPolicy, MetadataValue, TableColumn, TableRecord, TableSchema

from incremental_assets.names import RUN_LIMITS_TAG, RUN_STATE_TAG
from incremental_assets.partitions import LOAD_SETTINGS
from incremental_assets.settings import Settings
from incremental_assets.transforms.erasure import ID_COLUMNS
from resources.warehouse import WarehouseResource


def require_table(warehouse: WarehouseResource, table: str, step: str, remedy: str) -> None:
    """Fail before the step claims its manifest items when its input table does not exist yet:
    nothing was processed, so nothing is left fail-locked for an operator to resolve."""
    if not warehouse.tables.exists(table):
        raise FileNotFoundError(f"{step}: input table {table!r} does not exist yet in "
                                f"{warehouse.settings.warehouse_root}: {remedy}")


# How long an asset may go without a materialization before the UI warns, then fails it (the
# daemon evaluates it): a stalled pipeline, or a source with no new rows, turns red. With the
# sensor on, each closed load hour with data is processed within minutes; event days are rebuilt
# as new rows land, and attributes at least once a day (attributes_schedule).
HOURLY_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(hours=6), warn_window=timedelta(hours=2))
DAILY_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(hours=30), warn_window=timedelta(hours=26))


# What the catalog shows of every asset: its owners, the rules it is computed with (a changed
# rules digest marks every asset's code as changed, as a new code version), and its table.
OWNERS = list(LOAD_SETTINGS.asset_owners)
CODE_VERSION = LOAD_SETTINGS.rules_digest()


def table_metadata(table: str, location: str | None = None) -> dict[str, Any]:
    """The table's name and URI, under Dagster's keys (the catalog's table name and link)."""
    location = location or LOAD_SETTINGS.table_path(table)
    return {"dagster/table_name": table,
            "dagster/uri": location if "://" in location else Path(location).as_uri()}


def run_state_metadata(context, settings: Settings) -> dict[str, Any]:
    """The run's state and limits in words, as the sensor or CLI that launched it described them,
    and the digest of the rules it ran with: small, so on every partition the run materialized."""
    tags = context.run.tags
    keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else []
    if RUN_LIMITS_TAG in tags:
        text = tags[RUN_LIMITS_TAG]
    elif keys:
        text = f"Manual run: partitions {keys[0]} to {keys[-1]} ({len(keys)} partitions)"
    else:
        text = "Manual run"
    return {"run_limits": MetadataValue.md(text), "run_state": tags.get(RUN_STATE_TAG, "MANUAL"),
            "rules_digest": settings.rules_digest()}


def settings_metadata(settings: Settings) -> dict[str, Any]:
    """The settings the run ran with (environment, defaults and resource config resolved)."""
    return {"settings": MetadataValue.json(settings.describe())}


def on_last_partition(context, metadata: dict[str, Any], asset_key: str | None = None) -> None:
    """Metadata that is the same for every partition of the run (the column schema, the
    settings, a preview) goes on the run's last partition only.

    Dagster copies an output's metadata onto the materialization of each partition: a week's
    backfill stored base_events' 15 KB column schema 168 times, and storing those events took
    most of the run on a sparse history. The UI reads an asset's columns from its latest
    materialization, which is the last partition's."""
    context.add_asset_metadata(metadata, asset_key=asset_key, partition_key=context.partition_keys[-1])


# What the modeled tables' own columns mean (docs/rules.md); atomic columns keep Snowplow's names.
COLUMN_DESCRIPTIONS = {
    "event_id": "The event's id: one row per event (the first-loaded copy wins).",
    "load_tstamp": "When the loader wrote the row: the load hour partitions follow it.",
    "load_date": "load_tstamp's UTC day (storage partition).",
    "domain_sessionid": "The session (Snowplow's client-side session id).",
    "domain_userid": "The user (Snowplow's first-party cookie id).",
    "event_date": "The event's UTC day (derived_tstamp): the daily partitions follow it.",
    "start_tstamp": "The session's first event (derived_tstamp).",
    "end_tstamp": "The session's last event within start + max_session_days.",
    "event_count": "Events of the session within start + max_session_days.",
    "first_load_tstamp": "When the session's first event was loaded.",
    "last_load_tstamp": "When the session's latest kept event was loaded.",
    "is_quarantined": "Longer than max_session_days: later events are left out of filtered_events.",
    "quarantined_at": "Load time of the session's first event past start + max_session_days.",
    "events": "Filtered events of the user that day.",
    "sessions": "Distinct sessions of the user that day.",
    "session_ids": "Those sessions' ids (sorted): distinct counts over many days come from them.",
    "revenue": "Sum of tr_total of the day's transactions.",
    "attributes_as_of": "The day the last-N-days metrics are counted back from.",
    "attribute_versions": "The declared attributes (name@version) this row was computed with.",
}


def schema_metadata(df, descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The column schema, each column described (`descriptions` add to COLUMN_DESCRIPTIONS)."""
    described = {**COLUMN_DESCRIPTIONS, **(descriptions or {})}
    columns = [TableColumn(name=c.name, type=c.type, description=described.get(c.name)) for c in _columns(df)]
    return {"dagster/column_schema": TableSchema(columns=columns)}


# Dagster's event log keeps metadata for good and `forget` cannot erase it: a preview leaves out
# every column that names a user or their session.
NOT_PREVIEWED = frozenset({*ID_COLUMNS, "domain_sessionid", "network_userid"})


def preview_metadata(rows: list, schema) -> dict[str, Any]:
    """Rows already collected (a few, of `schema`, a StructType) as a table in the
    materialization, without ids."""
    shown = [field for field in schema.fields if field.name not in NOT_PREVIEWED]
    records = [TableRecord({f.name: (v if isinstance(v, (int, float, bool)) or v is None else str(v))
                            for f in shown for v in [row[f.name]]}) for row in rows]
    columns = [TableColumn(name=f.name, type=f.dataType.simpleString()) for f in shown]
    return {"preview": MetadataValue.table(records, schema=TableSchema(columns=columns))}


def _columns(df) -> list[TableColumn]:
    return [TableColumn(name=f.name, type=f.dataType.simpleString()) for f in df.schema.fields]
