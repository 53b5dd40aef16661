"""The delta-rs engine (the embedded default): the Delta log and every commit go through
delta-rs; Spark computes and reads the active Parquet files natively."""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import create_table_with_add_actions
from pyspark.sql.pandas.types import to_arrow_schema

from resources.tables.column_types import check_column_types
from resources.tables.delta_log import (
    CHECKPOINT_INTERVAL_PROPERTY,
    NEW_TABLE_CONFIGURATION,
    absolute_file_paths,
    add_actions,
    features_delta_rs_refuses,
    files_in_selection,
    load_table,
    prune_files,
    read_on_executors,
    read_with_spark_delta,
    required_table,
    row_count,
    spark_can_read_files,
    spark_parses_partition_dirs,
    spark_schema,
    without_view_types,
)
from resources.tables.direct_write import (
    REPLACE_APP_ID,
    SparkFiles,
    StagedFiles,
    commit_replace,
    remove_actions,
    table_stats_columns,
    writes_directly,
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
    no_rows,
    replace_keys_source,
    retry_on_conflict,
)
from resources.tables.ranges import (
    DELTA_RS_IN_LIST_LIMIT,
    check_arrow_rows_in_ranges,
    delta_rs_in_predicate,
    delta_rs_range_predicate,
    delta_rs_rows_predicate,
    fits_delta_rs_predicate,
    normalise_range,
    resolve_rows,
    spark_range_condition,
    spark_rows_condition,
    spark_type_name,
)
from resources.tables.scans import record_scan
from resources.tables.staging import (
    RowsToWrite,
    StagedRows,
    check_unique_non_null_keys,
    collected_rows,
    delta_field,
    new_table_configuration,
    staged_set_of,
)
from resources.tables.staging import stats_columns as stats_columns_of


@contextlib.contextmanager
def _losing_to_a_concurrent_creator(path: str):
    """Creating the table at `path`: a failure because another writer created it first becomes
    TableCreatedConcurrently (retried as a conflict)."""
    try:
        yield
    except DeltaError as error:
        if DeltaTable.is_deltatable(path):
            raise TableCreatedConcurrently(path) from error
        raise


class DeltaRsTableStore(TableStore):
    """Delta log and commits through delta-rs; Spark reads the Parquet files natively."""

    engine_name = "delta-rs"
    # A predicate overwrite rewrites every file holding a selected row, so its files are cut at
    # this size: an hour's changed sessions then rewrite the few recent files holding them, not
    # their whole day (delta-rs's default is 100 MB; the maintenance job's compaction merges the
    # recent days' files into files of up to 100 MB again, in their order).
    rewritten_file_bytes = 8 * 1024 * 1024

    # -- reads ---------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.path(name))

    def read(self, name: str, columns: Sequence[str] | None = None):
        return self._read(self.path(name), columns)

    def read_range(self, name: str, column: str, start, end, columns: Sequence[str] | None = None):
        return self._read(self.path(name), columns, (check_identifier(column, "range column"), start, end))

    def read_path(self, path: str, columns: Sequence[str] | None = None, version: int | None = None):
        return self._read(path, columns, version=version)

    def read_path_range(self, path: str, column: str, start, end, columns: Sequence[str] | None = None,
                        version: int | None = None):
        return self._read(path, columns, (check_identifier(column, "range column"), start, end), version)

    def _require(self, name: str) -> DeltaTable:
        return required_table(self.path(name))

    def _read(self, path: str, columns: Sequence[str] | None, time_range=None, version: int | None = None):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        table = required_table(path, version)
        schema = spark_schema(table)
        if columns:
            check_columns_present(schema.names, columns, f"read {name}")
        pruning = None  # (column, column type, lo, hi) of a range read
        if time_range is not None:
            column, start, end = time_range
            column_type = spark_type_name(schema, column, f"read_range {name}")
            pruning = (column, column_type, *normalise_range(column, column_type, start, end))

        if spark_can_read_files(table):
            df = self._files_dataframe(path, table, schema, pruning)
        else:  # deletion vectors, column mapping: Spark's Delta reader, on the executors
            df = read_on_executors(self.spark, path, table.version())
        if df is None:  # Spark cannot read it here: delta-rs reads it into the driver
            df = self._arrow_dataframe(path, table, schema, pruning)
        if pruning is not None:
            column, _, lo, hi = pruning
            df = df.where(spark_range_condition(column, lo, hi))  # exact rows, after file pruning
        return df.select(*columns) if columns else df

    def _files_dataframe(self, table_path: str, table: DeltaTable, schema, pruning):
        """Spark reads the table's active Parquet files directly; None if it cannot."""
        actions = add_actions(table)
        if pruning is not None:
            column, column_type, lo, hi = pruning
            actions = prune_files(actions, column, column_type,
                                  column in table.metadata().partition_columns, lo, hi)
        return self._read_files(table_path, table, schema, actions)

    def _read_files(self, table_path: str, table: DeltaTable, schema, actions: pa.Table):
        """Spark reads these files of the table (rows of `add_actions`); None if it cannot."""
        record_scan(table_path, actions)
        if actions.num_rows == 0:
            return no_rows(self.spark, schema)
        partition_columns = table.metadata().partition_columns
        reader = self.spark.read.schema(schema)
        if partition_columns:
            relative = [unquote(p) for p in actions["path"].to_pylist()]
            if not spark_parses_partition_dirs(relative, partition_columns):
                return None
            if any(schema[c].dataType.typeName() == "timestamp" for c in partition_columns) and \
                    self.spark.conf.get("spark.sql.session.timeZone") not in ("UTC", "Etc/UTC", "Z", "+00:00"):
                return None  # Spark would parse timestamp partition values in the session zone
            # Partition values live in the directory names (not in the files); with basePath
            # and the table schema given, Spark attaches them with the schema's types.
            reader = reader.option("basePath", table_path)
        files = absolute_file_paths(table_path, actions)
        df = reader.parquet(*files)
        # Partition discovery puts the partition columns last, in directory order (checked above
        # to be the table's): restore the table's column order where that moved one. Known here,
        # not asked of Spark: through Spark Connect each `df.columns` is a round trip in which the
        # server resolves the read again, listing its files.
        spark_order = [c for c in schema.names if c not in partition_columns] + partition_columns
        return df if spark_order == schema.names else df.select(*schema.names)

    def _arrow_dataframe(self, path: str, table: DeltaTable, schema, pruning):
        """Fallback: delta-rs scans (honouring deletion vectors and column mapping); Spark's own
        Delta reader where delta-rs refuses a feature of the table's protocol."""
        predicate = None
        if pruning is not None:
            column, column_type, lo, hi = pruning
            predicate = delta_rs_range_predicate(column, column_type, lo, hi)
        try:
            stream = table.scan(predicate=predicate)
        except DeltaError as error:
            if (features := features_delta_rs_refuses(error)) is None:
                raise
            return read_with_spark_delta(self.spark, path, table.version(), features)
        data = pa.RecordBatchReader.from_stream(stream).read_all()
        return self.spark.createDataFrame(without_view_types(data), schema=schema)

    # -- writes --------------------------------------------------------------------------

    def _stage(self, df, small: bool = False) -> RowsToWrite:
        """The write's rows, computed once: collected when the caller expects few and they are
        (`collected_rows`), else staged as Parquet files."""
        collected = collected_rows(df) if small else None
        return collected if collected is not None else StagedRows(df, self.root)

    def _write_arrow(self, target: DeltaTable | str, data: RowsToWrite, **options) -> None:
        """Every data write goes through here: delta-rs streams the rows (staged or collected) into files."""
        write_deltalake(target, data.reader(), **options)

    def _create(self, path: str, data: RowsToWrite, partition_by: list[str], *, rows_deleted: int | None,
                commit_properties: CommitProperties | None = None) -> WriteResult:
        """Create the table with `data` as version 0; a concurrent creator makes us retry."""
        with _losing_to_a_concurrent_creator(path):
            self._write_arrow(path, data, mode="error", partition_by=partition_by or None,
                              commit_properties=commit_properties, configuration=new_table_configuration(data.schema))
        return WriteResult(rows_written=data.num_rows, version=0, rows_deleted=rows_deleted)

    def _commit(self, operation: Callable[[], WriteResult]) -> WriteResult:
        return retry_on_conflict(operation, (CommitFailedError, TableCreatedConcurrently))

    def _rows_deleted(self, path: str, rows_before: int | None, version_before: int,
                      after: DeltaTable, rows_added: int) -> int | None:
        """Rows the commit that produced `after` removed: before + added - after."""
        if after.version() != version_before + 1:  # other commits landed in between
            rows_before = row_count(DeltaTable(path, version=after.version() - 1))
        rows_after = row_count(after)
        if rows_before is None or rows_after is None:
            return None
        return rows_before + rows_added - rows_after

    def _overwrite_counted(self, path: str, table: DeltaTable, data: StagedRows, **options) -> WriteResult:
        """Overwrite the table (or the rows `predicate` selects) with data in one commit and
        report how many rows that replaced."""
        rows_before, version_before = row_count(table), table.version()
        if options.get("predicate"):
            options["target_file_size"] = self.rewritten_file_bytes
        self._write_arrow(table, data, mode="overwrite", **options)
        return WriteResult(
            rows_written=data.num_rows, version=table.version(),
            rows_deleted=self._rows_deleted(path, rows_before, version_before, table, data.num_rows))

    def replace(self, name, df, *, rows, partition_by=None, small=False) -> WriteResult:
        path = self.path(name)
        for row_range in rows:
            check_identifier(row_range.column, "range column")
            if row_range.key is not None:
                check_identifier(row_range.key, "key column")
        table = load_table(path)
        table_schema = spark_schema(table) if table is not None else None
        check_column_types(name, table_schema, df.schema, "replace")
        # Few rows are collected and committed by delta-rs; more go straight to files when they can.
        collected = collected_rows(df) if small else None
        if collected is None and writes_directly(self.spark, self.root, table, df.schema, table_schema,
                                                 partition_by or []):
            return self._replace_directly(name, table, table_schema, df, rows, partition_by)
        with (collected if collected is not None else self._stage(df)) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)
            check_columns_present(data.column_names, sorted({r.column for r in rows}), f"replace {name}")

            def attempt() -> WriteResult:
                table = load_table(path)
                schema = spark_schema(table) if table is not None else df.schema
                ranges = resolve_rows(rows, schema, f"replace {name}")
                check_arrow_rows_in_ranges(data.columns(sorted({r.column for r in ranges})), ranges)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=0)
                return self._overwrite_counted(path, table, data, schema_mode="merge",
                                               predicate=delta_rs_rows_predicate(ranges))

            return self._commit(attempt)

    def _replace_directly(self, name, table: DeltaTable | None, table_schema, df, rows, partition_by) -> WriteResult:
        """replace() with Spark writing the files (or linking those of the staged set `df` reads,
        if it is one) and one commit of file actions (direct_write)."""
        path, what = self.path(name), f"replace {name}"
        written_as = staged_set_of(df)
        df = df if table is None else df.select(*table_schema.names)
        check_columns_present(df.columns, sorted({r.column for r in rows}), what)
        partition_by = (table.metadata().partition_columns if table is not None
                        else self._check_partition_by(partition_by, df.columns))
        arrow_schema = pa.schema([delta_field(f) for f in to_arrow_schema(df.schema, timezone="UTC")])
        ranges = resolve_rows(rows, df.schema, what)
        with SparkFiles(df, self.root, partition_by, written_as=written_as) as new:
            check_arrow_rows_in_ranges(new.columns(sorted({r.column for r in ranges}), arrow_schema), ranges)
            return self._commit(lambda: self._commit_replace(path, new, ranges, arrow_schema, partition_by))

    def _commit_replace(self, path, new: SparkFiles, ranges, arrow_schema, partition_by) -> WriteResult:
        """One attempt on the current snapshot: remove the files holding selected rows and add the
        new ones in one commit. Where files also hold other rows, delta-rs rewrites them from the
        staged rows itself (a predicate overwrite: natively, and fast on the few small files of
        an hour; a Spark rewrite of them cost a warm hour 2 s and a cold one 15 s); only a
        selection too large for a delta-rs predicate has Spark rewrite their other rows."""
        table = load_table(path)
        if table is not None:
            whole, partly = files_in_selection(add_actions(table), ranges, table.metadata().partition_columns)
            if partly.num_rows and fits_delta_rs_predicate(ranges):
                staged = StagedFiles(new, arrow_schema)
                return self._overwrite_counted(path, table, staged, schema_mode="merge",
                                               predicate=delta_rs_rows_predicate(ranges))
        adds = new.move_into(path, table_stats_columns(table) if table is not None else stats_columns_of(arrow_schema))
        try:
            if table is None:
                return self._create_from_files(path, adds, arrow_schema, partition_by, new.num_rows)
            kept_adds, kept_rows, kept = [], 0, None
            if partly.num_rows:
                others = self._read_files(path, table, spark_schema(table), partly)
                if others is None:
                    raise RuntimeError(f"{path}: Spark cannot read the files a direct replace must rewrite")
                kept = SparkFiles(others.where(~spark_rows_condition(ranges)), self.root, partition_by)
                kept_adds = kept.move_into(path, table_stats_columns(table))
                kept_rows = kept.num_rows
            try:
                removed = pa.concat_tables([whole, partly])
                version = commit_replace(table, remove_actions(removed), adds + kept_adds)
            except BaseException:
                if kept is not None:
                    kept.move_back()
                raise
            finally:
                if kept is not None:
                    kept.close()
        except BaseException:
            new.move_back()  # a later attempt may stage them differently
            raise
        counts = removed["num_records"]
        rows_deleted = None if counts.null_count else (pc.sum(counts).as_py() or 0) - kept_rows
        return WriteResult(rows_written=new.num_rows, version=version, rows_deleted=rows_deleted)

    def _create_from_files(self, path, adds, arrow_schema, partition_by, rows_written) -> WriteResult:
        with _losing_to_a_concurrent_creator(path):
            create_table_with_add_actions(path, DeltaSchema.from_arrow(arrow_schema), adds, mode="error",
                                          partition_by=partition_by or None,
                                          configuration=new_table_configuration(arrow_schema),
                                          commit_properties=CommitProperties(
                                              app_transactions=[Transaction(REPLACE_APP_ID, 0)]))
        return WriteResult(rows_written=rows_written, version=0, rows_deleted=0)

    def replace_keys(self, name, df, *, key, keys, small=False) -> WriteResult:
        path = self.path(name)
        check_identifier(key, "key column")
        columns = df.columns
        check_columns_present(columns, [key], f"replace_keys {name}")
        self._check_column_types(name, df, "replace_keys")
        source = replace_keys_source(df, keys, key)
        with self._stage(source, small) as data:
            present = data.columns([key, KEY_PRESENT])
            check_unique_non_null_keys(present.filter(present[KEY_PRESENT]), [key], f"replace_keys {name}")
            written = pc.sum(present[KEY_PRESENT].cast(pa.int64())).as_py() or 0
            values = {c: f's."{c}"' for c in columns}

            def attempt() -> WriteResult:
                table = load_table(path)
                if table is None:
                    return self._create_from_df(path, df, small)
                (table.merge(data.reader(), predicate=f't."{key}" = s."{key}"', source_alias="s",
                             target_alias="t", merge_schema=True)
                      .when_matched_delete(predicate=f'NOT s."{KEY_PRESENT}"')
                      .when_matched_update(updates=values)
                      .when_not_matched_insert(updates=values, predicate=f's."{KEY_PRESENT}"')
                      .execute())
                return WriteResult(rows_written=written, version=table.version())

            return self._commit(attempt)

    def _create_from_df(self, path: str, df, small: bool) -> WriteResult:
        with self._stage(df, small) as data:
            return self._create(path, data, [], rows_deleted=0)

    def merge(self, name, df, *, keys, partition_by=None, small=False) -> WriteResult:
        path = self.path(name)
        keys = [check_identifier(k, "merge key") for k in keys]
        if not keys:
            raise ValueError("merge: keys must name at least one column")
        self._check_column_types(name, df, "merge")
        with self._stage(df, small) as data:
            check_columns_present(data.column_names, keys, f"merge {name}")
            partition_by = self._check_partition_by(partition_by, data.column_names)
            check_unique_non_null_keys(data.columns(keys), keys, f"merge {name}")
            on_keys = " AND ".join(f't."{k}" = s."{k}"' for k in keys)

            def attempt() -> WriteResult:
                table = load_table(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=None)
                (table.merge(data.reader(), predicate=on_keys, source_alias="s", target_alias="t",
                             merge_schema=True)
                      .when_matched_update_all()
                      .when_not_matched_insert_all()
                      .execute())
                return WriteResult(rows_written=data.num_rows, version=table.version())

            return self._commit(attempt)

    def append(self, name, df, *, token=None, partition_by=None, small=False) -> WriteResult:
        path = self.path(name)
        app_id = append_token_app_id(token) if token is not None else None
        self._check_column_types(name, df, "append")
        with self._stage(df, small) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)
            # The token is committed in the same commit as the rows, and delta-rs refuses a
            # commit when a concurrent one recorded the same app id: we then retry, see the token
            # and skip.
            commit_properties = (
                CommitProperties(app_transactions=[Transaction(app_id, APPEND_TOKEN_TXN_VERSION)])
                if app_id else None)

            def attempt() -> WriteResult:
                table = load_table(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=None,
                                        commit_properties=commit_properties)
                if app_id and table.transaction_version(app_id) is not None:
                    return WriteResult(rows_written=0, version=table.version(), skipped=True)
                self._write_arrow(table, data, mode="append", schema_mode="merge",
                                  commit_properties=commit_properties)
                return WriteResult(rows_written=data.num_rows, version=table.version())

            return self._commit(attempt)

    def overwrite(self, name, df, *, partition_by=None, small=False) -> WriteResult:
        path = self.path(name)
        with self._stage(df, small) as data:
            partition_by = self._check_partition_by(partition_by, data.column_names)

            def attempt() -> WriteResult:
                table = load_table(path)
                if table is None:
                    return self._create(path, data, partition_by, rows_deleted=0)
                # Drop-and-recompute: the new data's schema replaces the old one.
                return self._overwrite_counted(
                    path, table, data, schema_mode="overwrite",
                    partition_by=partition_by or table.metadata().partition_columns or None)

            return self._commit(attempt)

    def delete_where_in(self, name, column, values) -> WriteResult:
        path = self.path(name)
        check_identifier(column, "column")
        values = list(values)
        if any(v is None for v in values):
            raise ValueError("delete_where_in: values must not contain None (null never matches IN)")

        def attempt() -> WriteResult:
            table = load_table(path)
            if table is None:
                return WriteResult(rows_written=0, version=None, rows_deleted=0)
            if not values:
                return WriteResult(rows_written=0, version=table.version(), rows_deleted=0)
            schema = spark_schema(table)
            column_type = spark_type_name(schema, column, f"delete_where_in {name}")
            if len(values) <= DELTA_RS_IN_LIST_LIMIT:
                metrics = table.delete(delta_rs_in_predicate(column, column_type, values))
                deleted = metrics.get("num_deleted_rows")
            else:  # too many for a predicate: join them (one commit all the same)
                key_type = to_arrow_schema(schema, timezone="UTC").field(column).type
                keys = pa.table({column: pa.array(sorted(set(values)), key_type)})
                metrics = (table.merge(keys, predicate=f't."{column}" = s."{column}"', source_alias="s",
                                       target_alias="t").when_matched_delete().execute())
                deleted = metrics.get("num_target_rows_deleted")
            return WriteResult(rows_written=0, version=table.version(), rows_deleted=deleted)

        return self._commit(attempt)

    # -- maintenance ---------------------------------------------------------------------

    def compact(self, name, *, partitions=None) -> int:
        path = self.path(name)

        def attempt() -> int:
            table = required_table(path)
            columns = table.metadata().partition_columns
            chosen = [(columns[0], "in", [str(p) for p in partitions])] if columns and partitions is not None else None
            # An empty choice compacts nothing; the log's upkeep below still runs.
            metrics = {} if chosen and not partitions else table.optimize.compact(
                partition_filters=chosen, target_size=COMPACTED_FILE_BYTES)
            if CHECKPOINT_INTERVAL_PROPERTY not in table.metadata().configuration:
                table.alter.set_table_properties(NEW_TABLE_CONFIGURATION)
            table.create_checkpoint()
            return metrics.get("numFilesRemoved", 0)

        return self._commit(attempt)

    def vacuum(self, name, *, retention_hours) -> int:
        table = self._require(name)
        # full: also files no commit ever added (a write killed before its commit), by age.
        removed = table.vacuum(retention_hours=int(retention_hours), dry_run=False,
                               enforce_retention_duration=False, full=True)
        return len(removed)
