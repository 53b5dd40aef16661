"""Delta table store: one small interface, two engines (DESIGN.md section 4).

Every table of the pipeline is a Delta Lake table under one warehouse root, addressed by a
plain name (`root/name`). The pipeline only talks to `TableStore` (`interface.py`):

- read a whole table or a half-open range `[start, end)` of a time column, as a Spark DataFrame;
- replace such a range atomically (delete the range and insert the new rows in one commit);
- merge by key, append with an idempotency token, overwrite, delete rows by value;
- table version and metadata; a Spark-free Arrow read for small tables.

Engines:

- `DeltaRsTableStore` ("delta-rs", `delta_rs.py`, the embedded default): the Delta log and
  every commit go through delta-rs; Spark only computes. Reads list the active files with
  delta-rs (`delta_log.py`) and let Spark read the Parquet files natively. A replace (every
  range write of the pipeline) has Spark write the Parquet files, moves them into the table
  and commits them with the files they replace in one delta-rs transaction
  (`direct_write.py`); merges, appends, overwrites and replaces that add columns stage the
  rows as Parquet written by Spark (`staging.py`) and stream them into one delta-rs commit.
  Needs no JVM jars.
- `DeltaSparkTableStore` ("delta-spark", `delta_spark.py`): native Delta inside Spark, for
  sessions that load the Delta jars and extension.

`table_store(spark, root, engine)` picks one ("auto": delta-spark when the session has a
loadable Delta extension, else delta-rs).
"""

from __future__ import annotations

from incremental_assets.names import TABLE_ENGINES
from resources.tables.delta_log import read_delta_arrow, utc_datetimes
from resources.tables.delta_rs import DeltaRsTableStore
from resources.tables.delta_spark import DeltaSparkTableStore, delta_spark_unavailable_reason
from resources.tables.interface import TableStore, WriteResult, check_identifier
from resources.tables.ranges import RowRange
from resources.tables.scans import Scan, recording_scans
from resources.tables.staging import sweep_stale_staging

__all__ = [
    "DeltaRsTableStore", "DeltaSparkTableStore", "RowRange", "Scan", "TableStore", "WriteResult", "check_identifier",
    "delta_spark_unavailable_reason", "read_delta_arrow", "recording_scans", "sweep_stale_staging",
    "table_store", "unshared_warehouse_problem", "utc_datetimes",
]


def unshared_warehouse_problem(master: str | None, root: str, shared: bool) -> str | None:
    """Why a warehouse on a local path cannot serve a Spark cluster (None when it can): each
    executor would write its files on its own host's disk, which the driver, committing them,
    never sees; a replace would delete a range and commit nothing in its place."""
    if shared or master is None or master.startswith("local") or ("://" in root and not root.startswith("file:")):
        return None
    return (f"warehouse {root} is a local path but Spark's master is {master}: executors on other "
            "hosts would write files the driver never sees. Put the warehouse on an object store "
            "(INCREMENTAL_WAREHOUSE=s3://bucket/path) or on a filesystem mounted at the same path on "
            "every host, and then declare it with INCREMENTAL_WAREHOUSE_SHARED=true")


def _spark_master(spark) -> str | None:
    """The session's master; None through Spark Connect (the server's, and the first write
    checks that the server sees the warehouse)."""
    try:
        return spark.sparkContext.master
    except Exception:
        return None


def table_store(spark, root: str, engine: str = "auto", *, shared: bool = False) -> TableStore:
    """The table store for this Spark session (setting `table_engine`); `shared` (setting
    `warehouse_shared`) says a local path is the same filesystem on every host of a cluster."""
    if engine not in TABLE_ENGINES:
        raise ValueError(
            f"table_engine: unknown engine {engine!r}; accepted values: "
            + ", ".join(repr(e) for e in TABLE_ENGINES)
        )
    problem = unshared_warehouse_problem(_spark_master(spark), root, shared)
    if problem:
        raise ValueError(problem)
    if engine == "auto":
        engine = "delta-spark" if delta_spark_unavailable_reason(spark) is None else "delta-rs"
    if engine == "delta-spark":
        return DeltaSparkTableStore(spark, root)
    return DeltaRsTableStore(spark, root)
