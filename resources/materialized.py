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
"""

from __future__ import annotations

from pyspark.sql import DataFrame

LOST_ROWS_ERROR = "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"


def materialized(df: DataFrame) -> DataFrame:
    """`df` computed now; its rows stay on the executors until `release`."""
    return df.localCheckpoint(eager=True)


def release(df: DataFrame) -> None:
    """Free the rows `materialized` keeps; a later read of `df` fails (it never recomputes).

    Classic Spark frees them here. Through Spark Connect the client has no handle on them:
    the server frees them when this process drops the DataFrame (PySpark tells it then)."""
    jdf = getattr(df, "_jdf", None)  # None through Spark Connect
    if jdf is None:
        return
    plan = jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":  # what a checkpoint reads from
        plan.rdd().unpersist(False)


def rows_were_lost(error: BaseException) -> bool:
    """The error says materialized rows were gone (their executor died): worth a retry."""
    return LOST_ROWS_ERROR in str(error)
