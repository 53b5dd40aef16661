"""The table store's interface, what every write returns, and the rules both engines share:
plain identifiers, commit retries, append tokens."""

from __future__ import annotations

import abc
import os
import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from incremental_assets.names import check_identifier
from resources.tables.column_types import check_column_types
from resources.tables.delta_log import (
    NoTableAt,
    add_actions,
    file_bytes_by_partition,
    load_table,
    read_delta_arrow,
    records_in,
    required_table,
    spark_schema,
)
from resources.tables.ranges import RowRange

# Commit conflicts (two writers touching the same rows, or creating the same table) are
# retried as a whole operation on a fresh snapshot, with exponential backoff and jitter.
MAX_COMMIT_ATTEMPTS = 8
FIRST_BACKOFF_SECONDS = 0.05

# An append token becomes the Delta transaction identifier (appId, version) of its commit;
# the version is a constant, so "token already recorded" means "already written".
APPEND_TOKEN_APP_ID_PREFIX = "incremental-assets:"
APPEND_TOKEN_TXN_VERSION = 1

# The most values (rows x columns) a `small` write collects to the driver: an hour of 10M events
# over 30 days is about 14,000 rows of 130 columns (1.8M values). A collected write holds its
# rows in the driver's memory twice (the JVM's Arrow batches, then Python's); a staged one never.
COLLECTED_VALUES_MAX = 5_000_000

# The size compaction fills its files to, with either engine (delta-rs's default; Spark's is 1 GB).
COMPACTED_FILE_BYTES = 100 * 1024 * 1024


def rows_collected_at_most(columns: int) -> int:
    """The most rows of `columns` columns a `small` write collects (more are staged)."""
    return max(1, COLLECTED_VALUES_MAX // max(1, columns))


def no_rows(spark, schema):
    """A DataFrame of `schema` with no rows that Spark's optimizer knows is empty (an empty local
    relation): joins, aggregates and collects over it are planned away, no job runs. One made
    from an empty list is an RDD that every query over it must run (0.2 to 0.3 s a query)."""
    return spark.createDataFrame([], schema).limit(0)


# replace_keys marks the source rows that delete their key rather than write it.
KEY_PRESENT = "_replace_keys_row_present"


@dataclass(frozen=True)
class WriteResult:
    rows_written: int
    version: int | None
    rows_deleted: int | None = None
    skipped: bool = False  # True when an idempotent append saw its token already


@dataclass(frozen=True)
class MaintenanceResult:
    """What one table's maintenance did: small files compacted, unreferenced files removed."""

    table: str
    files_before: int
    files_after: int
    files_compacted: int  # small files rewritten into fewer (still in the log's history)
    files_vacuumed: int  # files no version within the retention references, deleted from disk
    partitions_compacted: int | None = None  # partitions chosen for compaction; None: the table whole


def check_columns_present(available: Sequence[str], wanted: Sequence[str], what: str) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        raise ValueError(f"{what}: column(s) {missing} not found; columns are {list(available)}")


def replace_keys_source(df, keys, key: str):
    """replace_keys' merge source: df's rows with KEY_PRESENT true, and a row with only the key
    and KEY_PRESENT false for each of `keys` df has no row of. A full outer join on the key
    rather than a union with `keys` anti-joined to df: df appears once in the plan, so an
    unmaterialized df (attributes) is computed once (4 Spark jobs instead of 6)."""
    return (df.withColumn(KEY_PRESENT, F.lit(True))
            .join(keys.select(key).distinct(), key, "full_outer")
            .withColumn(KEY_PRESENT, F.coalesce(F.col(KEY_PRESENT), F.lit(False))))


def append_token_app_id(token: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError(f"append token must be a non-empty string, got {token!r}")
    return APPEND_TOKEN_APP_ID_PREFIX + token


class TableCreatedConcurrently(Exception):
    """Another writer created the table between our snapshot and our create: retry."""


def retry_on_conflict(operation: Callable[[], WriteResult], conflicts: tuple[type[BaseException], ...]) -> WriteResult:
    """Run a whole write (snapshot, checks, commit) again when its commit conflicts."""
    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        try:
            return operation()
        except conflicts:
            if attempt == MAX_COMMIT_ATTEMPTS:
                raise
            time.sleep(FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")


class TableStore(abc.ABC):
    """Delta tables under one warehouse root; see the module docstring.

    Every write but `delete_where_in` takes `small`: True when the caller expects few rows
    (an hour's, a few days'). An engine may then collect them to the driver rather than stage
    files (delta-rs does, up to `COLLECTED_VALUES_MAX` values; past that it stages them
    as usual); the result is the same either way.
    """

    engine_name: str

    def __init__(self, spark, root: str):
        self.spark = spark
        root = str(root)
        # Local roots become absolute so Spark and delta-rs resolve them the same way.
        self.root = root.rstrip("/") if "://" in root else os.path.abspath(root)

    def path(self, name: str) -> str:
        return f"{self.root}/{check_identifier(name, 'table name')}"

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """True when a Delta table exists at path(name)."""

    @abc.abstractmethod
    def read(self, name: str, columns: Sequence[str] | None = None):
        """The whole table as a Spark DataFrame (FileNotFoundError if it does not exist)."""

    @abc.abstractmethod
    def read_path(self, path: str, columns: Sequence[str] | None = None, version: int | None = None):
        """Every row of a Delta table outside the warehouse (e.g. the source), by path; at
        `version` when given."""

    @abc.abstractmethod
    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None,
                        version: int | None = None):
        """read_range for a Delta table outside the warehouse (e.g. the source), by path; at
        `version` when given (the version a run planned with)."""

    @abc.abstractmethod
    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        """Rows with start <= column < end (None: unbounded on that side).

        `column` is a timestamp or date column; bounds are tz-aware datetimes or dates (on a
        date column, midnight UTC datetimes too, e.g. a Dagster partition time window).
        """

    def replace_range(self, name: str, df, *, column: str, start, end,
                      partition_by: Sequence[str] | None = None, small: bool = False) -> WriteResult:
        """In one commit, delete the rows with start <= column < end and insert df (`replace`)."""
        return self.replace(name, df, rows=[RowRange(column, start, end)], partition_by=partition_by, small=small)

    @abc.abstractmethod
    def replace(self, name: str, df, *, rows: Sequence[RowRange],
                partition_by: Sequence[str] | None = None, small: bool = False) -> WriteResult:
        """In one commit, delete the rows any of `rows` selects and insert df.

        Every row of df must lie in the time range of one of `rows` (else ValueError naming the
        column and the first offending value, and nothing is written). Creates the table when
        missing, also from an empty df; partition_by applies only then. A failure leaves the
        old rows.
        """

    @abc.abstractmethod
    def replace_keys(self, name: str, df, *, key: str, keys, small: bool = False) -> WriteResult:
        """In one commit, delete the rows whose `key` is one of `keys` (a DataFrame with that
        column) and insert df: keys without a row in df are deleted. df's keys must be unique
        and not null (else ValueError). Creates the table from df when missing."""

    @abc.abstractmethod
    def merge(self, name: str, df, *, keys: Sequence[str],
              partition_by: Sequence[str] | None = None, small: bool = False) -> WriteResult:
        """Upsert by key: matched rows get all of df's columns, new keys are inserted.

        df's keys must be unique and not null (else ValueError). Added columns evolve the schema.
        """

    @abc.abstractmethod
    def append(self, name: str, df, *, token: str | None = None,
               partition_by: Sequence[str] | None = None, small: bool = False) -> WriteResult:
        """Append df; with a token, only once per token (skipped=True when already written)."""

    @abc.abstractmethod
    def overwrite(self, name: str, df, *, partition_by: Sequence[str] | None = None,
                  small: bool = False) -> WriteResult:
        """Replace the whole table (rows and schema) by df in one commit."""

    @abc.abstractmethod
    def delete_where_in(self, name: str, column: str, values: Sequence) -> WriteResult:
        """Delete the rows whose column equals one of values (no None; values never become SQL text unescaped)."""

    # Metadata comes from the Delta log through delta-rs, whichever engine wrote the table: the
    # delta-spark engine's Spark queries for them (detail, history) took 0.8 s a table.

    def version(self, name: str) -> int | None:
        """The table's current version, None when it does not exist."""
        table = load_table(self.path(name))
        return None if table is None else table.version()

    def describe(self, name: str) -> dict:
        """{"path", "version", "num_files", "size_bytes", "num_rows"}: metadata for materializations
        (num_rows from the Delta log's file statistics; None when a file has none)."""
        table = required_table(self.path(name))
        actions = add_actions(table)
        return {"path": self.path(name), "version": table.version(), "num_files": actions.num_rows,
                "size_bytes": pc.sum(actions["size_bytes"]).as_py() or 0, "num_rows": records_in(actions)}

    @abc.abstractmethod
    def compact(self, name: str, *, partitions: Sequence[str] | None = None) -> int:
        """Rewrite the table's small files into files of up to COMPACTED_FILE_BYTES (same rows,
        a commit that changes no data); with `partitions`, only the partitions whose first
        partition column has one of these values (none for an empty list). The delta-rs engine
        then writes a checkpoint of the log and sets `delta.checkpointInterval` on a table
        created without it (Spark checkpoints every 10 commits by default). Returns the number
        of files rewritten."""

    def file_bytes_by_partition(self, name: str) -> dict[str | None, list[int]] | None:
        """The sizes of the table's files per value of its first partition column (as text);
        None for an unpartitioned table. Read from the Delta log, without Spark."""
        return file_bytes_by_partition(required_table(self.path(name)))

    @abc.abstractmethod
    def vacuum(self, name: str, *, retention_hours: float) -> int:
        """Delete files that no table version of the last `retention_hours` references (removed
        by later commits, or written by a write that never committed). Returns how many."""

    def read_arrow(self, name: str, columns: Sequence[str] | None = None, filters=None) -> pa.Table:
        """Read through delta-rs only (no Spark): small tables.

        `filters` is a pyarrow DNF filter, e.g. [("status", "=", "done")], applied after the read.
        """
        data = read_delta_arrow(self.path(name), None if filters else columns)
        if data is None:
            raise NoTableAt(self.path(name))
        if filters:
            data = data.filter(pq.filters_to_expression(filters))
            return data.select(list(columns)) if columns else data
        return data

    def _check_column_types(self, name: str, df, what: str) -> None:
        """Refuse rows holding a column in a type the table's cannot hold (column_types), before
        anything is staged or written: either engine, the same error."""
        table = load_table(self.path(name))
        check_column_types(name, None if table is None else spark_schema(table), df.schema, what)

    def _check_partition_by(self, partition_by: Sequence[str] | None, columns: Sequence[str]) -> list[str]:
        partition_by = [check_identifier(c, "partition column") for c in (partition_by or [])]
        check_columns_present(columns, partition_by, "partition_by")
        return partition_by
