"""Manifest item ids: `asset/partition key`, and a catch-up unit's `asset@app_ids/partition key`."""

from __future__ import annotations


def item_id(asset: str, partition_key: str | None, unit: str | None = None) -> str:
    """`asset/key`. A run scoped to some app ids (a catch-up: units, as in LinkedIn's watermarks) claims items of
    its own, `asset@app_ids/key`: its failure fail-locks those apps' work on the hour alone."""
    return f"{asset}{'@' + unit if unit else ''}/{partition_key or 'all'}"


def split_item_id(item: str) -> tuple[str, str]:
    """(asset, key); the asset part keeps a unit's `@app_ids` (`unit_of` splits it)."""
    asset, _, key = item.partition("/")
    return asset, key


def unit_of(item: str) -> tuple[str, str, str | None]:
    """(asset, key, unit): the unit is the app ids of a scoped run's item, else None."""
    asset, key = split_item_id(item)
    asset, _, unit = asset.partition("@")
    return asset, key, unit or None
