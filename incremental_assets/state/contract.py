"""What every table of the warehouse must answer, in one list: which module owns it, how its rows
before a moved start leave (`start_moved`), and how an erased user's rows leave (`forget`).

A capability that must reach every table reads this list rather than keeping its own, and a
test holds the list against `names.WAREHOUSE_TABLES`: a table added later without an answer
here fails it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from incremental_assets.names import (
    ATTRIBUTE_STATES,
    ATTRIBUTES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    DAY_LEDGER,
    ERASURE_REQUESTS,
    EVENT_COPIES,
    FILTERED_COUNTS,
    FILTERED_EVENTS,
    HOUR_LEDGER,
    LIFECYCLE,
    PLANS,
    PROCESSING_MANIFEST,
    QUARANTINED,
    REJECTED_EVENTS,
    SESSIONS_TO_REFILTER,
    SKIPPED_HOURS,
    USERS_TO_REFRESH,
)


class RowsBeforeStart(Enum):
    """How a table's rows before a moved start leave it."""

    LOAD_TIME = "removed by their load time"
    EVENT_DAY = "removed by their event day, their users queued for attributes"
    LEDGER = "removed last, by time: the marker that the removal is due"
    DERIVED = "derived again from the rows left (their sessions or users are queued)"
    HISTORY = "kept: a record of operations, not of data"


class Erased(Enum):
    """How an erased user's rows leave a table (`forget`)."""

    ID_COLUMNS = "rows holding the ids in their id columns are removed"
    STATES = "attribute states holding the ids are removed"
    REBUILT = "derived again from rows without the ids (the hours run again)"
    DIGESTS = "holds the ids as digests only"
    NO_IDS = "holds no user id"


@dataclass(frozen=True)
class TableContract:
    owner: str  # the module that owns the table's schema, reads and writes
    before_start: RowsBeforeStart
    time_column: str | None = None  # the column LOAD_TIME, EVENT_DAY and LEDGER remove by
    erased: Erased = Erased.ID_COLUMNS


CONTRACTS: dict[str, TableContract] = {
    BASE_EVENTS: TableContract("steps.hourly", RowsBeforeStart.LOAD_TIME, "load_tstamp"),
    EVENT_COPIES: TableContract("steps.hourly", RowsBeforeStart.LOAD_TIME, "load_tstamp"),
    REJECTED_EVENTS: TableContract("steps.hourly", RowsBeforeStart.LOAD_TIME, "load_hour_tstamp"),
    FILTERED_EVENTS: TableContract("steps.hourly", RowsBeforeStart.LOAD_TIME, "load_tstamp"),
    FILTERED_COUNTS: TableContract("steps.hourly", RowsBeforeStart.LOAD_TIME, "load_hour_tstamp", Erased.REBUILT),
    LIFECYCLE: TableContract("steps.hourly", RowsBeforeStart.DERIVED),
    QUARANTINED: TableContract("steps.hourly", RowsBeforeStart.DERIVED),
    SESSIONS_TO_REFILTER: TableContract("steps.hourly", RowsBeforeStart.DERIVED),
    HOUR_LEDGER: TableContract("state.hour_ledger", RowsBeforeStart.LEDGER, "load_hour_tstamp", Erased.REBUILT),
    DAILY_AGGREGATES: TableContract("steps.daily", RowsBeforeStart.EVENT_DAY, "event_date"),
    ATTRIBUTE_STATES: TableContract("steps.daily", RowsBeforeStart.EVENT_DAY, "event_date", Erased.STATES),
    DAY_LEDGER: TableContract("state.day_ledger", RowsBeforeStart.LEDGER, "event_date", Erased.REBUILT),
    USERS_TO_REFRESH: TableContract("steps.daily", RowsBeforeStart.DERIVED),
    ATTRIBUTES: TableContract("steps.daily", RowsBeforeStart.DERIVED),
    PROCESSING_MANIFEST: TableContract("resources.manifest", RowsBeforeStart.HISTORY, erased=Erased.NO_IDS),
    ERASURE_REQUESTS: TableContract("state.erasure_requests", RowsBeforeStart.HISTORY, erased=Erased.DIGESTS),
    SKIPPED_HOURS: TableContract("state.skipped_hours", RowsBeforeStart.HISTORY, erased=Erased.NO_IDS),
    PLANS: TableContract("operator.plans", RowsBeforeStart.HISTORY, erased=Erased.DIGESTS),
}


def tables_removed_before_start(how: RowsBeforeStart) -> tuple[tuple[str, str], ...]:
    """(table, time column) of every table whose rows before a moved start leave `how`."""
    return tuple((name, contract.time_column) for name, contract in CONTRACTS.items()
                 if contract.before_start is how)
