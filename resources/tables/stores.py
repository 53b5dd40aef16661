"""`table_store`: the engine for a Spark session and a warehouse root (see the package's text)."""

from __future__ import annotations

from incremental_assets.names import TABLE_ENGINES
from resources.tables.delta_rs import DeltaRsTableStore
from resources.tables.delta_spark import DeltaSparkTableStore, delta_spark_unavailable_reason
from resources.tables.interface import TableStore


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
