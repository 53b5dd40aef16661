"""The rules of an append-only processing manifest (as Snowplow's processing manifest keeps one).

An item (one volume of data: here an asset's partition window) has no stored state: its
status is derived by replaying its records in log order. PROCESSING is a lock; it is closed
by a PROCESSED or FAILED record that refers to it by `previous_record_id`. FAILED leaves the
item fail-locked until an operator adds a RESOLVED record that refers to the failure.
SKIPPED is final. A log in which some record breaks these rules describes an INVALID item.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime


class State(enum.Enum):
    NEW = "NEW"
    PROCESSING = "PROCESSING"
    PROCESSED = "PROCESSED"
    FAILED = "FAILED"
    RESOLVED = "RESOLVED"
    SKIPPED = "SKIPPED"


class ItemStatus(enum.Enum):
    NEW = "NEW"  # no records, or only NEW ones
    LOCKED = "LOCKED"  # an application is processing it
    FAIL_LOCKED = "FAIL_LOCKED"  # processing failed; an operator must resolve it
    READY = "READY"  # processed (or resolved) and free for the next application
    SKIPPED = "SKIPPED"  # forgotten on purpose; nothing may follow
    INVALID = "INVALID"  # some record breaks the rules (only a manual edit can do that)


# The states an operator looks at: held by a run, stopped by a failure, or broken.
PROBLEM_STATUSES = (ItemStatus.LOCKED, ItemStatus.FAIL_LOCKED, ItemStatus.INVALID)


class ManifestError(Exception):
    """A record cannot be appended, or an item's records break the manifest's rules."""


@dataclass(frozen=True)
class Record:
    """One manifest row: a change of state of one item, made by one run of one application."""

    record_id: str
    item_id: str
    state: State
    application: str
    run_id: str
    previous_record_id: str | None = None
    payload: Mapping | None = None
    recorded_at: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.state, str):  # rows read back from storage hold the state's name
            try:
                object.__setattr__(self, "state", State(self.state))
            except ValueError:
                raise ValueError(
                    f"state={self.state!r} is not accepted; use one of "
                    f"{', '.join(s.value for s in State)}") from None
        if not isinstance(self.state, State):
            raise ValueError(f"state={self.state!r} is not accepted; it must be a State")
        for name in ("record_id", "item_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name}={getattr(self, name)!r} is not accepted; it must be a "
                                 "non-empty string")


@dataclass(frozen=True)
class _Item:
    """An item's state after replaying an accepted prefix of its records."""

    item_id: str | None = None
    status: ItemStatus = ItemStatus.NEW
    lock: Record | None = None  # the open PROCESSING record, when LOCKED
    failure: Record | None = None  # the latest FAILED record, resolved or not
    record_ids: frozenset[str] = frozenset()


def _close_lock(item: _Item, record: Record) -> None:
    """PROCESSED and FAILED must close the open PROCESSING record by referring to it."""
    name = record.state.value
    if item.status is not ItemStatus.LOCKED:
        raise ManifestError(
            f"item {item.item_id} has no open PROCESSING record (status {item.status.value}); "
            f"{name} record {record.record_id} must close one")
    if record.previous_record_id != item.lock.record_id:
        raise ManifestError(
            f"{name} record {record.record_id} of item {item.item_id} refers to "
            f"{record.previous_record_id!r}, not to the open PROCESSING record "
            f"{item.lock.record_id} (run {item.lock.run_id})")


def _apply(item: _Item, record: Record) -> _Item:
    """The item after `record`, or ManifestError when the rules forbid appending it."""
    item_id = item.item_id or record.item_id
    item = replace(item, item_id=item_id)
    if record.item_id != item_id:
        raise ManifestError(
            f"record {record.record_id} is for item {record.item_id}, not for item {item_id}")
    if record.record_id in item.record_ids:
        raise ManifestError(f"item {item_id} already has a record {record.record_id}")
    if item.status is ItemStatus.SKIPPED:
        raise ManifestError(f"item {item_id} is skipped; nothing may follow a SKIPPED record")
    if item.status is ItemStatus.LOCKED and record.state not in (State.PROCESSED, State.FAILED):
        raise ManifestError(
            f"item {item_id} is locked by run {item.lock.run_id} (record {item.lock.record_id}); "
            f"it cannot take a {record.state.value} record until that run closes its lock")
    if item.status is ItemStatus.FAIL_LOCKED and record.state not in (State.RESOLVED,
                                                                       State.SKIPPED):
        raise ManifestError(
            f"item {item_id} is fail-locked by run {item.failure.run_id} (FAILED record "
            f"{item.failure.record_id}); resolve it first")

    ids = item.record_ids | {record.record_id}
    state = record.state
    if state is State.NEW:
        if item.status is not ItemStatus.NEW:
            raise ManifestError(
                f"item {item_id} already exists (status {item.status.value}); NEW only declares "
                "an item that has no other records")
        return replace(item, record_ids=ids)
    if state is State.PROCESSING:  # the item is NEW or READY here: take the lock
        return replace(item, status=ItemStatus.LOCKED, lock=record, record_ids=ids)
    if state is State.PROCESSED:
        _close_lock(item, record)
        return replace(item, status=ItemStatus.READY, lock=None, record_ids=ids)
    if state is State.FAILED:
        _close_lock(item, record)
        return replace(item, status=ItemStatus.FAIL_LOCKED, lock=None, failure=record,
                       record_ids=ids)
    if state is State.RESOLVED:
        if item.status is not ItemStatus.FAIL_LOCKED:
            raise ManifestError(
                f"item {item_id} is not fail-locked (status {item.status.value}); only a failed "
                "item can be resolved")
        if record.previous_record_id != item.failure.record_id:
            raise ManifestError(
                f"RESOLVED record {record.record_id} of item {item_id} refers to "
                f"{record.previous_record_id!r}, not to the FAILED record "
                f"{item.failure.record_id}")
        return replace(item, status=ItemStatus.READY, record_ids=ids)
    # SKIPPED: allowed on NEW, READY and FAIL_LOCKED items (LOCKED and SKIPPED were refused above).
    return replace(item, status=ItemStatus.SKIPPED, record_ids=ids)


def _replay(records: Sequence[Record]) -> _Item:
    """Replay one item's records; ManifestError at the first record the rules forbid."""
    _one_item(records)
    item = _Item()
    for record in records:
        item = _apply(item, record)
    return item


def _one_item(records: Sequence[Record]) -> None:
    item_ids = {record.item_id for record in records}
    if len(item_ids) > 1:
        raise ValueError(
            f"records of several items were given together ({', '.join(sorted(item_ids))}); "
            "pass one item's records (see group_by_item)")


def item_status(records: Sequence[Record]) -> ItemStatus:
    """The status of one item from its records in log order: INVALID if any record breaks the
    rules, else what the last significant record says."""
    try:
        return _replay(records).status
    except ManifestError:
        return ItemStatus.INVALID


def check_append(records: Sequence[Record], record: Record) -> None:
    """Raise ManifestError unless `record` may be appended to the item whose records (in log order)
    are `records`."""
    try:
        item = _replay(records)
    except ManifestError as exc:
        raise ManifestError(f"item {record.item_id} is invalid ({exc}); fix the manifest first") \
            from None
    _apply(item, record)


def open_lock(records: Sequence[Record]) -> Record | None:
    """The PROCESSING record holding the item's lock, or None when it is not locked (ManifestError
    when the records break the rules)."""
    return _replay(records).lock


def last_failure(records: Sequence[Record]) -> Record | None:
    """The item's most recent FAILED record, resolved or not, or None when it never failed
    (ManifestError when the records break the rules)."""
    return _replay(records).failure


def accepted_records(records: Iterable[Record]) -> list[Record]:
    """Keep, in log order, each record that check_append accepts after the records kept before it,
    so the first claim in the log wins and later conflicting ones are ignored (records of several
    items may be mixed)."""
    items: dict[str, _Item] = {}
    kept = []
    for record in records:
        try:
            items[record.item_id] = _apply(items.get(record.item_id, _Item()), record)
        except ManifestError:
            continue
        kept.append(record)
    return kept


def group_by_item(records: Iterable[Record]) -> dict[str, list[Record]]:
    """Each item's records, in log order, keyed by item id (items in order of first appearance)."""
    grouped: dict[str, list[Record]] = {}
    for record in records:
        grouped.setdefault(record.item_id, []).append(record)
    return grouped
