"""Load Snowplow CSV exports (header row, one atomic event per record) into a source table.

Snowplow's exports (and the peer test data) write null as an empty string, timestamps as
'2021-03-01 21:39:43.815' (UTC) and context columns as quoted JSON with embedded commas,
quotes and sometimes newlines. Every cell is read as a string and then typed by
`conform_to_atomic`, so a wrong-typed cell becomes null instead of failing the load.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from incremental_assets.sources.schema import conform_to_atomic
from incremental_assets.sources.writer import WriteMode, write_source_table


def read_snowplow_csv(spark: SparkSession, file: str | os.PathLike) -> DataFrame:
    """One CSV export as all-string columns, empty cells as null."""
    path = Path(file).expanduser().absolute()
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    df = (
        spark.read.option("header", True)
        .option("multiLine", True)  # quoted cells may hold newlines
        .option("quote", '"')
        .option("escape", '"')  # a quote inside a quoted cell is written twice ("")
        .option("mode", "PERMISSIVE")
        .csv(str(path))  # no schema inference: every column is a string
    )
    return df.select([F.when(F.col(f"`{c}`") != "", F.col(f"`{c}`")).alias(c) for c in df.columns])


def load_csv(
    spark: SparkSession,
    files: Sequence[str | os.PathLike] | str | os.PathLike,
    out: str | os.PathLike,
    *,
    load_tstamp_fallback: str | None = None,
    mode: WriteMode = "error",
) -> dict:
    """Load Snowplow CSV exports into a Delta source table at `out` (ATOMIC_EVENTS_SCHEMA first,
    any other columns after, as strings).

    Files may have different columns (exports of different pipelines); missing ones are null.
    With `load_tstamp_fallback` (e.g. 'collector_tstamp'), a row without load_tstamp takes
    that column's value. Returns the writer's {rows, files, version, path} plus the inputs.
    """
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not files:
        raise ValueError("no CSV files given")
    frames = [read_snowplow_csv(spark, file) for file in files]
    raw = reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), frames)

    if load_tstamp_fallback is not None:
        if load_tstamp_fallback not in raw.columns:
            raise ValueError(
                f"load_tstamp_fallback column {load_tstamp_fallback!r} is not in the CSV files "
                f"(columns: {', '.join(raw.columns)})"
            )
        load_tstamp = F.col("load_tstamp") if "load_tstamp" in raw.columns else F.lit(None).cast("string")
        raw = raw.withColumn("load_tstamp", F.coalesce(load_tstamp, F.col(f"`{load_tstamp_fallback}`")))

    written = write_source_table(conform_to_atomic(raw), out, mode=mode)
    return {**written, "inputs": [str(Path(file).expanduser().absolute()) for file in files]}
