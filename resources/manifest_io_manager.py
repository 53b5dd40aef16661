"""The manifest IO manager and the step transaction it owns.

A step is one transaction over several tables (`StepDeclaration`: its assets, its turn, the
tables it writes in commit order). `StepTransaction` opens it (claims every partition of
every asset the step materializes: one manifest commit), writes each table as one atomic Delta
commit in the declared order, closes it (every item PROCESSED, one manifest commit), then
writes the ledger markers the planners read. Any failure inside it records the items FAILED
with the reason. A crash before the markers leaves the work planned again (and the dead run's
locks, which the next run's claim releases); every write is idempotent, so nothing is lost or
doubled.

The IO manager then receives what the step wrote for each asset (`StepOutput`) and turns it
into the materialization's metadata. It loads no inputs: each step reads what it needs.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

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
from resources.materialized import rows_were_lost
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


@dataclass(frozen=True)
class StepDeclaration:
    """One step: the assets it materializes together (each partition of each is one manifest
    item), the turn it takes with other steps, and the tables it writes, in commit order, each
    with the asset whose materialization reports it. `markers` are written once the items are
    PROCESSED: the ledgers the planners read."""

    name: str
    assets: tuple[str, ...]
    writes: tuple[tuple[str, str], ...]  # (table, asset), in commit order; a table may come twice
    markers: tuple[tuple[str, str], ...] = ()
    turn: str | None = None  # an item held only to take turns with other steps

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the step writes, in commit order, markers last."""
        return tuple(table for table, _ in (*self.writes, *self.markers))


def partition_items(context, names: Sequence[str], unit: str | None = None) -> list[str]:
    """The manifest items of a step: one per (asset, partition key) it materializes (of the
    `unit`, for a run scoped to some app ids)."""
    keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else [None]
    return [item_id(name, key, unit) for name in names for key in keys]


def retried_runs(run) -> set[str]:
    """The runs this run re-executes (Dagster's parent and root run): a retry takes back their items."""
    return {run.tags[tag] for tag in RETRY_OF_TAGS if tag in run.tags}


class StepTransaction:
    """One step's transaction, from its claim to its close: `with StepTransaction(...) as step`
    claims the step's items (with `unit`, a run scoped to some app ids: that unit's items, whose
    failure locks them alone); `step.replace(...)` and its siblings write the declared tables in
    the declared order; `step.close(payload)` records the items PROCESSED; the writes after it
    are the declared markers. An exception inside the block records the items FAILED with the
    reason (a transient one asks Dagster to run the step again) unless the step was closed."""

    def __init__(self, context, warehouse: WarehouseResource, declaration: StepDeclaration, unit: str | None = None):
        self.declaration = declaration
        self.items = partition_items(context, declaration.assets, unit)
        self.written: dict[str, dict[str, WriteResult]] = {asset: {} for asset in declaration.assets}
        self.closed = False
        self._context, self._warehouse, self._tables = context, warehouse, warehouse.tables
        self._manifest, self._run_id = warehouse.manifest, context.run_id
        self._application = "+".join(declaration.assets)
        self._position = 0  # the next declared write
        self._rows_written: dict[str, int] = {}

    def __enter__(self) -> "StepTransaction":
        turn = self.declaration.turn
        try:
            self._manifest.claim(
                [*self.items, *([turn] if turn else [])], application=self._application, run_id=self._run_id,
                run_finished=abandoned_lock_check(self._context.instance, self._warehouse.settings.max_lock_age_hours),
                auto_resolve_failures=self._warehouse.settings.auto_resolve_failures,
                payload={"partition_keys": _key_range(self.items), **claiming_process()},
                retry_of=retried_runs(self._context.run))
        except ItemLockedError as exc:
            if turn is None or exc.item != turn:
                raise
            self._context.log.info(f"{exc}: waiting for its turn, trying again in {TURN_WAIT_SECONDS} s")
            raise RetryRequested(max_retries=TURN_WAIT_RETRIES, seconds_to_wait=TURN_WAIT_SECONDS) from exc
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if exc is None:
            if not self.closed:
                self._fail("the step ended without closing its transaction")
                raise RuntimeError(f"step {self.declaration.name} ended without closing its transaction")
            return False
        if self.closed:  # a marker failed: the planners plan the work again
            return False
        if is_transient(exc):
            self._fail(_one_line(exc))
            raise RetryRequested(max_retries=TRANSIENT_RETRIES, seconds_to_wait=5) from exc
        error = _explained(exc, self.items)
        self._fail(_one_line(error))
        if error is not exc:
            raise error from exc
        return False

    # -- the writes, each one Delta commit -------------------------------------------------

    def replace(self, table: str, df, *, rows: Sequence[RowRange], partition_by: Sequence[str] = (),
                small: bool = False) -> WriteResult:
        """The table's rows of `rows` (ranges, each optionally narrowed to some key values) become `df`."""
        asset = self._next(table)
        return self._record(asset, table, self._tables.replace(table, df, rows=list(rows),
                                                               partition_by=list(partition_by) or None, small=small))

    def replace_keys(self, table: str, df, *, key: str, keys, small: bool = False) -> WriteResult:
        """The table's rows of `keys` (a DataFrame of `key`) become `df`'s."""
        asset = self._next(table)
        return self._record(asset, table, self._tables.replace_keys(table, df, key=key, keys=keys, small=small))

    def merge(self, table: str, df, *, keys: Sequence[str], small: bool = False) -> WriteResult:
        """`df`'s rows replace the table's rows with the same `keys`, and the others are added."""
        asset = self._next(table)
        return self._record(asset, table, self._tables.merge(table, df, keys=list(keys), small=small))

    def append(self, table: str, df, *, partition_by: Sequence[str] = (), small: bool = False) -> WriteResult:
        asset = self._next(table)
        return self._record(asset, table, self._tables.append(table, df, partition_by=list(partition_by) or None,
                                                              small=small))

    def overwrite(self, table: str, df, *, small: bool = False) -> WriteResult:
        asset = self._next(table)
        return self._record(asset, table, self._tables.overwrite(table, df, small=small))

    def delete(self, table: str, *, column: str, values: Sequence) -> WriteResult:
        """The table's rows whose `column` holds one of `values` go."""
        asset = self._next(table)
        return self._record(asset, table, self._tables.delete_where_in(table, column, list(values)))

    def close(self, payload: dict[str, Any]) -> None:
        """Every item PROCESSED, with the window, `payload` and the rows each table was written."""
        window = self._context.partition_time_window if self._context.has_partition_key_range \
            or self._context.has_partition_key else None
        bounds = {"window_start": window.start.isoformat(), "window_end": window.end.isoformat()} if window else {}
        self.closed = True
        self._manifest.close(self.items, run_id=self._run_id, state=State.PROCESSED, application=self._application,
                             payload={**bounds, **payload, "rows_written": dict(self._rows_written)},
                             released=self._turns())

    def _next(self, table: str) -> str:
        """The asset a write of `table` is reported with: its next place in the declared order
        (a write out of that order, or a marker before the close, is a mistake in the step)."""
        declared, close_at = (*self.declaration.writes, *self.declaration.markers), len(self.declaration.writes)
        start, end = (max(self._position, close_at), len(declared)) if self.closed else (self._position, close_at)
        for index in range(start, end):
            if declared[index][0] == table:
                self._position = index + 1
                return declared[index][1]
        raise RuntimeError(f"step {self.declaration.name} writes {table} out of its declared order "
                           f"{self.declaration.tables} ({'after' if self.closed else 'before'} its close)")

    def _record(self, asset: str, table: str, result: WriteResult) -> WriteResult:
        self.written[asset][table] = result
        self._rows_written[table] = result.rows_written
        return result

    def _fail(self, reason: str) -> None:
        self.closed = True
        self._manifest.close(self.items, run_id=self._run_id, state=State.FAILED, application=self._application,
                             payload={"reason": reason}, released=self._turns())

    def _turns(self) -> list[str]:
        return [self.declaration.turn] if self.declaration.turn else []


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


@dataclass
class StepOutput:
    """What an asset hands the IO manager: what its step wrote for it (the asset's table and
    the side tables reported with it) and the metadata of its materialization."""

    table: str
    written: dict[str, WriteResult]
    metadata: dict[str, Any] = field(default_factory=dict)
    last: bool = False  # the step's last output: the manifest's state is shown after it


class ManifestIOManager(ConfigurableIOManager):
    """Turns what a step wrote into the materialization's metadata; the step's transaction
    (`StepTransaction`) did the writing."""

    warehouse: ResourceDependency[WarehouseResource]

    def handle_output(self, context: OutputContext, obj: StepOutput | None) -> None:
        if obj is None:
            return
        described = self.warehouse.tables.describe(obj.table)
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
        main = obj.written.get(obj.table)
        written = {**({"rows_written": MetadataValue.int(int(main.rows_written))} if main else {}),
                   **{f"{table}_rows_written": MetadataValue.int(int(result.rows_written))
                      for table, result in obj.written.items() if table != obj.table}}
        partitions = context.asset_partition_keys if context.has_asset_partitions else []
        if len(partitions) > 1:
            context.log_event(AssetObservation(context.asset_key, partition=partitions[-1], metadata={
                **written, "run_partitions": MetadataValue.text(f"{partitions[0]} .. {partitions[-1]}")}))
        else:
            metadata.update(written)
        metadata.update(obj.metadata)
        context.add_output_metadata(metadata)
        for table, result in obj.written.items():
            if table in STATE_TABLES:
                context.log_event(self._table_observation(table, result))
        if obj.last:
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
