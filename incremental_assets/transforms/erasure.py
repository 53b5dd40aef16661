"""Erased users (docs/rules.md 1): the rows of an erased `domain_userid` or `user_id` are read
as if the source never held them, in every run from the erasure on.

An erased id is kept only as the SHA-256 of its value (`id_digest`), so the record of the
erasure holds no id; rows are matched by hashing their id columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# The columns an erasure names a user by (`forget --domain-userid / --user-id`).
ID_COLUMNS = ("domain_userid", "user_id")


def id_digest(value: str) -> str:
    """The SHA-256 of an id's UTF-8 bytes in lower-case hex: what Spark's sha2(column, 256) gives."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ErasedIds:
    """The digests of erased ids, per id column."""

    digests: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> "ErasedIds":
        """From (column, digest) pairs; a column not in ID_COLUMNS is a ValueError naming it."""
        by_column: dict[str, set[str]] = {}
        for column, digest in pairs:
            if column not in ID_COLUMNS:
                raise ValueError(f"an erasure names a user by {' or '.join(ID_COLUMNS)}, not {column!r}")
            by_column.setdefault(column, set()).add(digest)
        return cls({column: frozenset(values) for column, values in by_column.items()})

    def __bool__(self) -> bool:
        return any(self.digests.values())

    @property
    def all_digests(self) -> list[str]:
        """Every erased id's digest, whatever column named it."""
        return sorted({d for digests in self.digests.values() for d in digests})

    def matches(self, df: DataFrame) -> Column:
        """True for a row holding an erased id, false otherwise (never null)."""
        hits = [F.coalesce(F.sha2(F.col(column).cast("string"), 256).isin(sorted(digests)), F.lit(False))
                for column, digests in self.digests.items() if digests and column in df.columns]
        out = F.lit(False)
        for hit in hits:
            out = out | hit
        return out


def without_erased(rows: DataFrame, erased: ErasedIds) -> DataFrame:
    """`rows` but those holding an erased id (unchanged when nothing is erased)."""
    return rows.where(~erased.matches(rows)) if erased else rows


def holding_erased(rows: DataFrame, erased: ErasedIds) -> DataFrame:
    """The rows holding an erased id."""
    return rows.where(erased.matches(rows)) if erased else rows.limit(0)


def _erased_value(erased: ErasedIds):
    """True for a state's value entry that is an erased id (never null)."""
    digests = erased.all_digests
    return lambda entry: F.coalesce(F.sha2(entry["value"], 256).isin(digests), F.lit(False))


def states_holding_erased(states: DataFrame, erased: ErasedIds) -> DataFrame:
    """The attribute states of an erased user, and those holding an erased id as a value (an
    attribute that reads `user_id` keeps the ids it saw)."""
    if not erased:
        return states.limit(0)
    return states.where(erased.matches(states) | F.exists("value_counts", _erased_value(erased)))


def states_without_erased(states: DataFrame, erased: ErasedIds) -> DataFrame:
    """The states but an erased user's, each without the values that are an erased id; a state
    left with no value goes (it no longer counts any row)."""
    if not erased:
        return states
    keys = ("event_date", "domain_userid", "attribute")
    values = (without_erased(states, erased).select(*keys, F.explode("value_counts").alias("entry"))
              .where(~_erased_value(erased)(F.col("entry"))))
    # Collected again as the states are built: a list of entries that are never null, as the table holds.
    return values.groupBy(*keys).agg(F.sort_array(F.collect_list("entry")).alias("value_counts"))
