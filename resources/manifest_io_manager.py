"""The manifest IO manager: one atomic write per output range, then the PROCESSED record.

Assets return a `TableOutput`; how it is written comes from the asset's definition metadata
(`table`, `write` = replace_range | merge | overwrite, `range_column`, `keys`,
`partition_by`), and the range from the run's partition window, so a single partition and
a backfill range go through the same code. Reads hand the downstream asset exactly its
mapped upstream range as a Spark DataFrame.

Order of events for one output: (asset) claim items -> compute -> (here) write side tables
-> write the table -> PROCESSED. Any failure records FAILED with the reason. A crash between
the data commit and the PROCESSED record leaves a lock whose run is finished; the next run
releases it and rewrites the same range (writes are idempotent), so nothing is lost or doubled.
"""


import contextlib
import re
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any, Iterator, Sequence

from dagster import (
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
    ResourceDependency,
)

from incremental_assets.planning.processing_manifest import State
from resources.manifest import abandoned_lock_check, claiming_process, item_id, split_item_id
from resources.warehouse import WarehouseResource


@dataclass
class TableWrite:
    """A table written next to the asset's own (e.g. rejected_events), with its write spec."""

    table: str
    df: Any
    write: str
    range_column: str | None = None
    keys: Sequence[str] = ()
    partition_by: Sequence[str] = ()
    range: tuple[Any, Any] | None = None  # default: the asset's partition window


@dataclass
class TableOutput:
    df: Any
    side_tables: list[TableWrite] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)  # stored with the PROCESSED record
    cached: list[Any] = field(default_factory=list)  # DataFrames to unpersist once written


def asset_name(context) -> str:
    return context.asset_key.path[-1]


def partition_items(context, name: str) -> list[str]:
    if getattr(context, "has_partition_key_range", False) or getattr(context, "has_partition_key", False):
        return [item_id(name, key) for key in context.partition_keys]
    if hasattr(context, "has_asset_partitions") and context.has_asset_partitions:
        return [item_id(name, key) for key in context.asset_partition_keys]
    return [item_id(name, None)]


@contextlib.contextmanager
def claimed(context, warehouse: WarehouseResource) -> Iterator[list[str]]:
    """Claim this step's manifest items for the run; record FAILED if the body raises."""
    name = asset_name(context)
    items = partition_items(context, name)
    manifest = warehouse.manifest
    manifest.claim(items, application=name, run_id=context.run_id,
                   run_finished=abandoned_lock_check(context.instance, warehouse.settings.max_lock_age_hours),
                   auto_resolve_failures=warehouse.settings.auto_resolve_failures,
                   payload={"partition_keys": _key_range(items), **claiming_process()})
    try:
        yield items
    except BaseException as exc:
        manifest.close(items, run_id=context.run_id, state=State.FAILED, application=name,
                       payload={"reason": _one_line(exc)})
        raise


def _key_range(items: list[str]) -> str:
    """The claimed partition keys in words: one key, or first...last."""
    keys = [split_item_id(item)[1] for item in items]
    return keys[0] if len(keys) == 1 else f"{keys[0]}...{keys[-1]}"


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


class FilesRemovedError(RuntimeError):
    """A file that a Delta log listed was deleted while this step read it."""


# Spark reads lazily, so a source vacuumed or rewritten mid-run fails here, at the write.
_FILE_GONE = re.compile(r"FILE_NOT_EXIST\] Encountered error while reading file (\S+?)\.? File does not exist")


def _explained(exc: BaseException, items: Sequence[str]) -> BaseException:
    """Known failures restated to say what to do (Spark's own text suggests REFRESH TABLE,
    which does not apply here, under a page of Java stack trace); others unchanged."""
    gone = _FILE_GONE.search(str(exc))
    if gone:
        return FilesRemovedError(
            f"file {gone.group(1)} was removed while this step read it: the source (or a table) was "
            "vacuumed or rewritten during the run. Run the range again once that is done, after "
            f"resolving its {len(items)} failed item(s), e.g. `incremental-assets manifest resolve {items[0]}`")
    return exc


def _window_bounds(window, column_is_date: bool):
    start, end = window.start, window.end
    if column_is_date:
        return start.date(), end.date()
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


class ManifestIOManager(ConfigurableIOManager):
    """Writes asset outputs as Delta tables and records them in the processing manifest."""

    warehouse: ResourceDependency[WarehouseResource]

    def _write(self, spec: TableWrite, window) -> Any:
        tables = self.warehouse.tables
        if spec.write == "replace_range":
            start, end = spec.range or _window_bounds(window, spec.range_column.endswith("_date"))
            return tables.replace_range(spec.table, spec.df, column=spec.range_column, start=start,
                                        end=end, partition_by=list(spec.partition_by) or None)
        if spec.write == "merge":
            return tables.merge(spec.table, spec.df, keys=list(spec.keys),
                                partition_by=list(spec.partition_by) or None)
        if spec.write == "overwrite":
            return tables.overwrite(spec.table, spec.df, partition_by=list(spec.partition_by) or None)
        raise ValueError(f"unknown write mode {spec.write!r} for table {spec.table}")

    def handle_output(self, context: OutputContext, obj: TableOutput | None) -> None:
        if obj is None:
            return
        name = asset_name(context)
        meta = context.definition_metadata or {}
        window = context.asset_partitions_time_window if context.has_asset_partitions else None
        items = partition_items(context, name)
        manifest = self.warehouse.manifest
        main = TableWrite(table=meta.get("table", name), df=obj.df, write=meta.get("write", "overwrite"),
                          range_column=meta.get("range_column"), keys=tuple(meta.get("keys", ())),
                          partition_by=tuple(meta.get("partition_by", ())))
        try:
            side_results = {spec.table: self._write(spec, window) for spec in obj.side_tables}
            result = self._write(main, window)
        except BaseException as exc:
            error = _explained(exc, items)
            manifest.close(items, run_id=context.run_id, state=State.FAILED, application=name,
                           payload={"reason": _one_line(error)})
            if error is not exc:
                raise error from exc
            raise
        finally:
            for df in obj.cached:
                df.unpersist()
        payload = {"rows_written": result.rows_written, "table_version": result.version,
                   **({"window_start": window.start.isoformat(), "window_end": window.end.isoformat()}
                      if window else {}),
                   **obj.payload}
        manifest.close(items, run_id=context.run_id, state=State.PROCESSED, application=name,
                       payload=payload)
        described = self.warehouse.tables.describe(main.table)
        metadata: dict[str, Any] = {
            "rows_written": MetadataValue.int(int(result.rows_written)),
            "dagster/row_count": MetadataValue.int(int(result.rows_written)),
            "table_version": MetadataValue.int(int(described.get("version") or 0)),
            "table_path": MetadataValue.path(described.get("path", "")),
            "table_files": MetadataValue.int(int(described.get("num_files") or 0)),
        }
        for table, side in side_results.items():
            metadata[f"{table}_rows_written"] = MetadataValue.int(int(side.rows_written))
        metadata.update(obj.metadata)
        context.add_output_metadata(metadata)

    def load_input(self, context: InputContext):
        """The upstream table's rows for exactly the mapped upstream partition range."""
        upstream = context.upstream_output
        meta = (upstream.definition_metadata if upstream is not None else None) or {}
        table = meta.get("table", context.asset_key.path[-1])
        tables = self.warehouse.tables
        if not tables.exists(table):
            raise FileNotFoundError(
                f"input table {table!r} does not exist yet in {self.warehouse.settings.warehouse}: "
                f"materialize {context.asset_key.to_user_string()} first")
        column = meta.get("range_column")
        if not context.has_asset_partitions or column is None:
            return tables.read(table)
        if not context.asset_partition_keys:
            return tables.read(table).limit(0)
        start, end = _window_bounds(context.asset_partitions_time_window, column.endswith("_date"))
        return tables.read_range(table, column, start, end)
