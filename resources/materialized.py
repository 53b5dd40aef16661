"""DataFrames a step computes once and reads several times.

`materialized` computes a DataFrame at once and keeps its rows on the executors (a local
checkpoint, memory then disk): every plan built on it starts from those rows, not from the
whole lineage behind them. With `.cache()` each later plan still carried the full lineage
(source reads over many files, the ~130 atomic columns, the dedupe and session joins), and
Spark analysed, optimised and matched it against every cached plan again, action after action:
in a warm hourly run that planning took longer than the Spark jobs themselves.

The cost: rows held by an executor that dies are gone (a cache would recompute them). A read
of them then fails with CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND, which `rows_were_lost` recognises
and the manifest IO manager retries as a transient failure: the step runs again from the
tables.

A checkpoint holds rows deserialized, every column: about 1.2 KB a row of the ~130 atomic
columns. A week of 10M events (2.75M rows) is 3.2 GB a set, where a 6 GB driver has about
3.4 GB for Spark's memory: the step's wide sets spilled to disk, and every later read, even of
two columns, deserialized all of them. So the wide sets of a big window are written once as
Parquet files under the warehouse's `_staging/` instead (`files_under`) and read back:
compressed, columnar, a read takes only its columns. An hour's rows stay checkpoints: they fit
in memory, and files would add a Parquet write and a listing to each of the three sets. Files
laid out as the table the rows go to are that write's files too: the table store links them
into the table (`staging.staged_set_of`) rather than writing the rows a second time.
"""

from __future__ import annotations

import os
import uuid
from typing import Sequence

from pyspark.sql import DataFrame

from resources.object_store import is_object_store
from resources.tables.staging import (
    StagedSet,
    StagingNotVisible,
    delete_staged_dir,
    forget_staged_set,
    remember_staged_set,
    staged_set_of,
    sweep_stale_staging,
    write_parquet_counted,
)

LOST_ROWS_ERROR = "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"


def held_in_memory(expected_rows: int | None, columns: int, values_max: int) -> bool:
    """Whether sets of `expected_rows` rows of `columns` columns are checkpointed (True) or
    written as files: up to `values_max` values (the setting `checkpoint_values_max`) they are
    held in memory, and so are unknown rows (a source without row statistics)."""
    return expected_rows is None or expected_rows * columns <= values_max


def materialized(df: DataFrame, *, files_under: str | None = None, partition_by: Sequence[str] = ()) -> DataFrame:
    """`df` computed now; its rows stay on the executors until `release`, or, with
    `files_under` (a warehouse root), as Parquet files under `<files_under>/_staging/<id>`,
    removed by `release` (or, after a crash, by the sweep of stale staged files). Files are laid
    out by `partition_by`: rows bound for a table partitioned so are written in its layout, and
    the table's write takes those files (TableStore.replace) instead of writing them again."""
    if files_under is None:
        return df.localCheckpoint(eager=True)
    sweep_stale_staging(files_under)
    path = f"{files_under}/_staging/{uuid.uuid4().hex}"
    try:
        rows = write_parquet_counted(df, path, partition_by)
    except BaseException:
        delete_staged_dir(path)  # a failed job can leave part files behind
        raise
    if not is_object_store(path) and not os.path.isdir(path):
        raise StagingNotVisible(path)  # this process could not remove them
    # The schema given, not inferred: the same types and no footer to read. Partition columns
    # come back last: the select puts every column where it was.
    staged = df.sparkSession.read.schema(df.schema).parquet(path).select(*df.columns)
    remember_staged_set(staged, StagedSet(path, tuple(partition_by), rows))
    return staged


def materialized_rows(df: DataFrame) -> int | None:
    """How many rows `df` holds if `materialized` wrote it as files (counted as they were
    written); None for a checkpoint, whose rows were not counted."""
    staged = staged_set_of(df)
    return staged.rows if staged is not None else None


class MaterializedSets:
    """`materialized`, keeping what it made, so that a step releases all of it together."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame, *, files_under: str | None = None, partition_by: Sequence[str] = ()) -> DataFrame:
        frame = materialized(df, files_under=files_under, partition_by=partition_by)
        self.frames.append(frame)
        return frame

    def release(self) -> None:
        for frame in self.frames:
            release(frame)


def release(df: DataFrame) -> None:
    """Free the rows `materialized` keeps; a later read of `df` fails (it never recomputes).

    Files are removed here. Classic Spark frees a checkpoint here; through Spark Connect the
    client has no handle on one: the server frees it when this process drops the DataFrame
    (PySpark tells it then)."""
    staged = forget_staged_set(df)
    if staged is not None:
        delete_staged_dir(staged.path)
        return
    jdf = getattr(df, "_jdf", None)  # None through Spark Connect
    if jdf is None:
        return
    plan = jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":  # what a checkpoint reads from
        plan.rdd().unpersist(False)


def rows_were_lost(error: BaseException) -> bool:
    """The error says materialized rows were gone (their executor died): worth a retry."""
    return LOST_ROWS_ERROR in str(error)
