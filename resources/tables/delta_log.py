"""Reading a Delta table's log with delta-rs: its files and their statistics, pruning them by
a time range, and small tables read into Arrow (and appended from it) without Spark."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import re
from typing import Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)

# Reader features whose tables Spark reads correctly as plain Parquet files.
_PLAIN_PARQUET_READER_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
# Delta stores min/max timestamp statistics truncated to milliseconds.
_TIMESTAMP_STATS_SLACK = dt.timedelta(milliseconds=1)
# How Spark (and Hive) name the directory of a null partition value.
HIVE_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Every table this product creates asks for a checkpoint every 10 commits (Delta's own property;
# Spark's default, where delta-rs's is 100): a load then reads one checkpoint and at most nine
# commits. Most tables take a commit per run, and every read of one loads its log (a ledger of
# 44 commits loaded in 22 to 28 ms, 6 ms from a checkpoint).
CHECKPOINT_INTERVAL_PROPERTY = "delta.checkpointInterval"
NEW_TABLE_CONFIGURATION = {CHECKPOINT_INTERVAL_PROPERTY: "10"}


class UnreadableTableFeature(RuntimeError):
    """A table whose protocol lists a feature delta-rs cannot read, where no other reader is at hand."""


def features_delta_rs_refuses(error: Exception) -> str | None:
    """The table features delta-rs names when it refuses to read a table (its scan and deletion
    vectors check every reader feature; its log and statistics it still reads); None for any
    other error."""
    match = re.search(r"Unsupported table features required: \[([^\]]*)\]", str(error))
    return match.group(1) if match else None


def spark_delta_reader(spark, path: str, version: int):
    """The table at `version` read by Spark's own Delta reader: on the executors, deletion
    vectors and column mapping honoured, a filter that follows pushed down to it (partition
    pruning, data skipping). It needs the Delta jars (`make setup` caches them)."""
    return spark.read.format("delta").option("versionAsOf", version).load(path)


def read_on_executors(spark, path: str, version: int):
    """A table whose files are not its rows as they are (deletion vectors, column mapping), read
    by Spark's Delta reader; None, saying so in the log, where this session cannot: the caller
    then reads it through delta-rs into the driver, whose memory grows with what it reads."""
    try:
        return spark_delta_reader(spark, path, version)
    except Exception as error:  # noqa: BLE001 - without the Delta jars Spark knows no "delta" source
        _log.warning("the Delta table at %s needs a Delta reader, and Spark's could not read it (%s): it is "
                     "read through delta-rs into the driver instead; run `make setup` to cache the "
                     "delta-spark jars, which let Spark read it on the executors",
                     path, str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        return None


def read_with_spark_delta(spark, path: str, version: int, features: str):
    """The table read by Spark's Delta reader, for a table whose `features` delta-rs refuses (on
    the executors; a range filter that follows is pushed down to it); it needs the Delta jars."""
    try:
        return spark_delta_reader(spark, path, version)
    except Exception as error:  # noqa: BLE001 - without the Delta jars Spark knows no "delta" source
        raise UnreadableTableFeature(
            f"the Delta table at {path} needs the table feature(s) {features}, which deltalake cannot read, "
            "and this Spark session has no Delta reader: run `make setup` (it caches the delta-spark jars) "
            f"or drop the feature(s) from the table (ALTER TABLE ... DROP FEATURE); Spark said: {error}"
        ) from error


def load_table(path: str, version: int | None = None) -> DeltaTable | None:
    """The Delta table at `path` (at `version` when given); None when there is none."""
    try:
        return DeltaTable(path, version=version)
    except TableNotFoundError:
        return None


def is_delta_table(path: str) -> bool:
    """True when a Delta table (a log with a commit) is at `path`."""
    return DeltaTable.is_deltatable(path)


def commits_since(path: str, after_version: int | None, limit: int | None = None) -> list[dict]:
    """The commit infos of the table at `path` after `after_version` (every one for None), newest
    first, at most `limit`; each with its "version"."""
    table = required_table(path)
    newer = table.version() - (-1 if after_version is None else after_version)
    if limit is not None:
        newer = min(limit, newer)
    return table.history(newer) if newer > 0 else []


class NoTableAt(FileNotFoundError):
    """No Delta table at `path`, where an operation needs one (raised by both engines)."""

    def __init__(self, path: str):
        super().__init__(f"no Delta table at {path}")
        self.path = path


def required_table(path: str, version: int | None = None) -> DeltaTable:
    """The Delta table at `path` (at `version` when given); NoTableAt when there is none."""
    table = load_table(path, version)
    if table is None:
        raise NoTableAt(path)
    return table


def spark_can_read_files(table: DeltaTable) -> bool:
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


def spark_parses_partition_dirs(relative_paths: list[str], partition_columns: list[str]) -> bool:
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
            if encoded == HIVE_NULL_PARTITION:
                continue
            try:
                if _spark_unescape(encoded) != unquote(encoded, errors="strict"):
                    return False
            except UnicodeDecodeError:
                return False
    return True


def spark_schema(table: DeltaTable):
    """The table's Spark schema: Delta's schema JSON is Spark's StructType JSON."""
    return StructType.fromJson(json.loads(table.schema().to_json()))


def _plain_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_binary_view(kind):
        return pa.binary()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return pa.list_(kind.value_field.with_type(_plain_type(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in kind])
    return kind


def without_view_types(data: pa.Table) -> pa.Table:
    """delta-rs scans return string/binary views (also inside lists and structs); cast them to
    the plain Arrow types."""
    return data.cast(pa.schema([field.with_type(_plain_type(field.type)) for field in data.schema]))



def add_actions(table: DeltaTable) -> pa.Table:
    return pa.table(table.get_add_actions(flatten=True))


def file_bytes_by_partition(table: DeltaTable) -> dict[str | None, list[int]] | None:
    """The sizes of the table's files per value of its first partition column (as text, None
    for null); None for a table without partition columns."""
    columns = table.metadata().partition_columns
    if not columns:
        return None
    actions = add_actions(table)
    out: dict[str | None, list[int]] = {}
    for value, size in zip(actions[f"partition.{columns[0]}"].to_pylist(), actions["size_bytes"].to_pylist()):
        out.setdefault(None if value is None else str(value), []).append(size)
    return out


def file_sizes_by_partition_values(table: DeltaTable, first_values: Sequence[str] | None = None) -> list[list[int]]:
    """The sizes of the table's files, one list per partition (its values of every partition
    column; the whole table when it has none); only the partitions whose first partition column
    has one of `first_values` (as text) when given."""
    actions = add_actions(table)
    columns = table.metadata().partition_columns
    keys = [actions[f"partition.{c}"].to_pylist() for c in columns]
    wanted = None if first_values is None else {str(v) for v in first_values}
    groups: dict[tuple, list[int]] = {}
    for row, size in enumerate(actions["size_bytes"].to_pylist()):
        values = tuple(key[row] for key in keys)
        if wanted is not None and (not values or values[0] is None or str(values[0]) not in wanted):
            continue
        groups.setdefault(values, []).append(size)
    return list(groups.values())


def unreferenced_files(path: str, retention_hours: float) -> list[str]:
    """The files in the table's directory that no version of the last `retention_hours`
    references and that are older than that: those a vacuum deletes (delta-rs `full` mode, which
    also finds files of writes that never committed). Nothing is deleted here."""
    return required_table(path).vacuum(retention_hours=int(retention_hours), dry_run=True,
                                       enforce_retention_duration=False, full=True)


def row_count(table: DeltaTable) -> int | None:
    return records_in(add_actions(table))


def records_in(actions: pa.Table) -> int | None:
    """The rows of the files `actions` lists (rows of `add_actions`); None when a file has no statistics."""
    counts = actions["num_records"]
    if counts.null_count:
        return None
    return pc.sum(counts).as_py() or 0


def _compare(op, values, bound):
    return op(values, pa.scalar(bound, type=values.type))


def _stats_bounds(actions: pa.Table, column: str, column_type: str):
    """Per-file (min, max) of a column, widened where statistics are truncated; None when the
    log keeps no statistics of the column."""
    if f"min.{column}" not in actions.column_names or f"max.{column}" not in actions.column_names:
        return None
    mins, maxes = actions[f"min.{column}"], actions[f"max.{column}"]
    if column_type == "timestamp":
        # Stored statistics are truncated to milliseconds: widen them by one on each side.
        slack = pa.scalar(_TIMESTAMP_STATS_SLACK)
        mins, maxes = pc.subtract(mins, slack), pc.add(maxes, slack)
    return mins, maxes


def _may_hold(actions: pa.Table, column: str, column_type: str, is_partition: bool, lo, hi):
    """Per file: may it hold rows with lo <= column < hi (files without statistics may)."""
    everything = pa.array([True] * actions.num_rows)
    if is_partition:
        values = actions[f"partition.{column}"]
        keep = [pc.is_valid(values)]
        if lo is not None:
            keep.append(_compare(pc.greater_equal, values, lo))
        if hi is not None:
            keep.append(_compare(pc.less, values, hi))
    else:
        bounds = _stats_bounds(actions, column, column_type)
        if bounds is None:
            return everything
        mins, maxes = bounds
        keep = []
        if hi is not None:  # some value may be below hi
            keep.append(pc.or_kleene(pc.is_null(mins), _compare(pc.less, mins, hi)))
        if lo is not None:  # some value may be at or above lo
            keep.append(pc.or_kleene(pc.is_null(maxes), _compare(pc.greater_equal, maxes, lo)))
    if not keep:
        return everything
    return pc.fill_null(functools.reduce(pc.and_kleene, keep), False)


def _only_holds(actions: pa.Table, column: str, column_type: str, is_partition: bool, lo, hi):
    """Per file: are all its rows known (from partition values or statistics) to have
    lo <= column < hi."""
    if is_partition:
        return _may_hold(actions, column, column_type, True, lo, hi)
    bounds = _stats_bounds(actions, column, column_type)
    if bounds is None or f"null_count.{column}" not in actions.column_names:
        return pa.array([False] * actions.num_rows)
    mins, maxes = bounds
    inside = [pc.equal(actions[f"null_count.{column}"], 0), pc.is_valid(actions["num_records"])]
    if lo is not None:
        inside.append(_compare(pc.greater_equal, mins, lo))
    if hi is not None:
        inside.append(_compare(pc.less, maxes, hi))
    return pc.fill_null(functools.reduce(pc.and_kleene, inside), False)


def prune_files(actions: pa.Table, column: str, column_type: str, is_partition: bool, lo, hi) -> pa.Table:
    """Keep the files that may hold rows with lo <= column < hi.

    Partition columns select files exactly; other columns use the per-file min/max
    statistics (files without statistics are kept). The exact row filter comes after.
    """
    if actions.num_rows == 0:
        return actions
    return actions.filter(_may_hold(actions, column, column_type, is_partition, lo, hi))


def files_in_selection(actions: pa.Table, ranges, partition_columns: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """The files a replace of `ranges` (resolved RowRanges) must remove: (files whose every row
    is selected, files that may also hold other rows)."""
    if actions.num_rows == 0 or not ranges:
        return actions.slice(0, 0), actions.slice(0, 0)
    touched = pa.array([False] * actions.num_rows)
    whole = pa.array([False] * actions.num_rows)
    for r in ranges:
        is_partition = r.column in partition_columns
        touched = pc.or_(touched, _may_hold(actions, r.column, r.column_type, is_partition, r.lo, r.hi))
        if r.key is None:  # key-narrowed ranges never select a whole file
            whole = pc.or_(whole, _only_holds(actions, r.column, r.column_type, is_partition, r.lo, r.hi))
    return actions.filter(whole), actions.filter(pc.and_(touched, pc.invert(whole)))


def absolute_file_paths(table_path: str, actions: pa.Table) -> list[str]:
    paths = []
    for logged in actions["path"].to_pylist():
        decoded = unquote(logged)  # paths in the Delta log are URL-encoded
        paths.append(decoded if "://" in decoded or decoded.startswith("/") else f"{table_path}/{decoded}")
    return paths


def scan_arrow(table: DeltaTable, columns: Sequence[str] | None = None,
               predicate: str | None = None) -> pa.Table:
    """The rows of `table` (at its loaded version) that `predicate` (delta-rs SQL) selects, in
    Arrow, read by delta-rs's own engine.

    Every Arrow read of a Delta table in the project goes through here, never through
    `DeltaTable.to_pyarrow_table()`: that reads through deltalake's Python file handler, and
    an Arrow worker thread that releases such a buffer while the interpreter exits needs the
    GIL it can no longer take, so the process aborts after its work is done ("terminate
    called without an active exception"; apache/arrow#36389, delta-io/delta-rs#2184).
    """
    stream = table.scan(columns=list(columns) if columns else None, predicate=predicate)
    return without_view_types(pa.RecordBatchReader.from_stream(stream).read_all())


def utc_datetimes(values: pa.ChunkedArray) -> list[dt.datetime | None]:
    """A UTC timestamp column as aware datetimes, through numpy: Arrow's own conversion of a
    time-zone-aware column (`to_pylist`) is four times slower, and the sensor converts the
    ledger's two timestamps of every processed hour at each tick."""
    naive = values.cast(pa.timestamp("us")).to_numpy().astype(object)  # datetime64[us]: None for null
    return [None if value is None else value.replace(tzinfo=dt.timezone.utc) for value in naive]


def append_arrow(path: str, rows: pa.Table) -> None:
    """Append `rows` to the small Delta table at `path`, created (with this product's table
    configuration) when there is none yet."""
    write_deltalake(path, rows, mode="append", configuration=NEW_TABLE_CONFIGURATION)


def read_delta_arrow(path: str, columns: Sequence[str] | None = None,
                     predicate: str | None = None) -> pa.Table | None:
    """A small Delta table, or the rows `predicate` selects, as one Arrow table (`scan_arrow`);
    None when there is no Delta table at `path`."""
    table = load_table(path)
    return None if table is None else scan_arrow(table, columns, predicate)
