"""A source data file's load-time statistics where the Delta log keeps none: from the file's
Parquet footer.

Writers index the first columns only (Delta's default is 32) or those a table property lists;
`load_tstamp` sits near the end of Snowplow's atomic schema, so many lakes' logs hold no bounds
for it. The footer of almost every Parquet file does, and a data file never changes under its
name: each footer is read once per process.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from resources.object_store import filesystem
from resources.tables.parquet_stats import footer_bounds


class LoadStatistics(NamedTuple):
    """A file's bounds and null counts of load_tstamp and collector_tstamp (None: not kept)."""

    low: object = None
    high: object = None
    nulls: int | None = None
    c_low: object = None
    c_high: object = None
    c_nulls: int | None = None


def places_every_row(stats: LoadStatistics) -> bool:
    """Whether the statistics bound every row's load time: load_tstamp's, and collector_tstamp's
    too when some load_tstamp is null (such rows load at their collector time)."""
    return stats.nulls is not None and (stats.nulls == 0 or stats.c_nulls is not None)


@functools.lru_cache(maxsize=1 << 16)
def footer_load_statistics(uri: str, load_columns: tuple[str, str]) -> LoadStatistics | None:
    """The load-time statistics of the data file at `uri` from its Parquet footer
    (`load_columns`: the two columns' names in the file); None when the file cannot be read or
    its footer does not place every row either (some writers keep no bounds of INT96
    timestamps)."""
    try:
        store, inner = filesystem(uri)
        metadata = pq.ParquetFile(inner, filesystem=store).metadata
    except (OSError, pa.ArrowException):
        return None
    bounds = footer_bounds(metadata, load_columns)
    load, collector = (bounds.get(column, (None, None, None)) for column in load_columns)
    stats = LoadStatistics(load[1], load[2], load[0], collector[1], collector[2], collector[0])
    return stats if places_every_row(stats) else None
