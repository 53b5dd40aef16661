"""Deterministic randomness for the sample generator: every value is a function of (seed,
salt, a row's numbers) through `xxhash64`, as Spark columns (no Python per row)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import LongType


def seeded_hash(seed: int, salt: str, *keys: Column) -> Column:
    """A 64-bit hash of `keys`, different for every (seed, salt).

    The seed and salt are folded into one number in Python (crc32 is stable across runs),
    which keeps the per-row work and the generated code small."""
    salt_number = zlib.crc32(f"{seed}/{salt}".encode())
    return F.xxhash64(*keys, F.lit(salt_number))


def uniform(seed: int, salt: str, *keys: Column) -> Column:
    """A uniform double in [0, 1), fixed by (seed, salt, keys)."""
    return F.shiftrightunsigned(seeded_hash(seed, salt, *keys), 11).cast("double") * (1.0 / (1 << 53))


def between(u: Column, low: int, high: int | Column) -> Column:
    """An integer in [low, high) from a uniform `u`."""
    return (F.lit(low) + F.floor(u * (F.lit(high) - F.lit(low)))).cast(LongType())


def weighted_index(u: Column, weights: Sequence[float]) -> Column:
    """Index 0..len-1 chosen with the given weights (they need not sum to 1)."""
    total = sum(weights)
    cumulative, expr = 0.0, None
    for index, weight in enumerate(weights[:-1]):
        cumulative += weight / total
        expr = F.when(u < cumulative, index) if expr is None else expr.when(u < cumulative, index)
    return F.lit(len(weights) - 1) if expr is None else expr.otherwise(len(weights) - 1)


def choose(index: Column, values: Sequence[Any]) -> Column:
    """values[index] for a 0-based index column."""
    return F.element_at(F.array(*[F.lit(v) for v in values]), (index + 1).cast("int"))


def lookup(column: Column, mapping: dict[str, str]) -> Column:
    """mapping[column] as a CASE expression (null for anything else)."""
    expr = None
    for key, value in mapping.items():
        expr = F.when(column == key, value) if expr is None else expr.when(column == key, value)
    return expr


def hex16(seed: int, salt: str, *keys: Column) -> Column:
    return F.lpad(F.lower(F.hex(seeded_hash(seed, salt, *keys))), 16, "0")


def uuid_like(seed: int, salt: str, *keys: Column) -> Column:
    """A UUID-shaped id (Snowplow ids are UUIDs), fixed by (seed, salt, keys)."""
    digits = F.concat(hex16(seed, salt, *keys), hex16(seed, salt + "/2", *keys))
    return F.concat_ws(
        "-",
        F.substring(digits, 1, 8),
        F.substring(digits, 9, 4),
        F.substring(digits, 13, 4),
        F.substring(digits, 17, 4),
        F.substring(digits, 21, 12),
    )
