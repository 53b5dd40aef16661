"""Write an event DataFrame as a Delta table partitioned by `load_date`, fast.

Spark writes the Parquet files itself (all cores, no trip through the driver) straight into
the table directory in hive layout (`load_date=2021-03-01/part-....parquet`); delta-rs then
commits exactly those files in one transaction:

- new table: `deltalake.transaction.create_table_with_add_actions`;
- existing table: `DeltaTable.create_write_transaction(mode="append" | "overwrite")`.

Spark needs no Delta jars for this. The add actions carry per-file statistics (row count;
null count and min/max of timestamp, date and integer columns) read from the Parquet footers,
and the table names those columns in `delta.dataSkippingStatsColumns`, so readers can skip
files by `load_tstamp`. Files Spark wrote that were never committed (a crash between the
write and the commit) are invisible to Delta readers and removed by a vacuum.

Local paths only (the warehouse and sample lakes live on local disk), and one writer at a
time per table: the files to commit are the ones that appeared during this write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import pyarrow as pa
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ByteType, DateType, IntegerType, LongType, ShortType, TimestampType

from incremental_assets.sources.schema import PARTITION_COLUMN
from resources.tables.parquet_stats import add_action
from resources.tables.staging import STATS_COLUMNS_PROPERTY

WriteMode = Literal["error", "overwrite", "append"]

# Columns that hold (nearly) one value per row: Parquet dictionaries cannot compress them and
# only cost time (about a third of the write time in the generator's measurements).
NO_DICTIONARY_COLUMNS = (
    "event_id",
    "event_fingerprint",
    "domain_sessionid",
    "domain_userid",
    "network_userid",
    "tr_orderid",
)


def write_source_table(df: DataFrame, out: str | os.PathLike, *, mode: WriteMode = "error") -> dict:
    """Write `df` as a Delta table at `out`, partitioned by `load_date`.

    mode "error" refuses a target that exists and is not empty; "overwrite" replaces the
    table's contents in one commit (older versions stay readable by time travel); "append"
    adds the rows (creating the table when it does not exist yet).
    The DataFrame is written as it is partitioned: callers that care about file sizes
    repartition first. Returns {rows, files, version, path}.
    """
    if mode not in ("error", "overwrite", "append"):
        raise ValueError(f"mode must be 'error', 'overwrite' or 'append', got {mode!r}")
    if PARTITION_COLUMN not in df.columns:
        raise ValueError(f"the DataFrame has no {PARTITION_COLUMN!r} column to partition by")

    _require_microsecond_timestamps(df)
    path = Path(out).expanduser().absolute()
    is_delta = DeltaTable.is_deltatable(str(path))
    not_empty = path.exists() and any(path.iterdir())
    if mode == "error" and not_empty:
        raise FileExistsError(
            f"{path} already exists and is not empty; use mode 'overwrite' or 'append'"
        )
    if not_empty and not is_delta:
        raise FileExistsError(
            f"{path} exists, is not empty and is not a Delta table; refusing to write into it"
        )
    if is_delta and mode == "append":
        _check_same_columns(DeltaTable(str(path)), df, path)

    path.mkdir(parents=True, exist_ok=True)
    before = set(_data_files(path))
    writer = (
        df.write.mode("append")  # into a directory that may hold committed files: never "overwrite"
        .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")  # no _SUCCESS file
        .partitionBy(PARTITION_COLUMN)
    )
    for column in NO_DICTIONARY_COLUMNS:
        if column in df.columns:
            writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    writer.parquet(str(path))
    new_files = sorted(set(_data_files(path)) - before)
    stats_columns = _stats_columns(df)
    actions = [add_action(path, relative, [PARTITION_COLUMN], stats_columns) for relative in new_files]
    # Spark writes every Parquet column as nullable, so the table schema says the same.
    schema = to_arrow_schema(df.schema, timezone="UTC")
    schema = DeltaSchema.from_arrow(pa.schema([field.with_nullable(True) for field in schema]))

    if is_delta:
        DeltaTable(str(path)).create_write_transaction(
            actions, mode=mode, schema=schema, partition_by=[PARTITION_COLUMN]
        )
    else:
        # Readers use file statistics only for the columns the table names (by default the
        # first 32, which would leave out load_tstamp): name the ones we keep bounds for.
        configuration = {STATS_COLUMNS_PROPERTY: ",".join(stats_columns)} if stats_columns else None
        create_table_with_add_actions(
            str(path),
            schema,
            actions,
            mode="error",
            partition_by=[PARTITION_COLUMN],
            configuration=configuration,
        )
    return {
        "rows": sum(json.loads(action.stats)["numRecords"] for action in actions),
        "files": len(actions),
        "version": DeltaTable(str(path)).version(),
        "path": str(path),
    }


def _require_microsecond_timestamps(df: DataFrame) -> None:
    """Spark's default Parquet timestamps (INT96) are legacy; Delta readers expect INT64 micros."""
    setting = "spark.sql.parquet.outputTimestampType"
    if df.sparkSession.conf.get(setting) != "TIMESTAMP_MICROS":
        raise ValueError(f"set {setting}=TIMESTAMP_MICROS (resources.spark.get_spark does)")


def _check_same_columns(table: DeltaTable, df: DataFrame, path: Path) -> None:
    """Appending other columns would silently change the table's schema: refuse instead."""
    table_columns = [field.name for field in table.schema().fields]
    if table_columns != df.columns:
        missing = [c for c in table_columns if c not in df.columns]
        added = [c for c in df.columns if c not in table_columns]
        raise ValueError(
            f"cannot append to {path}: columns differ from the table's "
            f"(missing {missing}, new {added}, or another order)"
        )


def _data_files(table_dir: Path) -> list[str]:
    """Parquet files under the partition directories, relative to the table root."""
    return [
        str(file.relative_to(table_dir))
        for file in table_dir.glob(f"{PARTITION_COLUMN}=*/*.parquet")
        if not file.name.startswith(".")
    ]


def _stats_columns(df: DataFrame) -> list[str]:
    """Columns whose min/max go into the Delta log: timestamps, dates and integers (what
    readers filter on). Strings are left out (their bounds prune nothing here and would
    bloat the log), and so are decimals (JSON numbers would pass through floats)."""
    bounded = (TimestampType, DateType, ByteType, ShortType, IntegerType, LongType)
    return [
        field.name
        for field in df.schema.fields
        if isinstance(field.dataType, bounded) and field.name != PARTITION_COLUMN
    ]
