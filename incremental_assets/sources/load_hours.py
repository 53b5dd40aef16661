"""Which load hours the source table's files hold, and a fingerprint of each hour's files, from
metadata only (no Spark, no data read).

Delta source: a file's hours come from its min/max `load_tstamp` statistics in the Delta log;
rows without a `load_tstamp` count in the hour of their `collector_tstamp` (the load time rule
of `sources.schema.load_time`). Without usable statistics the file's `load_date` partition
stands for all its hours, and without either the file may hold any hour. An hour's fingerprint
covers the path, size, row count and rows hidden by a deletion vector of every file that may
hold it: it changes when such a file is added, removed, rewritten or has rows deleted.

Parquet source (no Delta log): files are listed; a `load_date=...` directory stands for its
day's hours, other files for every hour. Coarser (a new file re-runs its whole day), still exact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from incremental_assets.planning.hours import HOUR, floor_hour
from incremental_assets.sources.file_statistics import LoadStatistics, footer_load_statistics, places_every_row
from incremental_assets.sources.schema import PARTITION_COLUMN
from resources.object_store import filesystem
from resources.tables.delta_log import UnreadableTableFeature, features_delta_rs_refuses


@dataclass(frozen=True)
class SourceSnapshot:
    """The source as one run sees it: its Delta version (None for Parquet) and each load hour's
    fingerprint, for the hours asked for."""

    path: str
    version: int | None
    fingerprints: dict[datetime, str]
    columns: dict[str, str] | None = None  # name -> type, from the Delta schema (None for Parquet)
    # The first and last `load_date` partition of the files that may hold an hour asked for
    # (None: no such file, or no load_date partition). A loader may partition by its local
    # date: the rows of a UTC hour then sit in the next or previous day's folder, and the
    # reader must read the folders the plan placed the hour in, not the hour's UTC date.
    partition_days: tuple[date, date] | None = None
    # About how many rows the hours asked for hold: each file's rows (less those deletion vectors
    # hide) spread evenly over the hours it may hold. None: unknown (Parquet, no statistics).
    rows_estimate: int | None = None
    # The Delta log's table id (its `metaData.id`): a table deleted and written again at the
    # path, or another table, has another id and a log whose versions mean other files.
    table_id: str | None = None
    # Whether a file in a `load_date` folder without a date (null, or text that is no date) may
    # hold an hour asked for: the reader then reads those folders too.
    undated_folders: bool = False


@dataclass(frozen=True)
class _File:
    key: str  # what identifies this file's content: path, size, rows (or mtime)
    first: datetime | None  # first load hour the file may hold; None: unknown
    last: datetime | None
    day: date | None = None  # its load_date partition, if any
    hours: frozenset[datetime] | None = None  # the hours it holds, read from it when its span is wide
    rows: int | None = None  # rows it shows (its rows less those a deletion vector hides); None: unknown
    uri: str | None = None  # where the data file is (Delta files only)


# The load-time columns, as the rules name them.
LOAD_COLUMNS = ("load_tstamp", "collector_tstamp")


def physical_names(table: DeltaTable) -> dict[str, str]:
    """Each top-level column's name in the table's files and statistics: with column mapping (name
    or id mode) the log's statistics, partition values and the Parquet files use physical names
    (`col-<uuid>`), not the names the schema shows."""
    return {field.name: field.metadata.get("delta.columnMapping.physicalName", field.name)
            for field in table.schema().fields}


def _load_columns(table: DeltaTable) -> tuple[str, str]:
    names = physical_names(table)
    return tuple(names.get(column, column) for column in LOAD_COLUMNS)


def _columns(table: DeltaTable) -> dict[str, str]:
    return {field.name: str(field.type) for field in pa.schema(table.schema().to_arrow())}


def source_columns(path: str, version: int | None = None) -> dict[str, str] | None:
    """The source's columns (name -> type) at `version` of its Delta log (None: the latest);
    None for a source without a Delta log (Parquet files have no versions)."""
    if not DeltaTable.is_deltatable(path):
        return None
    return _columns(DeltaTable(path, version=version))


def source_snapshot(path: str, since: datetime, until: datetime) -> SourceSnapshot | None:
    """The load hours in [since, until) that source files may hold, with their fingerprints;
    None when there is no table at `path`."""
    if DeltaTable.is_deltatable(path):
        table = DeltaTable(path)
        files = _delta_files(table)
        partitioned = PARTITION_COLUMN in table.metadata().partition_columns
        return SourceSnapshot(path, table.version(), _fingerprints(files, since, until), _columns(table),
                              _partition_days(files, since, until), _rows_estimate(files, since, until),
                              table.metadata().id, partitioned and any(
                                  file.day is None and _hours_held(file, since, until) for file in files))
    files = _parquet_files(path)
    if files is None:
        return None
    return SourceSnapshot(path, None, _fingerprints(files, since, until))


def _hours_held(file: _File, since: datetime, until: datetime) -> list[datetime]:
    """The load hours in [since, until) that `file` may hold."""
    if file.hours is not None:
        return sorted(hour for hour in file.hours if floor_hour(since) <= hour < until)
    if file.last is not None and file.last < since:
        return []
    hour = max(file.first or since, floor_hour(since))
    stop = min(file.last + HOUR if file.last else until, until)
    return [hour + i * HOUR for i in range(max(0, -(-(stop - hour) // HOUR)))]


def _rows_estimate(files: list[_File], since: datetime, until: datetime) -> int | None:
    """A file of a compacted day holds 24 hours: an hour's window counts a 24th of its rows."""
    rows = 0.0
    for file in files:
        if not (held := _hours_held(file, since, until)):
            continue
        if file.rows is None:
            return None
        # Without statistics for an end, the file may hold every hour of the window on that side.
        spanned = _hours_held(file, file.first or since, file.last + HOUR if file.last else until)
        rows += file.rows * len(held) / max(1, len(spanned))
    return round(rows)


def _fingerprints(files: list[_File], since: datetime, until: datetime) -> dict[datetime, str]:
    keys_by_hour: dict[datetime, list[str]] = {}
    for file in files:
        for hour in _hours_held(file, since, until):
            keys_by_hour.setdefault(hour, []).append(file.key)
    return {hour: hashlib.sha1("\n".join(sorted(keys)).encode()).hexdigest()[:16]
            for hour, keys in keys_by_hour.items()}


def rows_by_hour(path: str, version: int | None, hours: Iterable[datetime]) -> dict[datetime, int] | None:
    """The source rows in each of `hours` at `version` of its Delta log (None: a Parquet source).
    A file in one hour counts from its statistics; a file over several is read (its load-time
    columns, once per process), less the rows its deletion vector hides."""
    if version is None or not DeltaTable.is_deltatable(path):
        return None
    wanted = set(hours)
    if not wanted:
        return {}
    table = DeltaTable(path, version=version)
    since, until = min(wanted), max(wanted) + HOUR
    counts = dict.fromkeys(wanted, 0)
    kept_by_vector = _rows_kept_by_vectors(table)
    load_columns = _load_columns(table)
    for file in _delta_files(table):
        held = [hour for hour in _hours_held(file, since, until) if hour in wanted]
        if not held:
            continue
        if file.rows is None:
            return None  # no statistics: the rows are not known without reading every file
        if not file.rows:
            continue
        if file.first is not None and file.first == file.last:
            by_hour = {held[0]: file.rows}
        else:
            kept = kept_by_vector.get(_file_name(file.uri or ""))
            by_hour = rows_in_file(file.uri, load_columns) if kept is None else \
                _rows_in_file_kept(file.uri, kept, load_columns)
        if by_hour is None:
            return None
        for hour in held:
            counts[hour] += by_hour.get(hour, 0)
    return counts


def _hour_counts(load_times: pa.ChunkedArray | pa.Array) -> dict[datetime, int]:
    counts = pc.value_counts(pc.floor_temporal(load_times, unit="hour"))
    return {floor_hour(item["values"].as_py()): item["counts"].as_py() for item in counts
            if item["values"].as_py() is not None}


@functools.lru_cache(maxsize=4096)
def rows_in_file(uri: str, load_columns: tuple[str, str] = LOAD_COLUMNS) -> dict[datetime, int] | None:
    """Rows per load hour of a data file (load_tstamp, else collector_tstamp, under their names
    in the file); None when it cannot be read."""
    load_times = _load_times(uri, load_columns)
    return None if load_times is None else _hour_counts(load_times)


def _rows_in_file_kept(uri: str, kept: np.ndarray, load_columns: tuple[str, str]) -> dict[datetime, int] | None:
    """`rows_in_file` for the rows a deletion vector leaves (`kept`, one flag per row)."""
    load_times = _load_times(uri, load_columns)
    if load_times is None or len(load_times) != len(kept):
        return None
    return _hour_counts(load_times.combine_chunks().filter(pa.array(kept)))


def _partition_days(files: list[_File], since: datetime, until: datetime) -> tuple[date, date] | None:
    days = [file.day for file in files if file.day is not None and _hours_held(file, since, until)]
    return (min(days), max(days)) if days else None


def _delta_files(table: DeltaTable) -> list[_File]:
    actions = pa.table(table.get_add_actions(flatten=True))

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows

    deleted = _rows_deleted_by_vectors(table)
    load, collector = load_columns = _load_columns(table)
    files = []
    for path, size, rows, day, low, high, nulls, c_low, c_high, c_nulls in zip(
            column("path"), column("size_bytes"), column("num_records"), column(f"partition.{PARTITION_COLUMN}"),
            column(f"min.{load}"), column(f"max.{load}"), column(f"null_count.{load}"),
            column(f"min.{collector}"), column(f"max.{collector}"), column(f"null_count.{collector}")):
        uri = _file_uri(table.table_uri, path)
        placed = _placed(uri, _as_date(day), rows, LoadStatistics(low, high, nulls, c_low, c_high, c_nulls),
                         load_columns)
        if placed is None:
            continue  # its rows have no load hour: never read (docs/rules.md 1)
        # A delete by deletion vector keeps the file (path, size, rows): the rows it hides are
        # part of the file's identity, or the delete would never re-run its hours.
        hidden = deleted.get(_file_name(path))
        hides = hidden.rows if hidden else 0
        first, last, hours = placed
        files.append(_File(f"{path}|{size}|{rows}" + (f"|-{hides}:{hidden.which}" if hides else ""), first, last,
                           _as_date(day), hours, None if rows is None else rows - hides, uri))
    return files


def _placed(uri: str, day: date | None, rows: int | None, logged: LoadStatistics, load_columns: tuple[str, str]
            ) -> tuple[datetime | None, datetime | None, frozenset[datetime] | None] | None:
    """The first and last load hour a data file may hold, and its hours when they were read from
    it; None when none of its rows has a load time. From the log's statistics, else the file's
    footer, else the file's load-time columns: a `load_date` folder may be a loader's local
    date, so without bounds its day does not say which hours the file holds."""
    stats = logged if places_every_row(logged) else footer_load_statistics(uri, load_columns)
    if stats is None:
        hours = hours_in_file(uri, load_columns)
        if hours is None:  # unreadable: the day of its folder, or any hour
            return *file_hours(day, None, None, None, None, None), None
        return (min(hours), max(hours), hours) if hours else None
    if holds_no_load_time(rows, stats.nulls, stats.c_nulls):
        return None
    first, last = file_hours(day, stats.low, stats.high, stats.nulls, stats.c_low, stats.c_high)
    return first, last, _hours_if_wide(uri, first, last, load_columns)


# A file whose statistics span more than this may hold any hour between: its own hours are read
# from it (one or two columns, once per process). One row with a garbage load_tstamp (1970,
# 2099) would otherwise place the file in every hour of the history, all of them due again.
WIDE_FILE_SPAN = timedelta(hours=48)


def _file_uri(table_uri: str, path: str) -> str:
    return f"{table_uri.rstrip('/')}/{unquote(path)}" if "://" not in path else path


def _hours_if_wide(uri: str, first: datetime | None, last: datetime | None,
                   load_columns: tuple[str, str]) -> frozenset[datetime] | None:
    if first is None or last is None or last - first <= WIDE_FILE_SPAN:
        return None
    return hours_in_file(uri, load_columns)


@functools.lru_cache(maxsize=4096)
def hours_in_file(uri: str, load_columns: tuple[str, str] = LOAD_COLUMNS) -> frozenset[datetime] | None:
    """The load hours of a data file's rows (load_tstamp, else collector_tstamp, under their names
    in the file), read from the file (a Delta data file never changes under its name); None when
    it cannot be read."""
    load_times = _load_times(uri, load_columns)
    if load_times is None:
        return None
    hours = pc.unique(pc.floor_temporal(load_times, unit="hour")).to_pylist()
    return frozenset(floor_hour(hour) for hour in hours if hour is not None)


def _load_times(uri: str, load_columns: tuple[str, str]) -> pa.ChunkedArray | None:
    """A data file's load times: load_tstamp, else collector_tstamp (`load_columns`: their names
    in the file), row by row."""
    try:
        store, inner = filesystem(uri)
        parquet = pq.ParquetFile(inner, filesystem=store)
        present = [c for c in load_columns if c in parquet.schema_arrow.names]
        if not present:
            return None
        data = parquet.read(columns=present)
    except (OSError, pa.ArrowException):
        return None
    load_times = data.column(present[0])
    if len(present) == 2:
        load_times = pc.coalesce(load_times, data.column(present[1]).cast(load_times.type))
    return load_times


ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # the only form of a load_date of text that names a day


def _as_date(value) -> date | None:
    """A `load_date` partition value as a date; None when null or text that is no date (its
    files are placed by their load times alone)."""
    if value is None or isinstance(value, date):
        return value
    if not ISO_DATE.fullmatch(str(value)):
        return None  # only what the reader reads as a date (`fromisoformat` takes other forms too)
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        return None


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Hidden:
    """The rows a file's deletion vector hides: how many, and which (a digest of their positions)."""

    rows: int
    which: str


def _rows_deleted_by_vectors(table: DeltaTable) -> dict[str, _Hidden]:
    """File name -> the rows its deletion vector hides (tables with the deletionVectors feature
    only). Which rows, not only how many: a RESTORE drops a vector, and a later delete may hide
    as many other rows of the same file."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return {}
    vectors = _deletion_vectors(table)
    return {_file_name(uri): _hidden(np.asarray(kept, dtype=bool)) for uri, kept in
            zip(vectors["filepath"].to_pylist(), vectors["selection_vector"].to_pylist())}


def _deletion_vectors(table: DeltaTable) -> pa.Table:
    """The table's deletion vectors; a refusal naming the feature where delta-rs cannot read them
    (it checks every reader feature of the protocol): without them no hour's rows are known."""
    try:
        return pa.table(table.deletion_vectors().read_all())
    except DeltaError as error:
        if (refused := features_delta_rs_refuses(error)) is None:
            raise
        features = ", ".join(table.protocol().reader_features or [])
        raise UnreadableTableFeature(
            f"the source table at {table.table_uri} lists the reader features {features}; deltalake cannot "
            f"read its deletion vectors beside {refused}, and without them the rows of no load hour are known. "
            "Drop that feature from the source (ALTER TABLE ... DROP FEATURE, e.g. vacuumProtocolCheck), or "
            "point the source at a table without it") from error


def _hidden(kept: np.ndarray) -> _Hidden:
    return _Hidden(int((~kept).sum()), hashlib.sha1(np.packbits(~kept).tobytes()).hexdigest()[:16])


def _rows_kept_by_vectors(table: DeltaTable) -> dict[str, np.ndarray]:
    """File name -> one flag per row, False where its deletion vector hides the row."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return {}
    vectors = _deletion_vectors(table)
    return {_file_name(uri): np.asarray(kept, dtype=bool) for uri, kept in
            zip(vectors["filepath"].to_pylist(), vectors["selection_vector"].to_pylist())}


def hours_changed_by_commits(path: str, after_version: int, until_version: int
                             ) -> list[tuple[int, frozenset[datetime] | None]]:
    """Each commit after `after_version` up to `until_version`, with the load hours its
    data-changing actions may touch (None: any hour, or the commit could not be read).

    A commit that only rearranges rows marks its actions `dataChange: false` (OPTIMIZE,
    Z-order, auto-compaction, a purge of deleted rows): it touches no hour, although its files
    change every fingerprint it covers. Following the log tells the two apart."""
    commits = []
    names = physical_names(DeltaTable(path, version=until_version))
    for version in range(after_version + 1, until_version + 1):
        actions = _commit_actions(path, version)
        if actions is None:
            commits.append((version, None))
            continue
        hours: set[datetime] | None = set()
        for kind, action in actions:
            if kind not in ("add", "remove") or not action.get("dataChange", True):
                continue
            touched = _action_hours(action, path, names)
            if touched is None:
                hours = None
                break
            hours.update(touched)
        commits.append((version, None if hours is None else frozenset(hours)))
    return commits


def _commit_actions(path: str, version: int) -> list[tuple[str, dict]] | None:
    """The actions of one commit of the Delta log at `path`; None when it cannot be read (the
    log's clean-up removes commits older than its retention)."""
    name = f"{path.rstrip('/')}/_delta_log/{version:020d}.json"
    try:
        store, inner = filesystem(name)
        with store.open_input_stream(inner) as stream:
            text = stream.read().decode()
    except (OSError, pa.ArrowException):
        return None
    return [next(iter(json.loads(line).items())) for line in text.splitlines() if line.strip()]


def _action_hours(action: dict, table_uri: str, names: dict[str, str]) -> list[datetime] | None:
    """The load hours an add or remove action's file may hold; None when unknown. `names`: each
    column's physical name, under which the action keeps its partition values and statistics."""
    load, collector = load_columns = tuple(names.get(column, column) for column in LOAD_COLUMNS)
    day = _as_date((action.get("partitionValues") or {}).get(names.get(PARTITION_COLUMN, PARTITION_COLUMN)))
    stats = json.loads(action["stats"]) if action.get("stats") else {}
    low, high, nulls = (stats.get(k) or {} for k in ("minValues", "maxValues", "nullCount"))

    def instant(values: dict, column: str) -> datetime | None:
        return datetime.fromisoformat(values[column]) if values.get(column) else None

    logged = LoadStatistics(instant(low, load), instant(high, load), nulls.get(load),
                            instant(low, collector), instant(high, collector), nulls.get(collector))
    # A file the log cannot place, gone now (a remove after a vacuum), may have held any hour:
    # its folder's day may be a loader's local date.
    placed = _placed(_file_uri(table_uri, action["path"]), day if places_every_row(logged) else None,
                     stats.get("numRecords"), logged, load_columns)
    if placed is None:
        return []  # rows without a load hour are never read
    first, last, held = placed
    if held is not None:
        return sorted(held)
    if first is None or last is None or last - first > WIDE_FILE_SPAN:
        return None  # a wide file that could not be read
    return [first + i * HOUR for i in range((last - first) // HOUR + 1)]


def holds_no_load_time(rows, nulls, c_nulls) -> bool:
    """Whether the statistics say every row of the file lacks both load_tstamp and collector_tstamp."""
    return rows is not None and rows > 0 and nulls == rows and c_nulls == rows


def file_hours(day, low, high, nulls, c_low, c_high) -> tuple[datetime | None, datetime | None]:
    """First and last load hour a Delta file may hold; None where unknown."""
    if low is not None and high is not None and nulls == 0:
        return floor_hour(low), floor_hour(high)
    if low is not None and high is not None and c_low is not None and c_high is not None:
        return floor_hour(min(low, c_low)), floor_hour(max(high, c_high))  # null load_tstamps too
    if day is not None:
        return _day_hours(day)
    return None, None


def _day_hours(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    return start, start + timedelta(hours=23)


def _parquet_files(path: str) -> list[_File] | None:
    """Every Parquet file under `path` (a local or object-store directory); None if it does not exist."""
    store, root = filesystem(path)
    info = store.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return None
    listing = store.get_file_info(pafs.FileSelector(root, recursive=True)) \
        if info.type == pafs.FileType.Directory else [info]
    files = []
    for entry in listing:
        if entry.type != pafs.FileType.File or not entry.path.endswith(".parquet"):
            continue
        relative = os.path.relpath(entry.path, root)
        day = _partition_day(relative)
        first, last = _day_hours(day) if day else (None, None)
        files.append(_File(f"{relative}|{entry.size}|{entry.mtime_ns}", first, last))
    return files


def _partition_day(relative_path: str) -> date | None:
    for part in relative_path.split("/")[:-1]:
        name, _, value = part.partition("=")
        if name == PARTITION_COLUMN:
            try:
                return date.fromisoformat(value)
            except ValueError:
                return None
    return None
