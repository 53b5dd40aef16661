"""The processing manifest: an append-only Delta table of records (DESIGN 6; as Snowplow's processing
manifest keeps one).

One item per (asset, partition key). A run claims its items with PROCESSING records before
computing, and closes them with PROCESSED (after the data commit) or FAILED. The rules of
what may be appended live in `incremental_assets.planning.processing_manifest`; this
module only stores records and serialises writers.

Serialisation: every append is a compare-and-swap on the Delta version. A writer reads the
table at version v, checks its records against that state, and commits at exactly v + 1
(no automatic rebase); if another writer got there first, it re-reads and checks again. So
two runs racing for one item cannot both claim it: the second sees the first's lock. This
needs no Spark and works on any storage where Delta commits are atomic.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Collection, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from incremental_assets.names import PROCESSING_MANIFEST
from incremental_assets.planning.processing_manifest import (
    ItemStatus,
    ManifestError,
    Record,
    State,
    check_append,
    group_by_item,
    item_status,
    open_lock,
)
from resources.manifest_rows import record_from_row, record_to_row, records_from_rows, unsettled_rows
from resources.tables.delta_log import NEW_TABLE_CONFIGURATION, load_table, scan_arrow

OPERATOR = "operator"
# Commits between compactions of the manifest table. Every claim and close reads the whole
# table, one file per commit since the last compaction, and a read's cost grows with the
# files; a run makes a few commits and many more reads, so compacting often pays.
COMPACT_EVERY = 10
AUTO_RELEASE = "auto-release"
_SCHEMA = pa.schema([
    ("seq", pa.int64()),  # the Delta version the record was committed at
    ("seq_index", pa.int32()),  # its position inside that commit
    ("record_id", pa.string()),
    ("item_id", pa.string()),
    ("asset", pa.string()),
    ("partition_key", pa.string()),
    ("state", pa.string()),
    ("application", pa.string()),
    ("run_id", pa.string()),
    ("previous_record_id", pa.string()),
    ("payload", pa.string()),
    ("recorded_at", pa.timestamp("us", tz="UTC")),
])


class ItemLockedError(ManifestError):
    """Another run holds the item (`item`)."""

    def __init__(self, message: str, item: str | None = None):
        super().__init__(message)
        self.item = item


class ItemFailLockedError(ManifestError):
    """The item's last processing failed; an operator must resolve it first."""


@dataclass(frozen=True)
class ItemState:
    item_id: str
    status: ItemStatus
    records: tuple[Record, ...]

    @property
    def last(self) -> Record | None:
        return self.records[-1] if self.records else None

    @property
    def open_lock(self) -> Record | None:
        return open_lock(self.records) if self.status is ItemStatus.LOCKED else None


# Returns why a run no longer holds its locks ("run finished with status FAILURE"), or None
# while the run may still be working.
RunFinishedCheck = Callable[[Record], "str | None"]


@dataclass(frozen=True)
class RunSpan:
    """One run's records of an asset's items: its first claim (None: none recorded), its last
    PROCESSED record, how many items it closed as PROCESSED and the payload of its last close."""

    run_id: str
    first_claim: datetime | None
    last_close: datetime
    items_closed: int
    last_close_payload: dict | None


class ManifestStore:
    def __init__(self, table_path: str, *, max_attempts: int = 20):
        self.path = table_path
        self.max_attempts = max_attempts

    @classmethod
    def of(cls, settings) -> "ManifestStore":
        """The manifest of the warehouse these settings name."""
        return cls(settings.table_path(PROCESSING_MANIFEST))

    # -- reading ------------------------------------------------------------------
    def _read(self, items: Iterable[str] | None = None) -> tuple[int, pa.Table]:
        """The table version and its rows (only those of `items`, when given), unordered."""
        table = load_table(self.path)
        if table is None:
            return -1, _SCHEMA.empty_table()
        return table.version(), _only_items(scan_arrow(table), items)

    def _snapshot(self, items: Iterable[str] | None = None) -> tuple[int, list[Record]]:
        """The table version and its records (only those of `items`, when given), in log order."""
        version, data = self._read(items)
        return version, records_from_rows(data)

    def version(self) -> int:
        """The table's version; -1 before the first record."""
        table = load_table(self.path)
        return -1 if table is None else table.version()

    def snapshot(self) -> "ManifestSnapshot":
        """Every record read once, for decisions that must all see the same records."""
        return ManifestSnapshot(self.path)

    def records(self, items: Iterable[str] | None = None) -> list[Record]:
        wanted = None if items is None else list(items)
        if wanted == []:
            return []
        return self._snapshot(wanted)[1]

    def spans_of_last_runs(self, asset: str, runs: int) -> list[RunSpan]:
        """What the last `runs` runs that wrote a record of `asset`'s items (by their last record)
        did with them, one span per run that closed one as PROCESSED, summed in Arrow: each tick
        that launches a run looks, and a backfill's runs hold a week of hours each (some 12,000
        records in the last 40 runs of a 300-day backfill, 0.7 s as Python records)."""
        data = self._read()[1]
        data = data.filter(pc.equal(data["asset"], asset))
        last = data.select(["run_id", "seq"]).group_by("run_id", use_threads=False).aggregate([("seq", "max")])
        recent = last.sort_by([("seq_max", "descending")]).slice(0, runs)["run_id"]
        data = data.filter(pc.and_(pc.is_in(data["run_id"], value_set=recent), pc.is_valid(data["recorded_at"])))
        claims = (data.filter(pc.equal(data["state"], State.PROCESSING.name))
                  .group_by("run_id").aggregate([("recorded_at", "min")]))
        first_claim = dict(zip(claims["run_id"].to_pylist(), claims["recorded_at_min"].to_pylist()))
        closes = (data.filter(pc.equal(data["state"], State.PROCESSED.name))
                  .sort_by([("seq", "ascending"), ("seq_index", "ascending")])
                  .group_by("run_id", use_threads=False)  # in log order, so "last" is the last close
                  .aggregate([("recorded_at", "max"), ("item_id", "count_distinct"),
                              ("payload", "last", pc.ScalarAggregateOptions(skip_nulls=False))]))
        return [RunSpan(run, first_claim.get(run), closed_at, items, json.loads(payload) if payload else None)
                for run, closed_at, items, payload in zip(
                    closes["run_id"].to_pylist(), closes["recorded_at_max"].to_pylist(),
                    closes["item_id_count_distinct"].to_pylist(), closes["payload_last"].to_pylist())]

    def states(self, items: Iterable[str] | None = None) -> dict[str, ItemState]:
        return _states(self.records(items))

    def unsettled_states(self) -> dict[str, ItemState]:
        """`states()` without the items that are plainly READY (see `manifest_rows.plainly_ready`): every
        item that is locked, fail-locked, skipped, invalid or otherwise not a plain history is
        here with its status and records, as `states()` gives them. For views that look for
        problems: on a long history almost every item is plainly READY, and replaying them all
        in Python (3.6 s at 29,000 items) is what made the sensor slow."""
        return _states(records_from_rows(unsettled_rows(self._read()[1])))

    # -- writing ------------------------------------------------------------------
    def _commit(self, items: Sequence[str],
                build: Callable[[dict[str, ItemState]], list[Record]]) -> list[Record]:
        """Append what `build` returns for the current state of `items`, at exactly the next version."""
        for attempt in range(self.max_attempts):
            version, records = self._snapshot(items)
            new_records = build(_states(records))
            if not new_records:
                return []
            _check_sequence(records, new_records)
            seq = version + 1
            now = datetime.now(timezone.utc)
            rows = [record_to_row(r, seq, i, now) for i, r in enumerate(new_records)]
            table = pa.Table.from_pylist(rows, schema=_SCHEMA)
            try:
                if version < 0:
                    write_deltalake(self.path, table, mode="error", configuration=NEW_TABLE_CONFIGURATION)
                else:
                    write_deltalake(DeltaTable(self.path, version=version), table, mode="append",
                                    commit_properties=CommitProperties(max_commit_retries=0))
                if seq % COMPACT_EVERY == 0:
                    self.compact()
                return [record_from_row(r) for r in rows]
            except (CommitFailedError, FileExistsError) as exc:  # another writer won this version
                last_error = exc
                time.sleep(min(0.05 * (attempt + 1), 0.5))
            except Exception as exc:  # table created concurrently by another writer
                if version < 0 and "exists" in str(exc).lower():
                    last_error = exc
                    continue
                raise
        raise ManifestError(f"could not append to the manifest at {self.path} after "
                            f"{self.max_attempts} attempts: {last_error}")

    def compact(self) -> None:
        """Merge the many one-commit files into few, so reads stay fast as the log grows.

        Compaction rewrites files without changing rows (a data_change=false commit); a
        writer racing with it simply retries its compare-and-swap.
        """
        try:
            table = DeltaTable(self.path)
            table.optimize.compact()
            table.create_checkpoint()
        except CommitFailedError:
            pass  # another writer moved on; the next compaction catches up

    def claim(self, items: Sequence[str], *, application: str, run_id: str,
              run_finished: RunFinishedCheck, auto_resolve_failures: bool = False,
              payload: Mapping | None = None, retry_of: Collection[str] = ()) -> list[Record]:
        """Lock `items` for `run_id` (all or none), releasing abandoned locks on the way.

        A retry (the same run, or a run re-executing one of `retry_of`) takes back the items
        its earlier attempt failed. Raises ItemLockedError naming the run that holds an item,
        ItemFailLockedError for a failed item nobody resolved, ManifestError for a skipped or
        invalid item.
        """
        def build(states: dict[str, ItemState]) -> list[Record]:
            out: list[Record] = []
            for item in items:
                state = states.get(item) or ItemState(item, ItemStatus.NEW, ())
                previous = state.last.record_id if state.last else None
                if state.status is ItemStatus.LOCKED:
                    lock = state.open_lock
                    if lock.run_id == run_id:
                        continue  # a retry of the same run keeps its lock
                    reason = run_finished(lock)
                    if reason is None:
                        raise ItemLockedError(
                            f"item {item} is locked by run {lock.run_id} "
                            f"(claimed by {lock.application} at {_fmt(lock.recorded_at)})", item)
                    failed = _new(item, State.FAILED, AUTO_RELEASE, run_id, lock.record_id,
                                  {"reason": f"abandoned: {reason}", "abandoned_run_id": lock.run_id})
                    resolved = _new(item, State.RESOLVED, AUTO_RELEASE, run_id, failed.record_id,
                                    {"reason": "abandoned lock released automatically"})
                    out += [failed, resolved]
                    previous = resolved.record_id
                elif state.status is ItemStatus.FAIL_LOCKED:
                    failure = state.last
                    if failure.run_id == run_id or failure.run_id in retry_of:
                        resolved = _new(item, State.RESOLVED, AUTO_RELEASE, run_id, failure.record_id,
                                        {"reason": f"retry of run {failure.run_id}"})
                        out.append(resolved)
                        previous = resolved.record_id
                    elif not auto_resolve_failures:
                        reason = (failure.payload or {}).get("reason", "unknown error")
                        raise ItemFailLockedError(
                            f"item {item} is fail-locked: run {failure.run_id} failed "
                            f"({reason}); resolve it with `incremental-assets manifest resolve "
                            f"{item}` (or set INCREMENTAL_AUTO_RESOLVE_FAILURES=true)")
                    else:
                        resolved = _new(item, State.RESOLVED, AUTO_RELEASE, run_id, failure.record_id,
                                        {"reason": "auto_resolve_failures is on"})
                        out.append(resolved)
                        previous = resolved.record_id
                elif state.status is ItemStatus.SKIPPED:
                    raise ManifestError(f"item {item} was skipped by an operator; it is not processed again")
                elif state.status is ItemStatus.INVALID:
                    raise ManifestError(f"item {item} has an invalid record history; inspect it with "
                                        f"`incremental-assets manifest show {item}`")
                out.append(_new(item, State.PROCESSING, application, run_id, previous, payload))
            return out

        return self._commit(items, build)

    def close(self, items: Sequence[str], *, run_id: str, state: State, application: str,
              payload: Mapping | None = None,
              payloads: Mapping[str, Mapping] | None = None, released: Sequence[str] = ()) -> list[Record]:
        """Close this run's locks on `items` with PROCESSED or FAILED (`payload` for every item,
        plus `payloads[item]` for some), and in the same commit those on `released`, items that
        only take turns (no work of their own): PROCESSED whatever `state`, so they never block."""
        if state not in (State.PROCESSED, State.FAILED):
            raise ValueError(f"close() records PROCESSED or FAILED, not {state.name}")

        def build(states: dict[str, ItemState]) -> list[Record]:
            out = []
            for item in released:
                turn = states.get(item)
                if turn is not None and turn.open_lock is not None and turn.open_lock.run_id == run_id:
                    out.append(_new(item, State.PROCESSED, application, run_id, turn.open_lock.record_id,
                                    {"released": state.name}))
            for item in items:
                state_of_item = states.get(item)
                lock = state_of_item.open_lock if state_of_item else None
                if lock is None or lock.run_id != run_id:
                    holder = f"run {lock.run_id}" if lock else "no run"
                    raise ManifestError(f"cannot record {state.name} for {item}: it is held by {holder}, "
                                        f"not by run {run_id}")
                extra = (payloads or {}).get(item)
                out.append(_new(item, state, application, run_id, lock.record_id,
                                {**(payload or {}), **extra} if extra else payload))
            return out

        return self._commit([*items, *released], build)

    def resolve(self, items: Sequence[str], *, note: str = "", run_id: str = "operator") -> list[Record]:
        """Operator: release the fail-locked (or abandoned, locked) ones among `items`, in one
        commit; ManifestError when none of them needs it."""
        def build(states):
            out = []
            for item in items:
                state = states.get(item)
                if state is not None and state.status is ItemStatus.LOCKED:
                    failed = _new(item, State.FAILED, OPERATOR, run_id, state.open_lock.record_id,
                                  {"reason": f"released by operator: {note or 'no note'}"})
                    out += [failed, _new(item, State.RESOLVED, OPERATOR, run_id, failed.record_id, {"note": note})]
                elif state is not None and state.status is ItemStatus.FAIL_LOCKED:
                    out.append(_new(item, State.RESOLVED, OPERATOR, run_id, state.last.record_id, {"note": note}))
            if not out:
                first = states.get(items[0])
                if first is None:
                    raise ManifestError(f"item {items[0]} has no records")
                raise ManifestError(f"item {items[0]} is {first.status.name}, not failed: nothing to resolve")
            return out

        return [r for r in self._commit(list(items), build) if r.state is State.RESOLVED]

    def skip(self, items: Sequence[str], *, note: str = "", run_id: str = "operator") -> list[Record]:
        """Operator: never process these items again (one commit)."""
        def build(states):
            out = []
            for item in items:
                state = states.get(item)
                if state is not None and state.status is ItemStatus.SKIPPED:
                    continue
                previous = state.last.record_id if state and state.last else None
                out.append(_new(item, State.SKIPPED, OPERATOR, run_id, previous, {"note": note}))
            return out

        return self._commit(list(items), build)

class ManifestSnapshot(ManifestStore):
    """The manifest read once (at the first read): later reads, its version included, see the
    same rows."""

    def __init__(self, path: str):
        super().__init__(path)
        self._read_once: tuple[int, pa.Table] | None = None

    def _read(self, items=None) -> tuple[int, pa.Table]:
        if self._read_once is None:
            self._read_once = super()._read()
        version, data = self._read_once
        return version, _only_items(data, items)

    def version(self) -> int:
        return self._read()[0]

    def _commit(self, items, build):
        raise TypeError(f"a snapshot of the manifest at {self.path} is read-only: append through "
                        "ManifestStore, which reads the table again at each attempt")


def _states(records: Sequence[Record]) -> dict[str, ItemState]:
    return {item: ItemState(item, item_status(recs), tuple(recs))
            for item, recs in group_by_item(records).items()}


def _only_items(data: pa.Table, items: Iterable[str] | None) -> pa.Table:
    """The rows of `items` (all rows when None).

    Filtered in Arrow, never as a delta-rs predicate: an IN list of some 30,000 items (a 300-day
    backfill's close) overflows the native stack of delta-rs's SQL parsing and kills the process
    with a segfault. Statistics prune nothing on item ids anyway."""
    if items is None:
        return data
    return data.filter(pc.is_in(data["item_id"], value_set=pa.array(sorted(set(items)), pa.string())))


def _check_sequence(existing: Sequence[Record], new_records: Sequence[Record]) -> None:
    """Every new record must be a legal append given those before it (planning rules)."""
    by_item: dict[str, list[Record]] = {}
    for record in existing:
        by_item.setdefault(record.item_id, []).append(record)
    for record in new_records:
        history = by_item.setdefault(record.item_id, [])
        check_append(history, record)
        history.append(record)


def _new(item: str, state: State, application: str, run_id: str, previous: str | None,
         payload: Mapping | None) -> Record:
    return Record(record_id=uuid.uuid4().hex, item_id=item, state=state, application=application,
                  run_id=run_id, previous_record_id=previous, payload=dict(payload) if payload else None)


def _fmt(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "an unknown time"


# -- locks: who holds one, and when it is abandoned ---------------------------------------------

def lock_age(record: Record, now: datetime) -> timedelta:
    return now - record.recorded_at if record.recorded_at else timedelta(0)


def claiming_process() -> dict:
    """What a PROCESSING record stores of the process that claims: host and pid."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _writer_alive_elsewhere(lock: Record) -> bool:
    """The lock's process runs on this host, is not this process, and still exists: it may
    still be writing, whatever Dagster says of its run (run monitoring can cancel a run while
    the process that executes it in itself goes on). This process's own locks go by the run's
    status: its runs are over when they return."""
    payload = lock.payload or {}
    if payload.get("host") != socket.gethostname() or not payload.get("pid") or int(payload["pid"]) == os.getpid():
        return False
    return _process_gone(lock) is None


def _process_gone(lock: Record) -> str | None:
    """The lock's process ran on this host and no longer exists (killed, crashed)."""
    payload = lock.payload or {}
    if payload.get("host") != socket.gethostname() or not payload.get("pid"):
        return None
    try:
        os.kill(int(payload["pid"]), 0)
    except ProcessLookupError:
        return f"its process {payload['pid']} on {payload['host']} is gone"
    except PermissionError:
        return None  # alive, owned by someone else
    return None


def abandoned_lock_check(instance, max_lock_age_hours: float, now: datetime | None = None) -> RunFinishedCheck:
    """Why a lock's run no longer holds it; None while it may still be running.

    Never while the claiming process, on this host, still exists (another process's run
    canceled by run monitoring may still write). Abandoned: the Dagster instance reports the
    run finished (failed, canceled, ...), or the claiming process on this host is gone (a killed
    in-process run stays STARTED in Dagster), or the run is unknown to this instance and the lock
    is older than max_lock_age_hours.
    """
    def check(lock: Record) -> str | None:
        if _writer_alive_elsewhere(lock):
            return None
        run = instance.get_run_by_id(lock.run_id) if instance is not None else None
        if run is not None and run.is_finished:
            return f"run {lock.run_id} finished with status {run.status.value}"
        gone = _process_gone(lock)
        if gone:
            return f"run {lock.run_id}: {gone}"
        if run is not None:
            return None
        age = lock_age(lock, now or datetime.now(timezone.utc))
        if age.total_seconds() > max_lock_age_hours * 3600:
            return (f"run {lock.run_id} is unknown to this Dagster instance and its lock is "
                    f"{age.total_seconds() / 3600:.1f} h old")
        return None
    return check

