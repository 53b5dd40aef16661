"""Delta table store: one small interface, two engines (DESIGN.md section 4).

Every table of the pipeline is a Delta Lake table under one warehouse root, addressed by a
plain name (`root/name`). The pipeline only talks to `TableStore` (`interface.py`):

- read a whole table or a half-open range `[start, end)` of a time column, as a Spark DataFrame;
- replace such a range atomically (delete the range and insert the new rows in one commit);
- merge by key, append with an idempotency token, overwrite, delete rows by value;
- table version and metadata; a Spark-free Arrow read for small tables;
- `NoTableAt` (a FileNotFoundError) from any operation that needs a table where there is none.

Engines:

- `DeltaRsTableStore` ("delta-rs", `delta_rs.py`, the embedded default): the Delta log and
  every commit go through delta-rs; Spark only computes. Reads list the active files with
  delta-rs (`delta_log.py`) and let Spark read the Parquet files natively. A replace (every
  range write of the pipeline) has Spark write the Parquet files, moves them into the table
  and commits them with the files they replace in one delta-rs transaction
  (`direct_write.py`); merges, appends, overwrites and replaces that add columns stage the
  rows as Parquet written by Spark (`staging.py`) and stream them into one delta-rs commit.
  A write the caller marks `small` (an hour's rows) is collected as Arrow instead, up to
  `COLLECTED_VALUES_MAX` values, and delta-rs writes it. Needs no JVM jars.
- `DeltaSparkTableStore` ("delta-spark", `delta_spark.py`): native Delta inside Spark, for
  sessions that load the Delta jars and extension.

`table_store(spark, root, engine)` (`stores.py`) picks one ("auto": delta-spark when the session
has a loadable Delta extension, else delta-rs).

The package exports only what is cheap to import. The engines, `stores.py` and the staging
sweep import pandas (through pyarrow.dataset): their callers import them from their own
modules, so a process that only plans or reads small tables need not load them.
"""

from __future__ import annotations

from resources.tables.delta_log import NoTableAt, append_arrow, read_delta_arrow, utc_datetimes
from resources.tables.interface import TableStore, WriteResult, check_identifier, no_rows, rows_collected_at_most
from resources.tables.ranges import RowRange
from resources.tables.scans import Scan, recording_scans

__all__ = [
    "NoTableAt", "RowRange", "Scan", "TableStore", "WriteResult", "append_arrow", "check_identifier", "no_rows",
    "read_delta_arrow", "recording_scans", "rows_collected_at_most", "utc_datetimes",
]
