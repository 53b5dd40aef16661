"""The manifest IO manager: writes each output as one atomic Delta commit, then records the
step's success in the processing manifest. It loads no inputs: each step reads what it needs.

A step claims its items (`claimed`: every partition of every asset it materializes, one
manifest commit) before it computes, and yields a `TableOutput` per asset. How an output is
written comes from the asset's definition metadata (`table`; `write` = replace_range |
replace | replace_keys | merge | overwrite; `range_column`, `key`, `keys`, `partition_by`)
and the range from the run's partition window, so a single partition and a backfill range
go through the same code. Side tables are written before the asset's table (`before`) or after
it (`after`). Once the output marked `completes` is written, every claimed item is recorded
PROCESSED, in one manifest commit; any failure records them FAILED with the reason. Then its
`markers` are written: the ledgers that say the work is complete and that the planners read.
A crash before them leaves the work planned again (and the dead run's locks, which the next
run's claim releases); every write is idempotent, so nothing is lost or doubled.
"""

import contextlib
import re
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any, Callable, Iterator, Sequence

from dagster import (
    AssetObservation,
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
    ResourceDependency,
    RetryRequested,
    TableColumn,
    TableRecord,
    TableSchema,
)
from deltalake.exceptions import CommitFailedError

from incremental_assets.names import PROCESSING_MANIFEST, RETRY_OF_TAGS, STATE_TABLES
from incremental_assets.planning.processing_manifest import PROBLEM_STATUSES, ItemStatus, State
from resources.manifest import (
    ItemLockedError,
    ManifestStore,
    abandoned_lock_check,
    claiming_process,
)
from resources.manifest_items import item_id, split_item_id
from resources.materialized import release, rows_were_lost
from resources.tables import RowRange, WriteResult
from resources.warehouse import WarehouseResource

TRANSIENT_RETRIES = 2
# A step whose turn another run holds tries again every 30 s, for up to 10 minutes; nothing is
# claimed meanwhile, so a step that gives up leaves nothing to resolve (its run fails).
TURN_WAIT_SECONDS = 30
TURN_WAIT_RETRIES = 20


def is_transient(error: BaseException) -> bool:
    """Worth trying the step again for: a Delta commit that kept conflicting after the table
    store's own retries (a busy table), or materialized rows lost with their executor. Others
    (bad data, a missing source, a failed check) would fail the same way: they fail at once."""
    return isinstance(error, CommitFailedError) or rows_were_lost(error)


@dataclass
class TableWrite:
    """One table write: its rows (a DataFrame, or a function that builds it when the write
    happens, after the writes before it) and how they replace what the table holds."""

    table: str
    df: Any
    write: str  # replace_range | replace | replace_keys | merge | overwrite | append | delete
    range_column: str | None = None
    range: tuple[Any, Any] | None = None  # default: the step's partition window
    rows: Sequence[RowRange] = ()  # replace: more rows replaced besides the range
    key: str | None = None  # replace_keys, delete
    keys: Any = None  # replace_keys: a DataFrame of the keys replaced; delete: the values
    merge_keys: Sequence[str] = ()
    partition_by: Sequence[str] = ()
    within: tuple[str, tuple] | None = None  # replace: only the range's rows whose column holds one of the values
    small: bool = False  # the rows are expected few (an hour's, a ledger's): the store may collect them (TableStore)


@dataclass
class StepClaim:
    """The manifest items one step holds for its run, closed once for all of them."""

    manifest: ManifestStore
    items: list[str]
    application: str
    run_id: str
    payloads: dict[str, dict] = field(default_factory=dict)  # per item, stored with PROCESSED
    rows_written: dict[str, int] = field(default_factory=dict)  # per table
    closed: bool = False
    turn: str | None = None  # an item held only to take turns with other steps, released at the close

    def fail(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.manifest.close(self.items, run_id=self.run_id, state=State.FAILED, application=self.application,
                                payload={"reason": reason}, released=self._turns())

    def complete(self, payload: dict) -> None:
        self.closed = True
        self.manifest.close(self.items, run_id=self.run_id, state=State.PROCESSED, application=self.application,
                            payload={**payload, "rows_written": dict(self.rows_written)},
                            payloads=self.payloads, released=self._turns())

    def _turns(self) -> list[str]:
        return [self.turn] if self.turn else []


@dataclass
class TableOutput:
    """What an asset hands the IO manager: its rows and what to write with them."""

    df: Any
    claim: StepClaim
    completes: bool = True  # the step's last output: its items are PROCESSED once written
    write: str | None = None  # how to write the rows, when not the asset's `write` metadata
    rows: Sequence[RowRange] = ()  # write "replace": rows replaced besides the partition window
    within: tuple[str, tuple] | None = None  # write "replace": only the window's rows whose column holds these
    keys: Any = None  # write "replace_keys": the keys replaced
    before: list[TableWrite] = field(default_factory=list)
    after: list[TableWrite] = field(default_factory=list)
    markers: list[TableWrite] = field(default_factory=list)  # written once the items are PROCESSED
    metadata: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)  # stored with every PROCESSED record
    materialized: list[Any] = field(default_factory=list)  # DataFrames to release once written
    small: bool = False  # the rows are expected few (an hour's): the store may collect them (TableStore)


def partition_items(context, names: Sequence[str], unit: str | None = None) -> list[str]:
    """The manifest items of a step: one per (asset, partition key) it materializes (of the
    `unit`, for a run scoped to some app ids)."""
    keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else [None]
    return [item_id(name, key, unit) for name in names for key in keys]


def retried_runs(run) -> set[str]:
    """The runs this run re-executes (Dagster's parent and root run): a retry takes back their items."""
    return {run.tags[tag] for tag in RETRY_OF_TAGS if tag in run.tags}


@contextlib.contextmanager
def claimed(context, warehouse: WarehouseResource, names: Sequence[str],
            turn: str | None = None, unit: str | None = None) -> Iterator[StepClaim]:
    """Claim the step's manifest items for the run (one commit); record FAILED if the body raises.
    With `turn`, that item too: one step at a time holds it (ItemLockedError names it while
    another run does), and the close releases it whatever the outcome. With `unit` (a run
    scoped to some app ids), the unit's items (`item_id`): its failure locks them alone.

    A step that yields its outputs may be left at a yield when the IO manager fails to write
    one (Python then closes it with GeneratorExit): the IO manager has recorded that failure.
    """
    items = partition_items(context, names, unit)
    manifest = warehouse.manifest
    application = "+".join(names)
    try:
        manifest.claim([*items, *([turn] if turn else [])], application=application, run_id=context.run_id,
                       run_finished=abandoned_lock_check(context.instance, warehouse.settings.max_lock_age_hours),
                       auto_resolve_failures=warehouse.settings.auto_resolve_failures,
                       payload={"partition_keys": _key_range(items), **claiming_process()},
                       retry_of=retried_runs(context.run))
    except ItemLockedError as exc:
        if turn is None or exc.item != turn:
            raise
        context.log.info(f"{exc}: waiting for its turn, trying again in {TURN_WAIT_SECONDS} s")
        raise RetryRequested(max_retries=TURN_WAIT_RETRIES, seconds_to_wait=TURN_WAIT_SECONDS) from exc
    claim = StepClaim(manifest, items, application, context.run_id, turn=turn)
    try:
        yield claim
    except GeneratorExit:
        raise
    except BaseException as exc:
        _fail(claim, exc)


def _key_range(items: list[str]) -> str:
    """The claimed partition keys in words: one key, or first...last."""
    keys = sorted({split_item_id(item)[1] for item in items})
    return keys[0] if len(keys) == 1 else f"{keys[0]}...{keys[-1]}"


def _one_line(exc: BaseException) -> str:
    """The error in one line. A Py4J error's own first line only names the JVM call ("An error
    occurred while calling o123.collectToPython."): the Java exception's line follows it."""
    lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".strip().splitlines() if line.strip()]
    if len(lines) > 1 and "An error occurred while calling" in lines[0]:
        return f"{lines[0]} {lines[1].lstrip(': ')}"[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]


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


def _fail(claim: StepClaim, exc: BaseException):
    """Record the step's items FAILED with the reason, and raise: a transient failure asks
    Dagster to run the step again in the same run (the retry takes back the FAILED items); any
    other raises the error, restated when known."""
    if is_transient(exc):
        claim.fail(_one_line(exc))
        raise RetryRequested(max_retries=TRANSIENT_RETRIES, seconds_to_wait=5) from exc
    error = _explained(exc, claim.items)
    claim.fail(_one_line(error))
    if error is not exc:
        raise error from exc
    raise exc


PREVIEW_ROWS = 50
_PREVIEW_SCHEMA = TableSchema(columns=[TableColumn(name, "string") for name in
                                      ("item", "status", "run_id", "since", "reason")])


def manifest_observation(manifest: ManifestStore) -> AssetObservation:
    """The processing manifest after a step closed its items: how many are held by a run
    (locked), stopped by a failure (fail-locked) or broken (invalid), and a preview of them, with the item ids
    that `incremental-assets manifest resolve` and manifest_admin_job take."""
    manifest = manifest.snapshot()  # one read: the version shown is the one the counts come from
    held = [state for state in manifest.unsettled_states().values() if state.status in PROBLEM_STATUSES]
    rows = [TableRecord({"item": state.item_id, "status": state.status.value,
                         "run_id": state.last.run_id if state.last else "",
                         "since": str(state.last.recorded_at) if state.last else "",
                         "reason": str((state.last.payload or {}).get("reason", "")) if state.last else ""})
            for state in sorted(held, key=lambda s: s.item_id)[:PREVIEW_ROWS]]
    return AssetObservation(PROCESSING_MANIFEST, metadata={
        "locked_items": MetadataValue.int(sum(s.status is ItemStatus.LOCKED for s in held)),
        "fail_locked_items": MetadataValue.int(sum(s.status is ItemStatus.FAIL_LOCKED for s in held)),
        "invalid_items": MetadataValue.int(sum(s.status is ItemStatus.INVALID for s in held)),
        "manifest_version": MetadataValue.int(manifest.version()),
        "held_items": MetadataValue.table(rows, schema=_PREVIEW_SCHEMA)})


def _window_bounds(window, column_is_date: bool):
    start, end = window.start, window.end
    if column_is_date:
        return start.date(), end.date()
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


def _rows(df: Any | Callable[[], Any]):
    return df() if callable(df) else df


class ManifestIOManager(ConfigurableIOManager):
    """Writes asset outputs as Delta tables and records them in the processing manifest."""

    warehouse: ResourceDependency[WarehouseResource]

    def _write(self, spec: TableWrite, window) -> WriteResult:
        tables = self.warehouse.tables
        if spec.write == "delete":
            return tables.delete_where_in(spec.table, spec.key, list(spec.keys))
        df, partition_by = _rows(spec.df), list(spec.partition_by) or None
        if spec.write in ("replace_range", "replace"):
            start, end = spec.range or _window_bounds(window, spec.range_column.endswith("_date"))
            key, values = spec.within or (None, ())
            rows = [RowRange(spec.range_column, start, end, key=key, values=tuple(values)), *spec.rows]
            return tables.replace(spec.table, df, rows=rows, partition_by=partition_by, small=spec.small)
        if spec.write == "replace_keys":
            return tables.replace_keys(spec.table, df, key=spec.key, keys=spec.keys, small=spec.small)
        if spec.write == "merge":
            return tables.merge(spec.table, df, keys=list(spec.merge_keys), partition_by=partition_by, small=spec.small)
        if spec.write == "overwrite":
            return tables.overwrite(spec.table, df, partition_by=partition_by, small=spec.small)
        if spec.write == "append":
            return tables.append(spec.table, df, partition_by=partition_by, small=spec.small)
        raise ValueError(f"unknown write mode {spec.write!r} for table {spec.table}")

    def handle_output(self, context: OutputContext, obj: TableOutput | None) -> None:
        if obj is None:
            return
        name = context.asset_key.path[-1]
        meta = context.definition_metadata or {}
        window = context.asset_partitions_time_window if context.has_asset_partitions else None
        main = TableWrite(table=meta.get("table", name), df=obj.df, write=obj.write or meta.get("write", "overwrite"),
                          range_column=meta.get("range_column"), rows=obj.rows, key=meta.get("key"),
                          keys=obj.keys, merge_keys=tuple(meta.get("keys", ())),
                          partition_by=tuple(meta.get("partition_by", ())), within=obj.within, small=obj.small)
        claim = obj.claim
        results: dict[str, WriteResult] = {}
        try:
            for spec in [*obj.before, main, *obj.after]:
                results[spec.table] = self._write(spec, window)
                claim.rows_written[spec.table] = results[spec.table].rows_written
        except BaseException as exc:
            _fail(claim, exc)
        finally:
            for df in obj.materialized:
                release(df)
        if obj.completes:
            claim.complete({**({"window_start": window.start.isoformat(), "window_end": window.end.isoformat()}
                               if window else {}), **obj.payload})
        for spec in obj.markers:  # a failure here fails the step; the planners plan the work again
            results[spec.table] = self._write(spec, window)
        described = self.warehouse.tables.describe(main.table)
        # dagster/row_count is the table's size (the UI's badge), the same on every partition;
        # per-partition figures come from the asset (add_asset_metadata). What the run wrote is
        # the run's: on a run of one partition its materialization, on a ranged run one
        # observation of its last partition, not repeated beside every hour's own figures.
        metadata: dict[str, Any] = {
            **({"dagster/row_count": MetadataValue.int(int(described["num_rows"]))}
               if described.get("num_rows") is not None else {}),
            "table_version": MetadataValue.int(int(described.get("version") or 0)),
            "table_path": MetadataValue.path(described.get("path", "")),
            "table_files": MetadataValue.int(int(described.get("num_files") or 0)),
        }
        written = {"rows_written": MetadataValue.int(int(results[main.table].rows_written)),
                   **{f"{table}_rows_written": MetadataValue.int(int(result.rows_written))
                      for table, result in results.items() if table != main.table}}
        partitions = context.asset_partition_keys if context.has_asset_partitions else []
        if len(partitions) > 1:
            context.log_event(AssetObservation(context.asset_key, partition=partitions[-1], metadata={
                **written, "run_partitions": MetadataValue.text(f"{partitions[0]} .. {partitions[-1]}")}))
        else:
            metadata.update(written)
        metadata.update(obj.metadata)
        context.add_output_metadata(metadata)
        for table, result in results.items():
            if table in STATE_TABLES:
                context.log_event(self._table_observation(table, result))
        if obj.completes:
            context.log_event(manifest_observation(self.warehouse.manifest))

    def _table_observation(self, table: str, result: WriteResult) -> AssetObservation:
        """A state table the step wrote, as the catalog shows it: its size and this write."""
        described = self.warehouse.tables.describe(table)
        return AssetObservation(table, metadata={
            "rows_written": MetadataValue.int(int(result.rows_written)),
            **({"dagster/row_count": MetadataValue.int(int(described["num_rows"]))}
               if described.get("num_rows") is not None else {}),
            "table_version": MetadataValue.int(int(described.get("version") or 0))})

    def load_input(self, context: InputContext):
        # Dagster's interface requires it; no asset takes an input through this IO manager: each
        # step reads the upstream rows it needs itself (a range, a projection, the look-back).
        raise NotImplementedError(
            f"manifest_io writes outputs only; {context.asset_key.to_user_string()} is read by the step "
            "that needs it, not loaded as an input")
