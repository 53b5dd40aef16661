"""`incremental-assets forget`: erase users from every table the pipeline keeps (docs/rules.md 1).

1. `find` counts the rows holding the ids, per table and in the source, and the processed load
   hours that hold them (in the source, in base_events or among the rejected rows).
2. `request_erasure` records the request (ids as digests) and makes those hours due again, both
   while holding the hourly step's turn: an hourly run either ended before the record and is
   run again, or starts after the run-again rows and already leaves the ids out. The event days
   an operator skipped are never rebuilt, so it removes the ids from their daily rows and
   attribute states itself, and queues those users for attributes.
3. The caller runs the pipeline (`runner.run_until`): each due hour is read without the erased
   rows, which removes them as a delete in the source would (their copies, sessions, filtered
   rows and counts), and the days and users they touched are aggregated again.
4. `complete_erasure` counts again and records COMPLETED (with what was removed) when no table
   holds the ids.

Files of earlier table versions still hold the rows until vacuum deletes them, after
`vacuum_retention_hours` (`incremental-assets maintain`, or the daily maintenance schedule).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from incremental_assets.names import (
    ALL_TABLES,
    ATTRIBUTE_STATES,
    BASE_EVENTS,
    DAILY_AGGREGATES,
    FILTERED_EVENTS,
    HOUR_LEDGER,
    HOURLY_TURN,
    REJECTED_EVENTS,
    USERS_TO_REFRESH,
)
from incremental_assets.planning.plans import SOURCE_ROWS
from incremental_assets.planning.processing_manifest import State
from incremental_assets.planning.reconcile import RUN_AGAIN
from incremental_assets.settings import Settings
from incremental_assets.sources.reader import read_source
from incremental_assets.sources.schema import load_time
from incremental_assets.state.day_ledger import skipped_event_days
from incremental_assets.state.erasure_requests import COMPLETED, REQUESTED, RequestRecord, append_records
from incremental_assets.state.hour_ledger import LEDGER_SCHEMA, processed_hours
from incremental_assets.state.users_to_refresh import queued
from incremental_assets.transforms.erasure import (
    ID_COLUMNS,
    ErasedIds,
    holding_erased,
    id_digest,
    states_holding_erased,
    states_without_erased,
    without_erased,
)
from resources.manifest import ItemLockedError, ManifestStore, abandoned_lock_check, claiming_process
from resources.tables import RowRange, TableStore

# Per table, its rows holding the ids and its rows without them, where a table holds them
# otherwise than in its id columns.
ERASED_ROWS = {ATTRIBUTE_STATES: (states_holding_erased, states_without_erased)}


@dataclass(frozen=True)
class Found:
    """Rows holding the ids, per table (and the source), the processed load hours holding them,
    and the sessions and event days their filtered rows belong to."""

    rows: dict[str, int]
    load_hours: tuple[datetime, ...]
    linked_domain_userids: tuple[str, ...] = ()  # seen with an erased user_id: their other rows stay
    sessions: int = 0  # sessions with a filtered row holding the ids: derived again without those rows
    event_days: tuple[date, ...] = ()  # the days those sessions' filtered rows lie on: aggregated again

    @property
    def rows_in_tables(self) -> int:
        return sum(n for name, n in self.rows.items() if name != SOURCE_ROWS)

    def describe(self) -> str:
        tables = ", ".join(f"{name}: {n}" for name, n in sorted(self.rows.items())
                           if n and name != SOURCE_ROWS) or "none"
        lines = [f"rows in the warehouse's tables: {self.rows_in_tables} ({tables})",
                 f"rows in the source: {self.rows.get(SOURCE_ROWS, 0)} (left there: the source is its loader's "
                 "to erase; "
                 "once the ids are erased, every run reads it without them)",
                 f"processed load hours to run again: {len(self.load_hours)}"
                 + (f" ({self.load_hours[0]:%Y-%m-%d %H:00} .. {self.load_hours[-1]:%Y-%m-%d %H:00})"
                    if self.load_hours else "")]
        if self.linked_domain_userids:
            lines.append(f"domain_userids seen with these user ids, whose rows without a user_id stay: "
                         f"{', '.join(self.linked_domain_userids)} (add --domain-userid for each to erase them too)")
        return "\n".join(lines)


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    ids: ErasedIds
    found: Found  # what held the ids once the request was recorded
    note: str = ""


def erased(ids: list[tuple[str, str]]) -> ErasedIds:
    """The digests of (column, value) pairs; an empty value is a ValueError naming its option."""
    for column, value in ids:
        if not value or not value.strip():
            raise ValueError(f"--{column.replace('_', '-')} needs a non-empty id, got {value!r}")
    if not ids:
        raise ValueError("name at least one user: --domain-userid ID or --user-id ID")
    return ErasedIds.of((column, id_digest(value)) for column, value in ids)


def find(settings: Settings, tables: TableStore, ids: ErasedIds) -> Found:
    """What holds the ids now: rows per table and in the source, and the processed load hours."""
    rows: dict[str, int] = {}
    hours: set[datetime] = set()
    linked: tuple[str, ...] = ()
    sessions, days = 0, ()
    for name in ALL_TABLES:
        if not tables.exists(name):
            continue
        df = tables.read(name)
        if not set(ID_COLUMNS) & set(df.columns):
            continue
        holding = ERASED_ROWS.get(name, (holding_erased,))[0](df, ids)
        if name == BASE_EVENTS and ids.digests.get("user_id"):
            linked = _linked_domain_userids(holding, ids)
        if name in (BASE_EVENTS, REJECTED_EVENTS):
            hour = F.date_trunc("hour", "load_tstamp" if name == BASE_EVENTS else "load_hour_tstamp")
            by_hour = holding.groupBy(hour.alias("hour")).count().collect()
            rows[name] = sum(r["count"] for r in by_hour)
            hours |= {r["hour"] for r in by_hour if r["hour"] is not None}
        else:
            rows[name] = holding.count()
        if name == FILTERED_EVENTS:
            sessions, days = _sessions_and_days(df, holding)
    source = holding_erased(read_source(tables, settings.source), ids)
    by_hour = source.groupBy(F.date_trunc("hour", load_time()).alias("hour")).count().collect()
    rows[SOURCE_ROWS] = sum(r["count"] for r in by_hour)
    hours |= {r["hour"] for r in by_hour if r["hour"] is not None}
    processed = processed_hours(settings)  # the hour ledger, read without Spark
    return Found(rows, tuple(sorted(h for h in (_utc(h) for h in hours) if h in processed)), linked,
                 sessions, days)


def _sessions_and_days(filtered, holding) -> tuple[int, tuple[date, ...]]:
    """The sessions with a filtered row holding the ids (an erased user's: few, collected once),
    and the event days of all their rows: erased rows leave those days, and a session derived
    again without them may change the others (its start, its user)."""
    sessions = [r[0] for r in holding.select("domain_sessionid").distinct().collect()]
    days = filtered.where(F.col("domain_sessionid").isin(sessions)).select("event_date").distinct().collect()
    return len(sessions), tuple(sorted(r["event_date"] for r in days))


def _linked_domain_userids(holding, ids: ErasedIds) -> tuple[str, ...]:
    """The domain_userids of base_events rows holding an erased user_id, not erased themselves."""
    by_user_id = ErasedIds({"user_id": ids.digests["user_id"]}).matches(holding)
    erased_devices = ids.digests.get("domain_userid", frozenset())
    return tuple(sorted(r[0] for r in holding.where(by_user_id).select("domain_userid").distinct().collect()
                        if r[0] is not None and id_digest(r[0]) not in erased_devices))


def _utc(hour: datetime) -> datetime:
    """A collected hour (naive UTC, as the hourly step reads them) as an aware UTC time."""
    return hour.replace(tzinfo=timezone.utc) if hour.tzinfo is None else hour.astimezone(timezone.utc)


def request_erasure(settings: Settings, tables: TableStore, ids: ErasedIds, *, instance, now: datetime,
                    note: str = "") -> ErasureRequest:
    """Record the request, then make the processed load hours holding the ids due again.

    Both in the hourly step's turn (ItemLockedError, saying to try again, while an hourly run
    holds it; hourly runs wait for it meanwhile): every hourly run that starts after the record
    leaves the ids out, every one that ended before it wrote the rows `find` then sees, and none
    writes its ledger rows between the search and the run-again rows (a catch-up run, which
    replaces its own apps' rows alone, would otherwise record an hour as processed whose other
    apps' rows still hold the ids)."""
    request_id = f"forget-{uuid.uuid4().hex[:12]}"
    manifest = ManifestStore.of(settings)
    try:
        manifest.claim([HOURLY_TURN], application="forget", run_id=request_id,
                       run_finished=abandoned_lock_check(instance, settings.max_lock_age_hours),
                       payload=claiming_process())
    except ItemLockedError as exc:
        raise ItemLockedError(f"{exc}: an hourly run is processing load hours; forget again once it ends "
                              "(the request was not recorded)", exc.item) from None
    try:
        append_records(settings, _records(request_id, ids, REQUESTED, now, None, note))
        found = find(settings, tables, ids)
        if found.load_hours:
            rows = [(hour, RUN_AGAIN, settings.rules_digest(), now, request_id, None, None, None)
                    for hour in found.load_hours]
            tables.merge(HOUR_LEDGER, tables.spark.createDataFrame(rows, LEDGER_SCHEMA), keys=["load_hour_tstamp"])
        erase_from_skipped_days(settings, tables, ids, request_id)
    finally:
        manifest.close([], run_id=request_id, state=State.PROCESSED, application="forget", released=[HOURLY_TURN])
    return ErasureRequest(request_id, ids, found, note)


def erase_from_skipped_days(settings: Settings, tables: TableStore, ids: ErasedIds, run_id: str) -> list[str]:
    """Remove the ids from the daily rows and attribute states of the event days an operator
    skipped: the hours run again rebuild every other day, never those. Their users are queued
    for attributes before and after (an attributes run between the two still leaves the second
    queue rows); returns them."""
    days = sorted(skipped_event_days(settings))
    found: dict[str, tuple[DataFrame, list]] = {}
    for name in (DAILY_AGGREGATES, ATTRIBUTE_STATES):
        if days and tables.exists(name):
            on_days = tables.read(name).where(F.col("event_date").isin(days))
            pairs = ERASED_ROWS.get(name, (holding_erased,))[0](on_days, ids).select("event_date", "domain_userid")
            # Every row of a (day, user) holding the ids: they are replaced together. A few users'
            # rows of a few days, collected before their table is rewritten.
            held = on_days.join(pairs.distinct(), ["event_date", "domain_userid"]).select(*on_days.columns)
            rows = held.collect()
            if rows:
                found[name] = (held.sparkSession.createDataFrame(rows, held.schema), rows)
    users = sorted({r["domain_userid"] for _, rows in found.values() for r in rows})
    if not users:
        return []
    queue = tables.spark.createDataFrame([(u,) for u in users], "domain_userid string")
    tables.append(USERS_TO_REFRESH, queued(queue, run_id))
    for name, (held, rows) in found.items():
        cleaned = ERASED_ROWS.get(name, (None, without_erased))[1](held, ids)
        by_day: dict = {}
        for r in rows:
            by_day.setdefault(r["event_date"], set()).add(r["domain_userid"])
        tables.replace(name, cleaned, small=True, rows=[
            RowRange("event_date", day, day + timedelta(days=1), key="domain_userid", values=tuple(sorted(u)))
            for day, u in sorted(by_day.items())])
    tables.append(USERS_TO_REFRESH, queued(queue, f"{run_id}-after"))
    return users


def complete_erasure(settings: Settings, tables: TableStore, request: ErasureRequest, *, now: datetime) -> Found:
    """What still holds the ids; once no table does, the request is recorded COMPLETED with
    what it removed (rows per table, load hours run again)."""
    left = find(settings, tables, request.ids)
    if not left.rows_in_tables:
        append_records(settings, _records(request.request_id, request.ids, COMPLETED, now, request.found, request.note))
    return left


def _records(request_id: str, ids: ErasedIds, state: str, now: datetime, found: Found | None,
             note: str) -> list[RequestRecord]:
    detail = "; ".join(filter(None, [found.describe().splitlines()[0] if found else "", note]))
    rows, hours = (found.rows_in_tables, len(found.load_hours)) if found else (None, None)
    return [RequestRecord(request_id, column, digest, state, now, rows, hours, detail)
            for column, digests in sorted(ids.digests.items()) for digest in sorted(digests)]
