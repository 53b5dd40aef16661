"""A write's rows computed once by Spark, for delta-rs to write: staged as Parquet files
(`StagedRows`), or, when the writer expects few, collected to the driver as Arrow
(`collected_rows`): one Spark job and no files, where a staged write costs a Parquet job, a
listing and a read back (0.1 to 0.3 s of a warm hour's write of a few hundred rows)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from resources.object_store import filesystem as object_filesystem
from resources.object_store import is_object_store
from resources.tables.delta_log import HIVE_NULL_PARTITION, NEW_TABLE_CONFIGURATION
from resources.tables.interface import rows_collected_at_most


def delta_field(field: pa.Field) -> pa.Field:
    """The field as delta-rs stores it: nullable (a NOT NULL column would block later
    evolution), timestamps as timestamp[us, UTC] (the Delta `timestamp` type)."""
    kind = field.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        kind = pa.timestamp("us", tz="UTC")
    return pa.field(field.name, kind, nullable=True, metadata=field.metadata)


# A write's staged files live seconds to minutes; anything this old was left by a process
# that died mid-write (a finished or refused write removes its own).
STALE_STAGING_SECONDS = 24 * 3600


def sweep_stale_staging(staging_root: str, *, older_than: float = STALE_STAGING_SECONDS) -> list[str]:
    """Remove staged-write directories under `<staging_root>/_staging` last modified more than
    `older_than` seconds ago; return their names. Readers never see staged files, so this
    only reclaims space; young directories may belong to a write in progress and are kept."""
    if is_object_store(staging_root):
        return _sweep_stale_objects(staging_root, older_than)
    staging = os.path.join(staging_root, "_staging")
    try:
        entries = list(os.scandir(staging))
    except FileNotFoundError:
        return []
    cutoff = time.time() - older_than
    removed = []
    for entry in entries:
        try:
            stale = entry.stat(follow_symlinks=False).st_mtime < cutoff
        except FileNotFoundError:  # removed meanwhile by its own writer
            continue
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _sweep_stale_objects(staging_root: str, older_than: float) -> list[str]:
    """The same on an object store, where a directory is its objects' common prefix: a staged
    write is stale when its newest object is."""
    filesystem, staging = object_filesystem(f"{staging_root}/_staging")
    newest: dict[str, float] = {}
    for info in filesystem.get_file_info(pafs.FileSelector(staging, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.mtime is not None:
            name = info.path[len(staging):].lstrip("/").split("/", 1)[0]
            newest[name] = max(newest.get(name, 0.0), info.mtime.timestamp())
    cutoff = time.time() - older_than
    removed = sorted(name for name, at in newest.items() if at < cutoff)
    for name in removed:
        delete_staged_dir(f"{staging_root}/_staging/{name}")
    return removed


def delete_staged_dir(path: str) -> None:
    """Remove a staged directory, local or on an object store, whatever is left of it."""
    if not is_object_store(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    filesystem, inner = object_filesystem(path)
    try:
        filesystem.delete_dir(inner)
    except (FileNotFoundError, OSError):
        pass


class StagingNotVisible(RuntimeError):
    """Spark wrote the staged rows where this process cannot read them."""

    def __init__(self, path: str):
        super().__init__(
            f"Spark wrote staged rows to {path}, but this process does not see that "
            "directory. With Spark Connect (or any driver that is not this process) the server and "
            "this process must see the warehouse at the same path: a shared filesystem mounted at "
            "the same place on both, or an object-store warehouse (s3://..., abfss://...)")


class StagingIncomplete(RuntimeError):
    """The staged files hold fewer or more rows than Spark wrote: refuse to commit them."""

    def __init__(self, path: str, written: int, found: int):
        super().__init__(
            f"Spark wrote {written} row(s) for this write under {path}, but the Parquet files this "
            f"process finds there hold {found}: nothing was committed. On a cluster, executors on other "
            "hosts write to their own disks unless the warehouse is one shared filesystem or an object "
            "store; otherwise a file went missing between the write and the commit")


def write_parquet_counted(df, path: str, partition_by: Sequence[str] = ()) -> int:
    """Spark writes `df` as Parquet under `path`; returns how many rows it wrote, observed on
    the write itself (no second job), to check the files against before committing them."""
    observation = Observation()
    writer = (df.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode("error")
              .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"))
    (writer.partitionBy(*partition_by) if partition_by else writer).parquet(path)
    return int(observation.get["rows"])


@dataclass(frozen=True)
class StagedSet:
    """Rows a step had Spark write once as Parquet files, to read several times and maybe
    write to a table (resources.materialized): where, laid out how, how many."""

    path: str
    partition_by: tuple[str, ...]
    rows: int


# The staged sets by the DataFrame that reads them: a write handed one of those DataFrames can
# take its files as they are rather than have Spark write the same rows again.
_staged_sets: "weakref.WeakKeyDictionary[object, StagedSet]" = weakref.WeakKeyDictionary()


def remember_staged_set(df, staged: StagedSet) -> None:
    _staged_sets[df] = staged


def staged_set_of(df) -> StagedSet | None:
    """The staged set `df` reads, if it is one (and not released)."""
    try:
        return _staged_sets.get(df)
    except TypeError:  # not weakly referable (a stand-in for a DataFrame): no set
        return None


def forget_staged_set(df) -> StagedSet | None:
    return _staged_sets.pop(df, None)


def check_staged_rows(path: str, written: int, found: int) -> None:
    if found != written:
        raise StagingIncomplete(path, written, found)


class StagedRows:
    """A DataFrame's rows for one write, computed once.

    Spark writes them as Parquet files under `<root>/_staging/<id>` (a local path or an object
    store) and delta-rs reads them back as a stream of Arrow batches, so memory stays bounded
    however large the write (collecting the result to the driver ran a 10M-event backfill out
    of heap). Use as `with StagedRows(...) as data:`; leaving the block removes the files,
    whether the write succeeded or not. A DataFrame that reads a staged set (`staged_set_of`)
    is not written again: its files are read as they are, and left to the set's release.
    """

    def __init__(self, df, staging_root: str):
        reused = staged_set_of(df)
        self._owned = reused is None
        if reused is not None:
            self._path, written, partition_by = reused.path, reused.rows, reused.partition_by
        else:
            sweep_stale_staging(staging_root)
            self._path, partition_by = f"{staging_root}/_staging/{uuid.uuid4().hex}", ()
            try:
                written = write_parquet_counted(df, self._path)
            except BaseException:
                self.close()  # a failed Spark job can leave part files behind
                raise
        filesystem, inner = object_filesystem(self._path)
        found = filesystem.get_file_info(inner).type == pafs.FileType.Directory
        if not found and not is_object_store(self._path):
            raise StagingNotVisible(self._path)
        # The DataFrame's own types and column order (a set's partition columns are directory names).
        arrow_schema = to_arrow_schema(df.schema, timezone="UTC")
        partitioning = ds.HivePartitioning(pa.schema([arrow_schema.field(c) for c in partition_by]),
                                           null_fallback=HIVE_NULL_PARTITION) if partition_by else None
        # On an object store a directory exists only through its objects: none, no rows.
        self._dataset = ds.dataset(inner, filesystem=filesystem, format="parquet",
                                   partitioning=partitioning) if found else None
        # The files' types where there are files, in the DataFrame's column order.
        types = self._dataset.schema if found and self._dataset.files else arrow_schema
        self.schema = pa.schema([delta_field(types.field(name)) for name in arrow_schema.names])
        self.column_names = self.schema.names
        self.num_rows = self._dataset.count_rows() if found else 0
        try:
            check_staged_rows(self._path, written, self.num_rows)
        except StagingIncomplete:
            self.close()
            raise

    def _batches(self):
        return self._dataset.to_batches(columns=self.column_names) if self._dataset is not None else iter(())

    def reader(self) -> pa.RecordBatchReader:
        """A fresh stream of all rows in `schema` (each commit attempt reads its own)."""
        batches = (batch.cast(self.schema) for batch in self._batches())
        return pa.RecordBatchReader.from_batches(self.schema, batches)

    def columns(self, names: Sequence[str]) -> pa.Table:
        """Only these columns, in memory (for checks on keys and range columns)."""
        subset = pa.schema([self.schema.field(n) for n in names])
        if self._dataset is None:
            return subset.empty_table()
        return self._dataset.to_table(columns=list(names)).cast(subset)

    def close(self) -> None:
        if self._owned:
            delete_staged_dir(self._path)

    def __enter__(self) -> "StagedRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CollectedRows:
    """A write's rows in the driver's memory, with `StagedRows`'s interface."""

    def __init__(self, data: pa.Table):
        self.schema = pa.schema([delta_field(f) for f in data.schema])
        self.column_names = self.schema.names
        self.num_rows = data.num_rows
        self._data = data.cast(self.schema)

    def reader(self) -> pa.RecordBatchReader:
        return self._data.to_reader()

    def columns(self, names: Sequence[str]) -> pa.Table:
        return self._data.select(list(names))

    def close(self) -> None:
        self._data = None

    def __enter__(self) -> "CollectedRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# What a delta-rs write streams in: rows staged as files, or collected.
RowsToWrite = StagedRows | CollectedRows


def collected_rows(df) -> CollectedRows | None:
    """`df`'s rows collected as Arrow in one job; None (nothing kept) when they are more than
    `COLLECTED_VALUES_MAX` values: the caller stages them instead, and the wrong guess cost one
    job (at most that many rows, collected and dropped)."""
    max_rows = rows_collected_at_most(len(df.columns))
    data = df.limit(max_rows + 1).toArrow()
    return CollectedRows(data) if data.num_rows <= max_rows else None


STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"


def stats_columns(schema: pa.Schema) -> list[str]:
    """The columns whose min/max statistics a new table keeps: every time and integer column,
    wherever it sits (Delta's default covers only the first 32 columns, and range reads skip
    files by these statistics)."""
    return [f.name for f in schema
            if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type) or pa.types.is_integer(f.type)]


def new_table_configuration(schema: pa.Schema) -> dict[str, str]:
    """The table properties of a table created with `schema`: its statistics' columns, and a
    checkpoint every few commits (`NEW_TABLE_CONFIGURATION`)."""
    columns = stats_columns(schema)
    return {**NEW_TABLE_CONFIGURATION, **({STATS_COLUMNS_PROPERTY: ",".join(columns)} if columns else {})}


def check_unique_non_null_keys(data: pa.Table, keys: Sequence[str], what: str) -> None:
    """Refuse a write whose keys would match a target row twice or never (`what` names it)."""
    for key in keys:
        if data.column(key).null_count:
            raise ValueError(f"{what}: key column {key!r} has null values (null keys never match)")
    counts = data.group_by(list(keys)).aggregate([([], "count_all")])
    duplicates = counts.filter(pc.greater(counts["count_all"], 1))
    if duplicates.num_rows:
        first = {k: duplicates.column(k)[0].as_py() for k in keys}
        raise ValueError(f"{what}: keys {list(keys)} are not unique in the data; e.g. {first} "
                         f"appears {duplicates['count_all'][0].as_py()} times")
