"""Delta table store: one small interface, two engines (DESIGN.md section 4).

Every table of the pipeline is a Delta Lake table under one warehouse root, addressed by a
plain name (`root/name`). The pipeline only talks to `TableStore`:

- read a whole table or a half-open range `[start, end)` of a time column, as a Spark DataFrame;
- replace such a range atomically (delete the range and insert the new rows in one commit);
- merge by key, append with an idempotency token, overwrite, delete rows by value;
- table version and metadata; a Spark-free Arrow read for small tables and sensors.

Engines:

- `DeltaRsTableStore` ("delta-rs", the embedded default): the Delta log and every commit go
  through delta-rs (`deltalake`); Spark only computes. Reads list the active files with
  delta-rs and let Spark read the Parquet files natively; writes collect the Spark
  DataFrame to Arrow and hand it to delta-rs. Needs no JVM jars.
- `DeltaSparkTableStore` ("delta-spark"): native Delta inside Spark, for sessions that load
  the Delta jars and extension (clusters, or any machine whose Spark reaches Maven).

`table_store(spark, root, engine)` picks one ("auto": delta-spark when the session has a
loadable Delta extension, else delta-rs).
"""

from __future__ import annotations

import abc
import datetime as dt
import functools
import json
import operator
import os
import random
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

UTC = dt.timezone.utc
ENGINES = ("auto", "delta-rs", "delta-spark")
DELTA_EXTENSION_CLASS = "io.delta.sql.DeltaSparkSessionExtension"

# Table, column and partition names end up in paths and SQL: only plain identifiers.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")

# Commit conflicts (two writers touching the same rows, or creating the same table) are
# retried as a whole operation on a fresh snapshot, with exponential backoff and jitter.
MAX_COMMIT_ATTEMPTS = 8
FIRST_BACKOFF_SECONDS = 0.05

# An append token becomes the Delta transaction identifier (appId, version) of its commit;
# the version is a constant, so "token already recorded" means "already written".
APPEND_TOKEN_APP_ID_PREFIX = "incremental-assets:"
APPEND_TOKEN_TXN_VERSION = 1

# Range columns: Delta/Spark type names that a time range can be taken on.
_RANGE_TYPES = ("timestamp", "date")


@dataclass(frozen=True)
class Scan:
    """One table read as planned from the Delta log: which files Spark was given to read."""

    table: str
    files: int
    bytes: int  # sum of the files' sizes; Spark reads less when it prunes columns and row groups
    at: float  # time.time() when the read was planned


_scan_recorders: list[list[Scan]] = []


class recording_scans:
    """`with recording_scans() as scans:` collects a Scan for every delta-rs-engine read in
    this process (the benchmark attributes bytes read to assets with it). Off otherwise."""

    def __enter__(self) -> list[Scan]:
        self.scans: list[Scan] = []
        _scan_recorders.append(self.scans)
        return self.scans

    def __exit__(self, *exc) -> None:
        _scan_recorders.remove(self.scans)


def _record_scan(path: str, actions: pa.Table) -> None:
    if _scan_recorders:
        size = pc.sum(actions["size_bytes"]).as_py() or 0  # null when no file is left
        scan = Scan(path.rstrip("/").rsplit("/", 1)[-1], actions.num_rows, int(size), time.time())
        for scans in _scan_recorders:
            scans.append(scan)


@dataclass(frozen=True)
class WriteResult:
    rows_written: int
    version: int | None
    rows_deleted: int | None = None
    skipped: bool = False  # True when an idempotent append saw its token already


def check_identifier(value: str, what: str = "name") -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"{what} must be a plain identifier [A-Za-z0-9_]+, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------
# Time ranges: bounds, checks and literals shared by both engines
# ---------------------------------------------------------------------------------------


def _plain_datetime(value: dt.datetime) -> dt.datetime:
    """A plain UTC datetime (also from subclasses such as pendulum's, which Spark and pyarrow
    may not recognise)."""
    utc = value.astimezone(UTC)
    return dt.datetime(utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                       utc.microsecond, tzinfo=UTC)


def _normalise_bound(value: Any, column_type: str, column: str, side: str):
    """A range bound as the Python value the column compares with (UTC datetime or date)."""
    if value is None:
        return None
    if column_type == "timestamp":
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError(
                    f"range {side} for timestamp column {column!r} must be timezone-aware "
                    f"(UTC), got naive {value!r}"
                )
            return _plain_datetime(value)
        if isinstance(value, dt.date):
            return dt.datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif column_type == "date":
        if isinstance(value, dt.datetime):
            # A partition time window gives midnight datetimes; anything else is ambiguous.
            utc = _plain_datetime(value) if value.tzinfo else value
            if utc.time() != dt.time(0):
                raise ValueError(
                    f"range {side} for date column {column!r} must be a date or a midnight "
                    f"UTC datetime, got {value!r}"
                )
            return dt.date(utc.year, utc.month, utc.day)
        if isinstance(value, dt.date):
            return dt.date(value.year, value.month, value.day)
    else:
        raise ValueError(
            f"column {column!r} has type {column_type!r}; ranges are supported on "
            f"{' and '.join(_RANGE_TYPES)} columns only"
        )
    raise ValueError(f"range {side} for column {column!r} must be a datetime or date, got {value!r}")


def _normalise_range(column: str, column_type: str, start, end):
    lo = _normalise_bound(start, column_type, column, "start")
    hi = _normalise_bound(end, column_type, column, "end")
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"empty range on {column!r}: start {lo} is not before end {hi}")
    return lo, hi


def _spark_range_condition(column: str, lo, hi):
    """Spark Column for lo <= column < hi (None = unbounded); literals bound, not formatted."""
    from pyspark.sql import functions as F

    condition = F.col(column).isNotNull()
    if lo is not None:
        condition = condition & (F.col(column) >= F.lit(lo))
    if hi is not None:
        condition = condition & (F.col(column) < F.lit(hi))
    return condition


def _timestamp_iso_utc(value: dt.datetime) -> str:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _quote_string(value: str) -> str:
    # Standard SQL: a quote inside a literal is doubled; nothing else is special.
    return "'" + value.replace("'", "''") + "'"


def _delta_rs_literal(value: Any, column_type: str, column: str) -> str:
    """A delta-rs (DataFusion) SQL literal for `value` compared with a column of this type."""
    if column_type == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is not None:
        # A bare TIMESTAMP '...' literal is tz-naive nanoseconds and does not compare with
        # delta-rs's timestamp[us, UTC] columns; cast explicitly to the column's Arrow type.
        return f"arrow_cast('{_timestamp_iso_utc(value)}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if column_type == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    if column_type == "string" and isinstance(value, str):
        return _quote_string(value)
    if column_type in ("byte", "short", "integer", "long") and isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    if column_type == "boolean" and isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    raise ValueError(f"cannot compare column {column!r} of type {column_type!r} with {value!r}")


def _delta_rs_range_predicate(column: str, column_type: str, lo, hi) -> str:
    parts = [f'"{column}" IS NOT NULL']
    if lo is not None:
        parts.append(f'"{column}" >= {_delta_rs_literal(lo, column_type, column)}')
    if hi is not None:
        parts.append(f'"{column}" < {_delta_rs_literal(hi, column_type, column)}')
    return " AND ".join(parts)


def _spark_sql_range_predicate(column: str, column_type: str, lo, hi) -> str:
    """Spark SQL text for lo <= column < hi (delta-spark's replaceWhere takes a string)."""

    def literal(value):
        if column_type == "timestamp":
            return f"TIMESTAMP '{_timestamp_iso_utc(value)}'"  # explicit zone: session tz ignored
        return f"DATE '{value.isoformat()}'"

    parts = [f"`{column}` IS NOT NULL"]
    if lo is not None:
        parts.append(f"`{column}` >= {literal(lo)}")
    if hi is not None:
        parts.append(f"`{column}` < {literal(hi)}")
    return " AND ".join(parts)


def _out_of_range_error(column: str, lo, hi, value) -> ValueError:
    return ValueError(
        f"replace_range: every row must have {lo} <= {column} < {hi} (None = unbounded); "
        f"column {column!r} has a row outside the range: first offending value {value}"
    )


def _check_arrow_rows_in_range(data: pa.Table, column: str, lo, hi) -> None:
    values = data.column(column)
    inside = pc.is_valid(values)
    if lo is not None:
        inside = pc.and_kleene(inside, pc.greater_equal(values, pa.scalar(lo, type=values.type)))
    if hi is not None:
        inside = pc.and_kleene(inside, pc.less(values, pa.scalar(hi, type=values.type)))
    outside = pc.invert(pc.fill_null(inside, False))
    if pc.any(outside).as_py():
        first = pc.index(outside, True).as_py()
        raise _out_of_range_error(column, lo, hi, values[first].as_py())


def _spark_type_name(schema, column: str, what: str) -> str:
    """Delta/Spark type name ("timestamp", "date", ...) of a column in a Spark StructType."""
    for field in schema.fields:
        if field.name == column:
            return field.dataType.typeName()
    raise ValueError(f"{what}: column {column!r} not found; columns are {schema.names}")


def _check_columns_present(available: Sequence[str], wanted: Sequence[str], what: str) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        raise ValueError(f"{what}: column(s) {missing} not found; columns are {list(available)}")


def _check_unique_non_null_keys(data: pa.Table, keys: Sequence[str]) -> None:
    for key in keys:
        if data.column(key).null_count:
            raise ValueError(f"merge: key column {key!r} has null values (null keys never match)")
    counts = data.group_by(list(keys)).aggregate([([], "count_all")])
    duplicates = counts.filter(pc.greater(counts["count_all"], 1))
    if duplicates.num_rows:
        first = {k: duplicates.column(k)[0].as_py() for k in keys}
        raise ValueError(f"merge: keys {list(keys)} are not unique in the data; e.g. {first} "
                         f"appears {duplicates['count_all'][0].as_py()} times")


def _append_token_app_id(token: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError(f"append token must be a non-empty string, got {token!r}")
    return APPEND_TOKEN_APP_ID_PREFIX + token


class _TableCreatedConcurrently(Exception):
    """Another writer created the table between our snapshot and our create: retry."""


def _retry_on_conflict(operation: Callable[[], WriteResult], conflicts: tuple[type[BaseException], ...]) -> WriteResult:
    """Run a whole write (snapshot, checks, commit) again when its commit conflicts."""
    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        try:
            return operation()
        except conflicts:
            if attempt == MAX_COMMIT_ATTEMPTS:
                raise
            time.sleep(FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------------------


class TableStore(abc.ABC):
    """Delta tables under one warehouse root; see the module docstring."""

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
    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None):
        """read_range for a Delta table outside the warehouse (e.g. the source), by path."""

    @abc.abstractmethod
    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        """Rows with start <= column < end (None: unbounded on that side).

        `column` is a timestamp or date column; bounds are tz-aware datetimes or dates (on a
        date column, midnight UTC datetimes too, e.g. a Dagster partition time window).
        """

    @abc.abstractmethod
    def replace_range(self, name: str, df, *, column: str, start, end,
                      partition_by: Sequence[str] | None = None) -> WriteResult:
        """In one commit, delete the rows with start <= column < end and insert df.

        Every row of df must lie in the range (else ValueError naming the column and the
        first offending value, and nothing is written). Creates the table when missing, also
        from an empty df; partition_by applies only then. A failure leaves the old rows.
        """

    @abc.abstractmethod
    def merge(self, name: str, df, *, keys: Sequence[str],
              partition_by: Sequence[str] | None = None) -> WriteResult:
        """Upsert by key: matched rows get all of df's columns, new keys are inserted.

        df's keys must be unique and not null (else ValueError). Added columns evolve the schema.
        """

    @abc.abstractmethod
    def append(self, name: str, df, *, token: str | None = None,
               partition_by: Sequence[str] | None = None) -> WriteResult:
        """Append df; with a token, only once per token (skipped=True when already written)."""

    @abc.abstractmethod
    def overwrite(self, name: str, df, *, partition_by: Sequence[str] | None = None) -> WriteResult:
        """Replace the whole table (rows and schema) by df in one commit."""

    @abc.abstractmethod
    def delete_where_in(self, name: str, column: str, values: Sequence) -> WriteResult:
        """Delete the rows whose column equals one of values (no None; values never become SQL text unescaped)."""

    @abc.abstractmethod
    def version(self, name: str) -> int | None:
        """The table's current version, None when it does not exist."""

    @abc.abstractmethod
    def describe(self, name: str) -> dict:
        """{"path", "version", "num_files", "size_bytes"}: metadata for materializations."""

    def read_arrow(self, name: str, columns: Sequence[str] | None = None, filters=None) -> pa.Table:
        """Read through delta-rs only (no Spark): small tables and sensors.

        `filters` is a pyarrow/deltalake DNF filter, e.g. [("status", "=", "done")].
        """
        table = _load_delta_rs(self.path(name))
        if table is None:
            raise FileNotFoundError(f"no Delta table at {self.path(name)}")
        columns = list(columns) if columns else None
        if _spark_can_read_files(table):
            return table.to_pyarrow_table(columns=columns, filters=filters)
        # The pyarrow dataset path refuses deletion vectors and column mapping; scan handles them.
        data = pa.RecordBatchReader.from_stream(table.scan(columns=columns)).read_all()
        data = _without_view_types(data)
        return data.filter(pq.filters_to_expression(filters)) if filters else data

    def _check_partition_by(self, partition_by: Sequence[str] | None, columns: Sequence[str]) -> list[str]:
        partition_by = [check_identifier(c, "partition column") for c in (partition_by or [])]
        _check_columns_present(columns, partition_by, "partition_by")
        return partition_by


# ---------------------------------------------------------------------------------------
# delta-rs engine
# ---------------------------------------------------------------------------------------

# Reader features whose tables Spark reads correctly as plain Parquet files.
_PLAIN_PARQUET_READER_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
# Delta stores min/max timestamp statistics truncated to milliseconds.
_TIMESTAMP_STATS_SLACK = dt.timedelta(milliseconds=1)
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _load_delta_rs(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def _spark_can_read_files(table: DeltaTable) -> bool:
    """True when the table's active Parquet files, read as they are, are its rows.

    Column mapping renames physical columns and deletion vectors hide rows: both need a
    Delta reader.
    """
    protocol = table.protocol()
    if protocol.min_reader_version == 2:  # reader version 2 means column mapping
        return False
    if table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none":
        return False
    return set(protocol.reader_features or []) <= _PLAIN_PARQUET_READER_FEATURES


def _spark_unescape(text: str) -> str:
    # Spark decodes each %XX of a partition directory as one character (not UTF-8).
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def _spark_parses_partition_dirs(relative_paths: list[str], partition_columns: list[str]) -> bool:
    """True when Spark's partition discovery yields exactly the values delta-rs wrote.

    delta-rs percent-encodes values as UTF-8 (e.g. 'ü' -> %C3%BC) while Spark decodes %XX
    byte-wise; only where both decodings agree may Spark parse the directory names.
    """
    for relative_path in relative_paths:
        directories = relative_path.split("/")[:-1]
        if len(directories) != len(partition_columns):
            return False
        for directory, column in zip(directories, partition_columns):
            key, equals, encoded = directory.partition("=")
            if key != column or not equals:
                return False
            if encoded == _HIVE_NULL:
                continue
            try:
                if _spark_unescape(encoded) != unquote(encoded, errors="strict"):
                    return False
            except UnicodeDecodeError:
                return False
    return True


def _spark_schema(table: DeltaTable):
    """The table's Spark schema: Delta's schema JSON is Spark's StructType JSON."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table.schema().to_json()))


def _without_view_types(data: pa.Table) -> pa.Table:
    """delta-rs scans return string/binary views; cast them to the plain Arrow types."""
    fields = []
    for field in data.schema:
        if pa.types.is_string_view(field.type):
            field = field.with_type(pa.string())
        elif pa.types.is_binary_view(field.type):
            field = field.with_type(pa.binary())
        fields.append(field)
    return data.cast(pa.schema(fields))


def _delta_field(field: pa.Field) -> pa.Field:
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
    only reclaims disk; young directories may belong to a write in progress and are kept."""
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


class StagedRows:
    """A DataFrame's rows for one write, computed once.

    Local warehouses: Spark writes them as Parquet files under `<root>/_staging/<id>` and
    delta-rs reads them back as a stream of Arrow batches, so memory stays bounded however
    large the write (collecting the result to the driver ran a 10M-event backfill out of
    heap). Remote warehouses: collected to Arrow in memory. Use as `with StagedRows(...) as
    data:`; leaving the block removes the files, whether the write succeeded or not.
    """

    def __init__(self, df, staging_root: str | None):
        self._path = None
        if staging_root is None:
            self._table: pa.Table | None = df.toArrow()
            self._dataset = None
            source_schema = self._table.schema
        else:
            sweep_stale_staging(staging_root)
            self._path = f"{staging_root}/_staging/{uuid.uuid4().hex}"
            try:
                df.write.mode("error").parquet(self._path)
            except BaseException:
                self.close()  # a failed Spark job can leave part files behind
                raise
            self._dataset = ds.dataset(self._path, format="parquet")
            self._table = None
            source_schema = self._dataset.schema if self._dataset.files else df.limit(0).toArrow().schema
        self.schema = pa.schema([_delta_field(f) for f in source_schema])
        self.column_names = self.schema.names
        self.num_rows = self._table.num_rows if self._table is not None else self._dataset.count_rows()

    def reader(self) -> pa.RecordBatchReader:
        """A fresh stream of all rows in `schema` (each commit attempt reads its own)."""
        if self._table is not None:
            return self._table.cast(self.schema).to_reader()
        batches = (batch.cast(self.schema) for batch in self._dataset.to_batches())
        return pa.RecordBatchReader.from_batches(self.schema, batches)

    def columns(self, names: Sequence[str]) -> pa.Table:
        """Only these columns, in memory (for checks on keys and range columns)."""
        subset = pa.schema([self.schema.field(n) for n in names])
        table = self._table.select(list(names)) if self._table is not None else \
            self._dataset.to_table(columns=list(names))
        return table.cast(subset)

    def close(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)

    def __enter__(self) -> "StagedRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stats_configuration(data: StagedRows) -> dict[str, str] | None:
    """Keep min/max statistics of every time column, wherever it sits: Delta's default covers
    only the first 32 columns, and range reads skip files by these statistics."""
    columns = [f.name for f in data.schema
               if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type) or pa.types.is_integer(f.type)]
    return {"delta.dataSkippingStatsColumns": ",".join(columns)} if columns else None


def _add_actions(table: DeltaTable) -> pa.Table:
    return pa.table(table.get_add_actions(flatten=True))


def _row_count(table: DeltaTable) -> int | None:
    counts = _add_actions(table)["num_records"]
    if counts.null_count:  # a file without statistics: unknown
        return None
    return pc.sum(counts).as_py() or 0


def _prune_files(actions: pa.Table, column: str, column_type: str, is_partition: bool, lo, hi) -> pa.Table:
    """Keep the files that may hold rows with lo <= column < hi.

    Partition columns select files exactly; other columns use the per-file min/max
    statistics (files without statistics are kept). The exact row filter comes after.
    """
    def compare(op, values, bound):
        return op(values, pa.scalar(bound, type=values.type))

    if actions.num_rows == 0:
        return actions
    if is_partition:
        values = actions[f"partition.{column}"]
        keep = [pc.is_valid(values)]
        if lo is not None:
            keep.append(compare(pc.greater_equal, values, lo))
        if hi is not None:
            keep.append(compare(pc.less, values, hi))
    else:
        if f"min.{column}" not in actions.column_names or f"max.{column}" not in actions.column_names:
            return actions
        mins, maxes = actions[f"min.{column}"], actions[f"max.{column}"]
        if column_type == "timestamp":
            # Stored statistics are truncated to milliseconds: widen them by one on each side.
            slack = pa.scalar(_TIMESTAMP_STATS_SLACK)
            mins, maxes = pc.subtract(mins, slack), pc.add(maxes, slack)
        keep = []
        if hi is not None:  # some value may be below hi
            keep.append(pc.or_kleene(pc.is_null(mins), compare(pc.less, mins, hi)))
        if lo is not None:  # some value may be at or above lo
            keep.append(pc.or_kleene(pc.is_null(maxes), compare(pc.greater_equal, maxes, lo)))
    if not keep:
        return actions
    return actions.filter(pc.fill_null(functools.reduce(pc.and_kleene, keep), False))


def _absolute_file_paths(table_path: str, actions: pa.Table) -> list[str]:
    paths = []
    for logged in actions["path"].to_pylist():
        decoded = unquote(logged)  # paths in the Delta log are URL-encoded
        paths.append(decoded if "://" in decoded or decoded.startswith("/") else f"{table_path}/{decoded}")
    return paths


class DeltaRsTableStore(TableStore):
    """Delta log and commits through delta-rs; Spark reads the Parquet files natively."""

    engine_name = "delta-rs"

    # -- reads ---------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.path(name))

    def read(self, name: str, columns: Sequence[str] | None = None):
        return self._read(self.path(name), columns)

    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        return self._read(self.path(name), columns, (check_identifier(column, "range column"), start, end))

    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None):
        return self._read(path, columns, (check_identifier(column, "range column"), start, end))

    def _require(self, name: str) -> DeltaTable:
        return self._require_path(self.path(name))

    @staticmethod
    def _require_path(path: str) -> DeltaTable:
        table = _load_delta_rs(path)
        if table is None:
            raise FileNotFoundError(f"no Delta table at {path}")
        return table

    def _read(self, path: str, columns: Sequence[str] | None, time_range=None):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        table = self._require_path(path)
        schema = _spark_schema(table)
        if columns:
            _check_columns_present(schema.names, columns, f"read {name}")
        pruning = None  # (column, column type, lo, hi) of a range read
        if time_range is not None:
            column, start, end = time_range
            column_type = _spark_type_name(schema, column, f"read_range {name}")
            pruning = (column, column_type, *_normalise_range(column, column_type, start, end))

        df = self._files_dataframe(path, table, schema, pruning)
        if df is None:  # Spark cannot read the files as they are
            df = self._arrow_dataframe(table, schema, pruning)
        if pruning is not None:
            column, _, lo, hi = pruning
            df = df.where(_spark_range_condition(column, lo, hi))  # exact rows, after file pruning
        return df.select(*columns) if columns else df

    def _files_dataframe(self, table_path: str, table: DeltaTable, schema, pruning):
        """Spark reads the table's active Parquet files directly; None if it cannot."""
        if not _spark_can_read_files(table):
            return None
        partition_columns = table.metadata().partition_columns
        actions = _add_actions(table)
        if pruning is not None:
            column, column_type, lo, hi = pruning
            actions = _prune_files(actions, column, column_type, column in partition_columns, lo, hi)
        _record_scan(table_path, actions)
        if actions.num_rows == 0:
            return self.spark.createDataFrame([], schema)

        reader = self.spark.read.schema(schema)
        if partition_columns:
            relative = [unquote(p) for p in actions["path"].to_pylist()]
            if not _spark_parses_partition_dirs(relative, partition_columns):
                return None
            if any(schema[c].dataType.typeName() == "timestamp" for c in partition_columns) and \
                    self.spark.conf.get("spark.sql.session.timeZone") not in ("UTC", "Etc/UTC", "Z", "+00:00"):
                return None  # Spark would parse timestamp partition values in the session zone
            # Partition values live in the directory names (not in the files); with basePath
            # and the table schema given, Spark attaches them with the schema's types.
            reader = reader.option("basePath", table_path)
        files = _absolute_file_paths(table_path, actions)
        # Partition discovery puts partition columns last: restore the table's column order.
        return reader.parquet(*files).select(*schema.names)

    def _arrow_dataframe(self, table: DeltaTable, schema, pruning):
        """Fallback: delta-rs scans (honouring deletion vectors and column mapping)."""
        predicate = None
        if pruning is not None:
            column, column_type, lo, hi = pruning
            predicate = _delta_rs_range_predicate(column, column_type, lo, hi)
        data = pa.RecordBatchReader.from_stream(table.scan(predicate=predicate)).read_all()
        return self.spark.createDataFrame(_without_view_types(data), schema=schema)

    # -- writes --------------------------------------------------------------------------

    def _stage(self, df) -> StagedRows:
        return StagedRows(df, None if "://" in self.root else self.root)

    def _write_arrow(self, target: DeltaTable | str, data: StagedRows, **options) -> None:
        """Every data write goes through here: delta-rs streams the staged rows into files."""
        write_deltalake(target, data.reader(), **options)

    def _create(self, path: str, data: StagedRows, partition_by: list[str], *, rows_deleted: int | None,
                commit_properties: CommitProperties | None = None) -> WriteResult:
        """Create the table with `data` as version 0; a concurrent creator makes us retry."""
        try:
            self._write_arrow(path, data, mode="error", partition_by=partition_by or None,
                              commit_properties=commit_properties, configuration=_stats_configuration(data))
        except DeltaError as error:
            if DeltaTable.is_deltatable(path):
                raise _TableCreatedConcurrently(path) from error
            raise
        return WriteResult(rows_written=data.num_rows, version=0, rows_deleted=rows_deleted)

    def _commit(self, operation: Callable[[], WriteResult]) -> WriteResult:
        return _retry_on_conflict(operation, (CommitFailedError, _TableCreatedConcurrently))

    def _rows_deleted(self, path: str, rows_before: int | None, version_before: int,
                      after: DeltaTable, rows_added: int) -> int | None:
        """Rows the commit that produced `after` removed: before + added - after."""
        if after.version() != version_before + 1:  # other commits landed in between
            rows_before = _row_count(DeltaTable(path, version=after.version() - 1))
        rows_after = _row_count(after)
        if rows_before is None or rows_after is None:
            return None
        return rows_before + rows_added - rows_after

    def _overwrite_counted(self, path: str, table: DeltaTable, data: StagedRows, **options) -> WriteResult:
        """Overwrite the table (or the rows `predicate` selects) with data in one commit and
        report how many rows that replaced."""
        rows_before, version_before = _row_count(table), table.version()
        self._write_arrow(table, data, mode="overwrite", **options)
        return WriteResult(
            rows_written=data.num_rows, version=table.version(),
            rows_deleted=self._rows_deleted(path, rows_before, version_before, table, data.num_rows))

    def replace_range(self, name, df, *, column, start, end, partition_by=None) -> WriteResult:
        path = self.path(name)
        check_identifier(column, "range column")
        with self._stage(df) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)
            _check_columns_present(data.column_names, [column], f"replace_range {name}")

            def attempt() -> WriteResult:
                table = _load_delta_rs(path)
                schema = _spark_schema(table) if table is not None else df.schema
                column_type = _spark_type_name(schema, column, f"replace_range {name}")
                lo, hi = _normalise_range(column, column_type, start, end)
                _check_arrow_rows_in_range(data.columns([column]), column, lo, hi)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=0)
                return self._overwrite_counted(path, table, data, schema_mode="merge",
                                               predicate=_delta_rs_range_predicate(column, column_type, lo, hi))

            return self._commit(attempt)

    def merge(self, name, df, *, keys, partition_by=None) -> WriteResult:
        path = self.path(name)
        keys = [check_identifier(k, "merge key") for k in keys]
        if not keys:
            raise ValueError("merge: keys must name at least one column")
        with self._stage(df) as data:
            _check_columns_present(data.column_names, keys, f"merge {name}")
            partition_by = self._check_partition_by(partition_by, data.column_names)
            _check_unique_non_null_keys(data.columns(keys), keys)
            on_keys = " AND ".join(f't."{k}" = s."{k}"' for k in keys)

            def attempt() -> WriteResult:
                table = _load_delta_rs(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=None)
                (table.merge(data.reader(), predicate=on_keys, source_alias="s", target_alias="t",
                             merge_schema=True)
                      .when_matched_update_all()
                      .when_not_matched_insert_all()
                      .execute())
                return WriteResult(rows_written=data.num_rows, version=table.version())

            return self._commit(attempt)

    def append(self, name, df, *, token=None, partition_by=None) -> WriteResult:
        path = self.path(name)
        app_id = _append_token_app_id(token) if token is not None else None
        with self._stage(df) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)
            # The token is committed in the same commit as the rows, and delta-rs refuses a
            # commit when a concurrent one recorded the same app id: we then retry, see the token
            # and skip.
            commit_properties = (
                CommitProperties(app_transactions=[Transaction(app_id, APPEND_TOKEN_TXN_VERSION)])
                if app_id else None)

            def attempt() -> WriteResult:
                table = _load_delta_rs(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=None,
                                        commit_properties=commit_properties)
                if app_id and table.transaction_version(app_id) is not None:
                    return WriteResult(rows_written=0, version=table.version(), skipped=True)
                self._write_arrow(table, data, mode="append", schema_mode="merge",
                                  commit_properties=commit_properties)
                return WriteResult(rows_written=data.num_rows, version=table.version())

            return self._commit(attempt)

    def overwrite(self, name, df, *, partition_by=None) -> WriteResult:
        path = self.path(name)
        with self._stage(df) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)

            def attempt() -> WriteResult:
                table = _load_delta_rs(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=0)
                # Drop-and-recompute: the new data's schema replaces the old one.
                return self._overwrite_counted(
                    path, table, data, schema_mode="overwrite",
                    partition_by=partition_by or table.metadata().partition_columns or None)

            return self._commit(attempt)

    def delete_where_in(self, name, column, values) -> WriteResult:
        path = self.path(name)
        check_identifier(column, "column")
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("delete_where_in: values must not contain None (null never matches IN)")

        def attempt() -> WriteResult:
            table = _load_delta_rs(path)
            if table is None:
                return WriteResult(rows_written=0, version=None, rows_deleted=0)
            if not values:
                return WriteResult(rows_written=0, version=table.version(), rows_deleted=0)
            column_type = _spark_type_name(_spark_schema(table), column, f"delete_where_in {name}")
            literals = ", ".join(_delta_rs_literal(v, column_type, column) for v in values)
            metrics = table.delete(f'"{column}" IN ({literals})')
            return WriteResult(rows_written=0, version=table.version(),
                               rows_deleted=metrics.get("num_deleted_rows"))

        return self._commit(attempt)

    # -- metadata ------------------------------------------------------------------------

    def version(self, name: str) -> int | None:
        table = _load_delta_rs(self.path(name))
        return None if table is None else table.version()

    def describe(self, name: str) -> dict:
        table = self._require(name)
        actions = _add_actions(table)
        return {
            "path": self.path(name),
            "version": table.version(),
            "num_files": actions.num_rows,
            "size_bytes": pc.sum(actions["size_bytes"]).as_py() or 0,
        }


# ---------------------------------------------------------------------------------------
# delta-spark engine
# ---------------------------------------------------------------------------------------


def _delta_spark_coordinate() -> str:
    """Maven coordinate of the Delta jars matching the installed delta-spark and pyspark
    (the naming delta-spark's own configure_spark_with_delta_pip uses)."""
    from importlib.metadata import PackageNotFoundError, version

    import pyspark

    try:
        delta_version = version("delta-spark")
    except PackageNotFoundError:
        delta_version = "<delta-spark version>"
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{delta_version}"


def _jvm_class_loadable(spark, class_name: str) -> bool | None:
    """Whether the driver JVM can load a class; None when there is no JVM to ask (Connect)."""
    try:
        jvm = spark._jvm
    except Exception:
        return None
    if jvm is None:
        return None
    try:
        jvm.org.apache.spark.util.Utils.classForName(class_name, True, False)
        return True
    except Exception:
        return False


def delta_spark_unavailable_reason(spark) -> str | None:
    """None when this Spark session runs native Delta; else why not and how to enable it."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    configured = DELTA_EXTENSION_CLASS in extensions
    loadable = _jvm_class_loadable(spark, DELTA_EXTENSION_CLASS)
    if configured and loadable is not False:  # Connect: the server's configuration decides
        return None
    problems = []
    if loadable is False:
        problems.append(f"the Delta Lake jars are not loadable in this Spark session "
                        f"(class {DELTA_EXTENSION_CLASS} not found)")
    if not configured:
        problems.append(f"spark.sql.extensions does not include {DELTA_EXTENSION_CLASS}")
    return (
        "delta-spark engine: " + "; ".join(problems) + ". To enable it, start Spark with "
        f"spark.jars.packages={_delta_spark_coordinate()} on a machine with Maven access "
        "(delta.pip_utils.configure_spark_with_delta_pip(builder) sets this), or spark.jars "
        "pointing at local delta-spark and delta-storage jars, plus "
        f"spark.sql.extensions={DELTA_EXTENSION_CLASS} and spark.sql.catalog.spark_catalog="
        "org.apache.spark.sql.delta.catalog.DeltaCatalog; or use table_engine=delta-rs."
    )


def _delta_spark_conflicts() -> tuple[type[BaseException], ...]:
    import delta.exceptions as delta_errors

    return (
        delta_errors.DeltaConcurrentModificationException,
        delta_errors.ConcurrentWriteException,
        delta_errors.MetadataChangedException,
        delta_errors.ProtocolChangedException,
        delta_errors.ConcurrentAppendException,
        delta_errors.ConcurrentDeleteReadException,
        delta_errors.ConcurrentDeleteDeleteException,
        delta_errors.ConcurrentTransactionException,
        _TableCreatedConcurrently,
    )


class DeltaSparkTableStore(TableStore):
    """Native Delta inside Spark (needs the Delta jars and session extension)."""

    engine_name = "delta-spark"

    def __init__(self, spark, root: str):
        super().__init__(spark, root)
        reason = delta_spark_unavailable_reason(spark)
        if reason:
            raise RuntimeError(reason)

    def _delta_table(self, name: str):
        from delta.tables import DeltaTable as SparkDeltaTable

        path = self.path(name)
        return SparkDeltaTable.forPath(self.spark, path) if self.exists(name) else None

    def _commit(self, operation: Callable[[], WriteResult]) -> WriteResult:
        return _retry_on_conflict(operation, _delta_spark_conflicts())

    def _commit_by_marker(self, name: str, marker: str, after_version: int | None) -> dict | None:
        """Our own commit in the history, found by the userMetadata we gave it."""
        from pyspark.sql import functions as F

        history = self._delta_table(name).history()
        if after_version is not None:
            history = history.where(F.col("version") > after_version)
        rows = history.where(F.col("userMetadata") == marker).select("version", "operationMetrics").collect()
        return rows[0].asDict() if rows else None

    def _result(self, name: str, marker: str, after_version: int | None,
                deleted_metric: str | None = None) -> WriteResult:
        """WriteResult of our marked commit; no such commit means Delta skipped the write."""
        commit = self._commit_by_marker(name, marker, after_version)
        if commit is None:
            return WriteResult(rows_written=0, version=self.version(name), skipped=True)
        metrics = commit["operationMetrics"] or {}

        def metric(key: str | None) -> int | None:
            return int(metrics[key]) if key and key in metrics else None

        return WriteResult(rows_written=metric("numOutputRows") or 0, version=commit["version"],
                           rows_deleted=metric(deleted_metric))

    def _create_if_missing(self, name: str, df, partition_by: list[str], marker: str) -> bool:
        """Create the table with df if it does not exist; True when this call created it."""
        if self.exists(name):
            return False
        writer = df.write.format("delta").mode("errorifexists").option("userMetadata", marker)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        try:
            writer.save(self.path(name))
        except Exception as error:
            if self.exists(name):
                raise _TableCreatedConcurrently(self.path(name)) from error
            raise
        return True

    # -- reads ---------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        from delta.tables import DeltaTable as SparkDeltaTable

        return SparkDeltaTable.isDeltaTable(self.spark, self.path(name))

    def read(self, name: str, columns: Sequence[str] | None = None):
        df = self.spark.read.format("delta").load(self.path(name))
        return df.select(*columns) if columns else df

    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        return self.read_path_range(self.path(name), column, start, end, columns)

    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None):
        check_identifier(column, "range column")
        df = self.spark.read.format("delta").load(path)
        column_type = _spark_type_name(df.schema, column, f"read_range {path}")
        lo, hi = _normalise_range(column, column_type, start, end)
        df = df.where(_spark_range_condition(column, lo, hi))  # Delta skips files by stats
        return df.select(*columns) if columns else df

    # -- writes --------------------------------------------------------------------------

    def replace_range(self, name, df, *, column, start, end, partition_by=None) -> WriteResult:
        from pyspark.sql import functions as F

        check_identifier(column, "range column")
        partition_by = self._check_partition_by(partition_by, df.columns)
        _check_columns_present(df.columns, [column], f"replace_range {name}")
        column_type = _spark_type_name(df.schema, column, f"replace_range {name}")
        lo, hi = _normalise_range(column, column_type, start, end)
        # One Spark job to name the first offending row (Delta's own check would only fail).
        offending = df.where(~F.coalesce(_spark_range_condition(column, lo, hi), F.lit(False)))
        first = offending.select(column).limit(1).collect()
        if first:
            raise _out_of_range_error(column, lo, hi, first[0][0])

        def attempt() -> WriteResult:
            marker = f"replace_range {uuid.uuid4()}"
            before = self.version(name)
            if self._create_if_missing(name, df, partition_by, marker):
                return self._result(name, marker, None)
            (df.write.format("delta").mode("overwrite")
               .option("replaceWhere", _spark_sql_range_predicate(column, column_type, lo, hi))
               .option("mergeSchema", "true")
               .option("userMetadata", marker)
               .save(self.path(name)))
            return self._result(name, marker, before, "numDeletedRows")

        return self._commit(attempt)

    def merge(self, name, df, *, keys, partition_by=None) -> WriteResult:
        from pyspark.sql import functions as F

        keys = [check_identifier(k, "merge key") for k in keys]
        if not keys:
            raise ValueError("merge: keys must name at least one column")
        _check_columns_present(df.columns, keys, f"merge {name}")
        partition_by = self._check_partition_by(partition_by, df.columns)
        # One Spark job checks the keys and counts the rows.
        key_counts = df.groupBy(*keys).count()
        any_null_key = functools.reduce(operator.or_, [F.col(k).isNull() for k in keys])
        most, rows, null_keys = key_counts.agg(
            F.max("count"), F.sum("count"), F.count(F.when(any_null_key, 1))).first()
        if null_keys:
            raise ValueError(f"merge: key columns {keys} have null values (null keys never match)")
        if most and most > 1:
            duplicate = key_counts.where(F.col("count") > 1).first()
            raise ValueError(f"merge: keys {keys} are not unique in the data; e.g. "
                             f"{ {k: duplicate[k] for k in keys} } appears {duplicate['count']} times")
        on_keys = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)

        def attempt() -> WriteResult:
            marker = f"merge {uuid.uuid4()}"
            if self._create_if_missing(name, df, partition_by, marker):
                return self._result(name, marker, None)
            (self._delta_table(name).alias("t")
                 .merge(df.alias("s"), on_keys)
                 .whenMatchedUpdateAll()
                 .whenNotMatchedInsertAll()
                 .withSchemaEvolution()
                 .execute())
            # DeltaTable.merge takes no userMetadata option: report the table's version.
            return WriteResult(rows_written=rows or 0, version=self.version(name))

        return self._commit(attempt)

    def append(self, name, df, *, token=None, partition_by=None) -> WriteResult:
        app_id = _append_token_app_id(token) if token is not None else None
        partition_by = self._check_partition_by(partition_by, df.columns)

        def attempt() -> WriteResult:
            marker = f"append {uuid.uuid4()}"
            before = self.version(name)
            writer = df.write.format("delta").mode("append").option("mergeSchema", "true") \
                       .option("userMetadata", marker)
            if app_id:
                # Delta skips the write when this (appId, version) is already in the log.
                writer = writer.option("txnAppId", app_id).option("txnVersion", APPEND_TOKEN_TXN_VERSION)
            if before is None and partition_by:
                writer = writer.partitionBy(*partition_by)
            writer.save(self.path(name))
            return self._result(name, marker, before)

        return self._commit(attempt)

    def overwrite(self, name, df, *, partition_by=None) -> WriteResult:
        partition_by = self._check_partition_by(partition_by, df.columns)

        def attempt() -> WriteResult:
            marker = f"overwrite {uuid.uuid4()}"
            before = self.version(name)
            writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
                       .option("userMetadata", marker)
            if partition_by:
                writer = writer.partitionBy(*partition_by)
            writer.save(self.path(name))
            return self._result(name, marker, before)

        return self._commit(attempt)

    def delete_where_in(self, name, column, values) -> WriteResult:
        from pyspark.sql import functions as F

        check_identifier(column, "column")
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("delete_where_in: values must not contain None (null never matches IN)")

        def attempt() -> WriteResult:
            table = self._delta_table(name)
            if table is None:
                return WriteResult(rows_written=0, version=None, rows_deleted=0)
            if not values:
                return WriteResult(rows_written=0, version=self.version(name), rows_deleted=0)
            table.delete(F.col(column).isin(values))  # values are bound as literals by Spark
            last = table.history(1).select("version", "operationMetrics").collect()[0]
            metrics = last["operationMetrics"] or {}
            deleted = int(metrics["numDeletedRows"]) if "numDeletedRows" in metrics else None
            return WriteResult(rows_written=0, version=last["version"], rows_deleted=deleted)

        return self._commit(attempt)

    # -- metadata ------------------------------------------------------------------------

    def version(self, name: str) -> int | None:
        table = self._delta_table(name)
        if table is None:
            return None
        return table.history(1).select("version").collect()[0][0]

    def describe(self, name: str) -> dict:
        table = self._delta_table(name)
        if table is None:
            raise FileNotFoundError(f"no Delta table at {self.path(name)}")
        detail = table.detail().select("numFiles", "sizeInBytes").collect()[0]
        return {
            "path": self.path(name),
            "version": self.version(name),
            "num_files": detail["numFiles"],
            "size_bytes": detail["sizeInBytes"],
        }


# ---------------------------------------------------------------------------------------
# Choosing an engine
# ---------------------------------------------------------------------------------------


def table_store(spark, root: str, engine: str = "auto") -> TableStore:
    """The table store for this Spark session (setting `table_engine`)."""
    if engine not in ENGINES:
        raise ValueError(
            f"table_engine: unknown engine {engine!r}; accepted values: "
            + ", ".join(repr(e) for e in ENGINES)
        )
    if engine == "auto":
        engine = "delta-spark" if delta_spark_unavailable_reason(spark) is None else "delta-rs"
    if engine == "delta-spark":
        return DeltaSparkTableStore(spark, root)
    return DeltaRsTableStore(spark, root)
