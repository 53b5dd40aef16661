"""Writes whose rows never pass through the driver (the delta-rs engine, local warehouses).

Spark writes the rows as Parquet under `<root>/_staging/<id>/`, in the table's hive layout;
the files are moved into the table directory (a rename: same filesystem) and delta-rs commits
them as add actions, with statistics read from the Parquet footers, in one transaction with
the remove actions of the files they replace. Nothing is read back or rewritten on the driver,
so the write costs one Spark job, however large, and scales with the executors.

A process that dies between the move and the commit leaves files that no version references:
readers never see them, and `maintenance` (vacuum) deletes them once past its retention.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql.types import ByteType, DateType, IntegerType, LongType, ShortType

from resources.tables.delta_log import HIVE_NULL_PARTITION, spark_can_read_files
from resources.tables.parquet_stats import add_action
from resources.tables.staging import (
    STATS_COLUMNS_PROPERTY,
    StagedSet,
    StagingIncomplete,
    StagingNotVisible,
    check_staged_rows,
    sweep_stale_staging,
    write_parquet_counted,
)

# Every direct replace commits this Delta transaction id: delta-rs refuses a commit when a
# concurrent one recorded the same id, so two replaces of one table never both land on the
# same snapshot (the loser retries on a fresh one). A predicate overwrite gets that from its
# predicate; a commit of file actions has no predicate to check.
REPLACE_APP_ID = "incremental-assets:replace"

# The commit-info key that finds a commit in the history.
_WRITE_ID = "incrementalAssetsWriteId"

# Partition values Spark writes as directory names exactly as Delta stores them.
_PLAIN_PARTITION_TYPES = (DateType, ByteType, ShortType, IntegerType, LongType)


def writes_directly(spark, root: str, table: DeltaTable | None, df_schema, table_schema,
                    partition_by: Sequence[str]) -> bool:
    """True when a replace can go straight to files: a local warehouse, Spark writing
    microsecond timestamps, a table Spark reads as plain files, the same columns and types
    as the table (a new column needs delta-rs's schema evolution), and partition columns
    (the table's, or `partition_by` for a new table) whose directory names need no escaping."""
    if "://" in root or spark.conf.get("spark.sql.parquet.outputTimestampType") != "TIMESTAMP_MICROS":
        return False
    types = {f.name: f.dataType for f in df_schema.fields}
    if table is not None:
        if not spark_can_read_files(table) or {f.name: f.dataType for f in table_schema.fields} != types:
            return False
        partition_by = table.metadata().partition_columns
    return all(isinstance(types.get(c), _PLAIN_PARTITION_TYPES) for c in partition_by)


class SparkFiles:
    """A DataFrame's rows written by Spark as Parquet under `<root>/_staging/<id>`, then moved
    into a table's directory. Use as `with SparkFiles(...) as files:`; leaving the block deletes
    what was not moved, and `move_back()` returns moved files whose commit did not land.

    `written_as`: the staged set `df` reads (resources.materialized), if it is one. Laid out by
    the same partition columns, its files are the rows already written: they are linked here
    (a hard link: no copy, and the set keeps its own until released) instead of written again."""

    def __init__(self, df, root: str, partition_by: Sequence[str], *, written_as: StagedSet | None = None):
        sweep_stale_staging(root)
        self.partition_by = list(partition_by)
        self._dir = f"{root}/_staging/{uuid.uuid4().hex}"
        linked = written_as is not None and written_as.partition_by == tuple(self.partition_by) \
            and _linked(written_as.path, self._dir)
        try:
            written = written_as.rows if linked else write_parquet_counted(df, self._dir, self.partition_by)
        except BaseException:
            self.close()  # a failed Spark job can leave part files behind
            raise
        if not os.path.isdir(self._dir):
            raise StagingNotVisible(self._dir)
        self.relative_paths, self.num_rows = [], 0
        for file in sorted(Path(self._dir).rglob("*.parquet")):
            if file.name.startswith("."):
                continue
            rows = pq.ParquetFile(file).metadata.num_rows
            if rows:  # an empty one (an empty DataFrame's) would only clutter the table
                self.relative_paths.append(str(file.relative_to(self._dir)))
                self.num_rows += rows
        self._moved: list[tuple[Path, Path]] = []  # (from, to)
        try:  # the footers must hold every row Spark wrote: a replace must never commit fewer
            check_staged_rows(self._dir, written, self.num_rows)
        except StagingIncomplete:
            self.close()
            raise

    def _dataset(self, schema: pa.Schema) -> ds.Dataset:
        """The staged rows (partition columns from the directory names) in `schema`'s types."""
        partitioning = ds.HivePartitioning(pa.schema([schema.field(c) for c in self.partition_by]),
                                           null_fallback=HIVE_NULL_PARTITION) if self.partition_by else None
        files = [f"{self._dir}/{p}" for p in self.relative_paths]
        return ds.dataset(files, schema=schema, format="parquet", partitioning=partitioning,
                          partition_base_dir=self._dir)

    def columns(self, names: Sequence[str], schema: pa.Schema) -> pa.Table:
        """These columns of every row, in `schema`'s types: for checks before the commit."""
        wanted = pa.schema([schema.field(n) for n in names])
        if not self.relative_paths:  # no rows (Spark writes no file for an empty partitioned frame)
            return wanted.empty_table()
        return self._dataset(schema).to_table(columns=list(names)).cast(wanted)

    def reader(self, schema: pa.Schema) -> pa.RecordBatchReader:
        """All staged rows as a stream in `schema`, for delta-rs to write itself (not moved yet)."""
        if not self.relative_paths:
            return schema.empty_table().to_reader()
        batches = (batch.cast(schema) for batch in self._dataset(schema).to_batches(columns=schema.names))
        return pa.RecordBatchReader.from_batches(schema, batches)

    def move_into(self, table_path: str, stats_columns: Sequence[str]) -> list[AddAction]:
        """Move the files into the table directory (not yet part of any version) and return
        their add actions."""
        actions = []
        for relative in self.relative_paths:
            source, target = Path(self._dir, relative), Path(table_path, relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)
            self._moved.append((source, target))
            actions.append(add_action(Path(table_path), relative, self.partition_by, stats_columns))
        return actions

    def move_back(self) -> None:
        """Return moved files to the staging directory (their commit did not land)."""
        for source, target in reversed(self._moved):
            try:
                os.rename(target, source)
            except FileNotFoundError:
                pass
        self._moved = []

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "SparkFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _linked(source_dir: str, target_dir: str) -> bool:
    """Hard links under `target_dir` to the Parquet files under `source_dir`, at the same
    relative paths (none for a set without rows); False, with nothing left under `target_dir`,
    where the filesystem refuses."""
    try:
        os.makedirs(target_dir)
        for file in Path(source_dir).rglob("*.parquet"):
            if file.name.startswith("."):
                continue
            target = Path(target_dir, file.relative_to(source_dir))
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(file, target)
    except OSError:
        shutil.rmtree(target_dir, ignore_errors=True)
        return False
    return True


class StagedFiles:
    """Spark's staged files seen as staged rows (`reader()`, `num_rows`, `schema`), for a write
    that delta-rs makes itself."""

    def __init__(self, files: SparkFiles, schema: pa.Schema):
        self._files, self.schema, self.num_rows = files, schema, files.num_rows

    def reader(self) -> pa.RecordBatchReader:
        return self._files.reader(self.schema)


def table_stats_columns(table: DeltaTable) -> list[str]:
    configured = table.metadata().configuration.get(STATS_COLUMNS_PROPERTY)
    if configured:
        return configured.split(",")
    return [f.name for f in table.schema().fields][:32]  # Delta's default: the first 32 columns


def remove_actions(files: pa.Table) -> list[RemoveAction]:
    """Remove actions for these add actions (rows of `delta_log.add_actions`)."""
    now = int(time.time() * 1000)
    partition_columns = [c for c in files.column_names if c.startswith("partition.")]
    removes = []
    for row in files.select(["path", "size_bytes", *partition_columns]).to_pylist():
        values = {c.removeprefix("partition."): _partition_text(row[c]) for c in partition_columns}
        removes.append(RemoveAction(row["path"], True, now, row["size_bytes"], values))
    return removes


def _partition_text(value) -> str | None:
    return None if value is None else value.isoformat() if hasattr(value, "isoformat") else str(value)


def commit_replace(table: DeltaTable, removes: list[RemoveAction], adds: list[AddAction]) -> int:
    """One commit: the removes and the adds, refused if another replace landed meanwhile.
    Returns the commit's version (delta-rs may land it after other, non-conflicting commits)."""
    marker = uuid.uuid4().hex
    read_version = table.version()
    table.create_write_transaction(
        [*removes, *adds], mode="append", schema=table.schema(),
        partition_by=table.metadata().partition_columns,
        commit_properties=CommitProperties(custom_metadata={_WRITE_ID: marker},
                                           app_transactions=[Transaction(REPLACE_APP_ID, read_version + 1)]))
    latest = DeltaTable(table.table_uri)
    for commit in latest.history(limit=latest.version() - read_version):
        if commit.get(_WRITE_ID) == marker:
            return commit["version"]
    raise RuntimeError(f"{table.table_uri}: the replace committed but its commit is not in the history")
