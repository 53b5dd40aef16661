"""The delta-spark engine: native Delta inside Spark, for sessions that load the Delta jars
and extension (clusters, or any machine whose Spark reaches Maven)."""

from __future__ import annotations

import functools
import operator
import uuid
import weakref
from dataclasses import replace
from typing import Callable, Sequence

import delta.exceptions as delta_errors
from delta.tables import DeltaTable as SparkDeltaTable
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from incremental_assets.planning.compaction import merges_small_files
from resources.delta_jars import DELTA_EXTENSION_CLASS, delta_coordinate
from resources.tables.delta_log import (
    NoTableAt,
    commits_since,
    file_sizes_by_partition_values,
    is_delta_table,
    required_table,
    row_count,
    unreferenced_files,
)
from resources.tables.interface import (
    APPEND_TOKEN_TXN_VERSION,
    COMPACTED_FILE_BYTES,
    KEY_PRESENT,
    TableCreatedConcurrently,
    TableStore,
    WriteResult,
    append_token_app_id,
    check_columns_present,
    check_identifier,
    replace_keys_source,
    retry_on_conflict,
)
from resources.tables.ranges import (
    normalise_range,
    out_of_range_error,
    resolve_rows,
    spark_range_condition,
    spark_sql_rows_predicate,
    spark_type_name,
)

# Whether a class loads, per driver JVM (SparkContext): every table store asks, and the
# answer, a handful of Py4J round trips, cannot change while that JVM lives.
_LOADABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jvm_class_loadable(spark, class_name: str) -> bool | None:
    """Whether the driver JVM can load a class; None when there is no JVM to ask (Connect)."""
    try:
        jvm, context = spark._jvm, spark.sparkContext
    except Exception:
        return None
    if jvm is None:
        return None
    known = _LOADABLE.setdefault(context, {})
    if class_name not in known:
        try:
            jvm.org.apache.spark.util.Utils.classForName(class_name, True, False)
            known[class_name] = True
        except Exception:
            known[class_name] = False
    return known[class_name]


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
        "delta-spark engine: " + "; ".join(problems) + ". To enable it, run 'make setup' (or "
        "'python -m resources.delta_jars'), which caches the Delta jars "
        f"{delta_coordinate()} that every session then loads; or start Spark with those jars "
        f"(spark.jars.packages) plus spark.sql.extensions={DELTA_EXTENSION_CLASS} and "
        "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog; "
        "or use table_engine=delta-rs."
    )


def _delta_spark_conflicts() -> tuple[type[BaseException], ...]:
    return (
        delta_errors.DeltaConcurrentModificationException,
        delta_errors.ConcurrentWriteException,
        delta_errors.MetadataChangedException,
        delta_errors.ProtocolChangedException,
        delta_errors.ConcurrentAppendException,
        delta_errors.ConcurrentDeleteReadException,
        delta_errors.ConcurrentDeleteDeleteException,
        delta_errors.ConcurrentTransactionException,
        TableCreatedConcurrently,
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
        path = self.path(name)
        return SparkDeltaTable.forPath(self.spark, path) if self.exists(name) else None

    def _commit(self, operation: Callable[[], WriteResult]) -> WriteResult:
        return retry_on_conflict(operation, _delta_spark_conflicts())

    def _commit_by_marker(self, name: str, marker: str, after_version: int | None) -> dict | None:
        """Our own commit in the history, found by the userMetadata we gave it (read from the
        log by delta-rs: a Spark query of the history cost every write a job)."""
        for commit in commits_since(self.path(name), after_version):
            if commit.get("userMetadata") == marker:
                return commit
        return None

    def _result(self, name: str, marker: str, after_version: int | None,
                deleted_metric: str | None = None) -> WriteResult:
        """WriteResult of our marked commit; no such commit means Delta skipped the write."""
        commit = self._commit_by_marker(name, marker, after_version)
        if commit is None:
            return WriteResult(rows_written=0, version=self.version(name), skipped=True)
        metrics = commit.get("operationMetrics") or {}

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
                raise TableCreatedConcurrently(self.path(name)) from error
            raise
        return True

    # -- reads ---------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        # From the log, as delta-rs reads it: Spark's check loads the table's snapshot.
        return is_delta_table(self.path(name))

    def read(self, name: str, columns: Sequence[str] | None = None):
        return self.read_path(self.path(name), columns)

    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        return self.read_path_range(self.path(name), column, start, end, columns)

    def read_path(self, path: str, columns: Sequence[str] | None = None, version: int | None = None):
        df = self._load(path, version)
        return df.select(*columns) if columns else df

    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None,
                        version: int | None = None):
        check_identifier(column, "range column")
        df = self._load(path, version)
        column_type = spark_type_name(df.schema, column, f"read_range {path}")
        lo, hi = normalise_range(column, column_type, start, end)
        df = df.where(spark_range_condition(column, lo, hi))  # Delta skips files by stats
        return df.select(*columns) if columns else df

    def _load(self, path: str, version: int | None = None):
        """The table at `path` (at `version`); NoTableAt where there is none, as delta-rs says it
        (Spark's own error names a missing folder and a folder without a log differently)."""
        reader = self.spark.read.format("delta")
        try:
            return (reader.option("versionAsOf", version) if version is not None else reader).load(path)
        except AnalysisException as error:
            if not is_delta_table(path):
                raise NoTableAt(path) from error
            raise

    # -- writes --------------------------------------------------------------------------

    def replace(self, name, df, *, rows, partition_by=None, small=False) -> WriteResult:
        for row_range in rows:
            check_identifier(row_range.column, "range column")
            if row_range.key is not None:
                check_identifier(row_range.key, "key column")
        partition_by = self._check_partition_by(partition_by, df.columns)
        check_columns_present(df.columns, sorted({r.column for r in rows}), f"replace {name}")
        self._check_column_types(name, df, "replace")
        ranges = resolve_rows(rows, df.schema, f"replace {name}")
        # One Spark job counts the rows and names the first one outside the ranges (Delta's own
        # check would only fail). Delta's numOutputRows also counts the rows a replace copies
        # from the files it rewrites, so the count is the data's own.
        inside = functools.reduce(operator.or_, [spark_range_condition(r.column, r.lo, r.hi) for r in ranges],
                                  F.lit(False))
        outside = ~F.coalesce(inside, F.lit(False))
        example = F.first(F.when(outside, F.col(ranges[0].column)), ignorenulls=True) if ranges else F.lit(None)
        rows_given, rows_outside, first_outside = df.agg(
            F.count(F.lit(1)), F.count(F.when(outside, 1)), example).first()
        if rows_outside:
            if not ranges:
                raise ValueError("replace: rows were given but the selection selects nothing")
            raise out_of_range_error(ranges[0].column, ranges[0].lo, ranges[0].hi, first_outside)

        def attempt() -> WriteResult:
            marker = f"replace {uuid.uuid4()}"
            before = self.version(name)
            if self._create_if_missing(name, df, partition_by, marker):
                return self._result(name, marker, None)
            (df.write.format("delta").mode("overwrite")
               .option("replaceWhere", spark_sql_rows_predicate(ranges))
               .option("mergeSchema", "true")
               .option("userMetadata", marker)
               .save(self.path(name)))
            return replace(self._result(name, marker, before, "numDeletedRows"), rows_written=rows_given)

        return self._commit(attempt)

    def replace_keys(self, name, df, *, key, keys, small=False) -> WriteResult:
        check_identifier(key, "key column")
        check_columns_present(df.columns, [key], f"replace_keys {name}")
        self._check_column_types(name, df, "replace_keys")
        # One Spark job checks the keys and counts the rows.
        most, nulls, rows = df.groupBy(key).count().agg(
            F.max("count"), F.count(F.when(F.col(key).isNull(), 1)), F.sum("count")).first()
        if nulls or (most or 0) > 1:
            raise ValueError(f"replace_keys {name}: key {key!r} is not unique or has null values in the data")
        source = replace_keys_source(df, keys, key)
        values = {c: f"s.`{c}`" for c in df.columns}

        def attempt() -> WriteResult:
            marker = f"replace_keys {uuid.uuid4()}"
            if self._create_if_missing(name, df, [], marker):
                return self._result(name, marker, None)
            (self._delta_table(name).alias("t")
                 .merge(source.alias("s"), f"t.`{key}` = s.`{key}`")
                 .whenMatchedDelete(condition=f"NOT s.`{KEY_PRESENT}`")
                 .whenMatchedUpdate(set=values)
                 .whenNotMatchedInsert(condition=f"s.`{KEY_PRESENT}`", values=values)
                 .withSchemaEvolution()
                 .execute())
            return WriteResult(rows_written=rows or 0, version=self.version(name))

        return self._commit(attempt)

    def merge(self, name, df, *, keys, partition_by=None, small=False) -> WriteResult:
        keys = [check_identifier(k, "merge key") for k in keys]
        if not keys:
            raise ValueError("merge: keys must name at least one column")
        check_columns_present(df.columns, keys, f"merge {name}")
        self._check_column_types(name, df, "merge")
        partition_by = self._check_partition_by(partition_by, df.columns)
        # One Spark job checks the keys and counts the rows.
        key_counts = df.groupBy(*keys).count()
        any_null_key = functools.reduce(operator.or_, [F.col(k).isNull() for k in keys])
        most, rows, null_keys = key_counts.agg(
            F.max("count"), F.sum("count"), F.count(F.when(any_null_key, 1))).first()
        if null_keys:
            raise ValueError(f"merge {name}: key columns {keys} have null values (null keys never match)")
        if most and most > 1:
            duplicate = key_counts.where(F.col("count") > 1).first()
            raise ValueError(f"merge {name}: keys {keys} are not unique in the data; e.g. "
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

    def append(self, name, df, *, token=None, partition_by=None, small=False) -> WriteResult:
        app_id = append_token_app_id(token) if token is not None else None
        partition_by = self._check_partition_by(partition_by, df.columns)
        self._check_column_types(name, df, "append")

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

    def overwrite(self, name, df, *, partition_by=None, small=False) -> WriteResult:
        partition_by = self._check_partition_by(partition_by, df.columns)

        def attempt() -> WriteResult:
            marker = f"overwrite {uuid.uuid4()}"
            before = self.version(name)
            # Delta reports no deleted rows for a whole-table overwrite: count them in the
            # version it replaces, from its files' statistics in the log.
            rows_before = None if before is None else self._rows_at(name, before)
            writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
                       .option("userMetadata", marker)
            if partition_by:
                writer = writer.partitionBy(*partition_by)
            writer.save(self.path(name))
            return replace(self._result(name, marker, before), rows_deleted=rows_before)

        return self._commit(attempt)

    def _rows_at(self, name: str, version: int) -> int:
        """The table's rows at `version`: from the log's file statistics; Spark counts them
        where a file has none."""
        counted = row_count(required_table(self.path(name), version))
        if counted is not None:
            return counted
        return self.spark.read.format("delta").option("versionAsOf", version).load(self.path(name)).count()

    def delete_where_in(self, name, column, values) -> WriteResult:
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
            last = commits_since(self.path(name), None, limit=1)[0]
            metrics = last.get("operationMetrics") or {}
            deleted = int(metrics["numDeletedRows"]) if "numDeletedRows" in metrics else None
            return WriteResult(rows_written=0, version=last["version"], rows_deleted=deleted)

        return self._commit(attempt)

    # -- maintenance ---------------------------------------------------------------------

    def compact(self, name, *, partitions=None) -> int:
        table = required_table(self.path(name))
        columns = table.metadata().partition_columns
        if columns and partitions is not None and not partitions:
            return 0
        # OPTIMIZE runs Spark jobs even to find nothing to merge; the log tells that first.
        chosen = partitions if columns else None
        if not merges_small_files(file_sizes_by_partition_values(table, chosen), COMPACTED_FILE_BYTES):
            return 0
        builder = SparkDeltaTable.forPath(self.spark, self.path(name)).optimize()
        if chosen is not None:
            # The builder takes SQL text only: the values go in as quoted literals.
            literals = ", ".join("'" + str(p).replace("'", "''") + "'" for p in chosen)
            builder = builder.where(f"`{columns[0]}` IN ({literals})")
        self.spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(COMPACTED_FILE_BYTES))
        metrics = builder.executeCompaction().select("metrics.numFilesRemoved").collect()
        return int(metrics[0][0]) if metrics else 0

    def vacuum(self, name, *, retention_hours) -> int:
        path = self.path(name)
        # The files to delete, listed from the log and the table's directory by delta-rs (the
        # rule VACUUM applies), rather than by a dry-run VACUUM: Spark's VACUUM then runs only
        # where there is something to delete.
        # Hadoop's local filesystem keeps a hidden checksum file beside each file Spark writes;
        # VACUUM deletes it with its file and counts the file only.
        doomed = [f for f in unreferenced_files(path, retention_hours) if not f.rsplit("/", 1)[-1].startswith(".")]
        if not doomed:
            return 0
        # Delta refuses a retention under its default (7 days) unless this check is off.
        self.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        quoted = path.replace("`", "``")
        self.spark.sql(f"VACUUM delta.`{quoted}` RETAIN {float(retention_hours)} HOURS")
        return len(doomed)
