"""What every asset shares: run-state metadata and the schema metadata of a DataFrame."""

from __future__ import annotations

from typing import Any

from dagster import MetadataValue, TableColumn, TableSchema

from incremental_assets.names import RUN_LIMITS_TAG, RUN_STATE_TAG


def run_state_metadata(context) -> dict[str, Any]:
    """The run's state and limits in words, as the sensor or CLI that launched it described them."""
    tags = context.run.tags
    keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else []
    if RUN_LIMITS_TAG in tags:
        text = tags[RUN_LIMITS_TAG]
    elif keys:
        text = f"Manual run: partitions {keys[0]} to {keys[-1]} ({len(keys)} partitions)"
    else:
        text = "Manual run"
    return {"run_limits": MetadataValue.md(text), "run_state": tags.get(RUN_STATE_TAG, "MANUAL")}


def schema_metadata(df) -> dict[str, Any]:
    columns = [TableColumn(name=f.name, type=f.dataType.simpleString()) for f in df.schema.fields]
    return {"dagster/column_schema": TableSchema(columns=columns)}
