"""The daily ledger: per (event day, load day), the filtered rows against the rows aggregated
and the rows pending. Read and written with delta-rs only (small tables, no Spark).

Rows are *unaccounted* when filtered - aggregated - pending is not 0 for some (event day,
load day): new rows nobody planned yet, rows a rerun removed, a plan whose daily run failed or
never ran. Every plan covers every such day, whatever hour touched it (docs/rules.md 6):
- a day with fewer rows than accounted for is rebuilt (pending never goes negative);
- otherwise the time-based late-data rule on its unaccounted rows: rebuilt when one is on time or when its
  pending plus late rows reach min_rows_to_process, else they become pending.
A rebuild writes the day's ledger rows after daily_aggregates: the completion marker.
An event day an operator skipped is never planned: its unaccounted rows are added to its
pending rows (negative when a rerun removed rows it had aggregated), so it stalls no range.

A day after the last daily partition that exists now (tomorrow's, from an event derived up to
24 h after a load of today) waits: it is not planned and its rows stay unaccounted until its
partition exists (docs/rules.md 6).

Invariant once a plan is carried out: for every pair of a day whose partition exists,
aggregated + pending = filtered.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import date, datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from incremental_assets.names import ATTRIBUTES, DAILY_AGGREGATES, DAY_LEDGER, FILTERED_COUNTS, USERS_TO_REFRESH
from incremental_assets.partition_bounds import last_event_day
from incremental_assets.planning.attribute_declarations import VERSIONS_COLUMN
from incremental_assets.planning.default_attributes import held_attribute_keys
from incremental_assets.planning.hours import parse_day_key
from incremental_assets.planning.late_days import (
    LateDaysPlan,
    conservation_check,
    days_to_process,
    waiting_for_partition,
)
from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.settings import Settings
from resources.manifest import ManifestStore
from resources.manifest_items import split_item_id
from resources.tables import append_arrow, read_delta_arrow

Pair = tuple[date, date]  # (event day, load day)


def _sums(table: pa.Table | None, value: str) -> dict[Pair, int]:
    """Per pair, the sum of `value` (a null counts as 0); summed in Arrow: the ledgers hold a
    row per load hour and event day, read at every sensor tick."""
    if table is None:
        return {}
    summed = table.group_by(["event_date", "load_date"]).aggregate([(value, "sum")])
    return {(day, load_day): total or 0 for day, load_day, total in zip(
        summed["event_date"].to_pylist(), summed["load_date"].to_pylist(), summed[f"{value}_sum"].to_pylist())}


def _digests(table: pa.Table | None, rows: str, digest: str) -> dict[Pair, tuple[int, int | None]]:
    """Per pair: the rows and the sum of their content digests (None where a row was written
    before digests were kept, or the table has none)."""
    if table is None:
        return {}
    if digest not in table.column_names:
        return {pair: (count, None) for pair, count in _sums(table, rows).items()}
    summed = table.group_by(["event_date", "load_date"]).aggregate(
        [(rows, "sum"), (digest, "sum"), (digest, "count", pc.CountOptions(mode="only_null"))])
    return {(day, load_day): (count or 0, None if missing else total) for day, load_day, count, total, missing in zip(
        summed["event_date"].to_pylist(), summed["load_date"].to_pylist(), summed[f"{rows}_sum"].to_pylist(),
        summed[f"{digest}_sum"].to_pylist(), summed[f"{digest}_count"].to_pylist())}


class DailyLedger:
    """Both tables the daily ledger is made of, read once: the filtered rows per (load hour,
    event day) and the day ledger; every question below is answered from that one read."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.counts = read_delta_arrow(settings.table_path(FILTERED_COUNTS))
        self.ledger = read_delta_arrow(settings.table_path(DAY_LEDGER))

    @functools.cached_property
    def state(self) -> tuple[dict[Pair, int], dict[Pair, int], dict[Pair, int]]:
        """Filtered, aggregated and pending rows per (event day, load day)."""
        return (_sums(self.counts, "rows"), _sums(self.ledger, "rows_aggregated"),
                _sums(self.ledger, "rows_pending"))

    @functools.cached_property
    def unaccounted(self) -> dict[Pair, int]:
        """filtered - aggregated - pending for every pair where it is not 0."""
        filtered, aggregated, pending = self.state
        pairs = filtered.keys() | aggregated.keys() | pending.keys()
        differences = {p: filtered.get(p, 0) - aggregated.get(p, 0) - pending.get(p, 0) for p in pairs}
        return {p: n for p, n in differences.items() if n}

    def days_loaded_by_hour(self, hours: Iterable[datetime]) -> dict[datetime, set[date]]:
        """Per load hour of `hours`, the event days its filtered rows landed on when it last ran."""
        if self.counts is None:
            return {}
        loaded = self.counts["load_hour_tstamp"]
        counts = self.counts.filter(pc.is_in(loaded, pa.array(sorted(hours), loaded.type)))
        days: dict[datetime, set[date]] = {}
        for hour, day in zip(counts["load_hour_tstamp"].to_pylist(), counts["event_date"].to_pylist()):
            days.setdefault(hour, set()).add(day)
        return days

    @functools.cached_property
    def skipped_days(self) -> set[date]:
        """The event days an operator skipped (never rebuilt again), from the manifest."""
        return skipped_event_days(self.settings)

    @functools.cached_property
    def content_changed_days(self) -> set[date]:
        """Event days with a fully aggregated (event day, load day) pair whose filtered rows hold
        other content than the rebuild aggregated, at the same count (rules 6): they are rebuilt,
        unless skipped. Pairs with pending rows, or written before digests were kept, are compared
        by count only."""
        filtered = _digests(self.counts, "rows", "rows_digest")
        aggregated = _digests(self.ledger, "rows_aggregated", "digest_aggregated")
        _, _, pending = self.state
        changed = {pair[0] for pair, (rows, digest) in filtered.items()
                   if pair in aggregated and not pending.get(pair) and aggregated[pair][0] == rows
                   and digest is not None and aggregated[pair][1] is not None and aggregated[pair][1] != digest}
        return changed - self.skipped_days if changed else changed


def skipped_event_days(settings: Settings) -> set[date]:
    """The event days whose daily_aggregates item an operator skipped."""
    return {parse_day_key(key) for item, state in ManifestStore.of(settings).unsettled_states().items()
            for asset, key in [split_item_id(item)]
            if asset == DAILY_AGGREGATES and key and state.status is ItemStatus.SKIPPED}


def ledger_state(settings: Settings) -> tuple[dict[Pair, int], dict[Pair, int], dict[Pair, int]]:
    """Filtered, aggregated and pending rows per (event day, load day)."""
    return DailyLedger(settings).state


def unaccounted(settings: Settings) -> dict[Pair, int]:
    """filtered - aggregated - pending for every pair where it is not 0."""
    return DailyLedger(settings).unaccounted


def plan_late_days(settings: Settings, now: datetime, ledger: DailyLedger | None = None) -> LateDaysPlan:
    """The event days to rebuild at `now`; the late rows of the others are recorded as pending."""
    plan, new_pending = late_days(settings, now, ledger)
    record_pending(settings, new_pending)
    return plan


def late_days(settings: Settings, now: datetime,
              ledger: DailyLedger | None = None) -> tuple[LateDaysPlan, dict[Pair, int]]:
    """The event days to rebuild at `now`, and the rows that become pending (nothing is written:
    `plan_late_days` records them; a plan shown before it runs does not). A day after the last
    daily partition that exists at `now` waits: neither rebuilt nor pending (`LateDaysPlan.waiting`)."""
    ledger = ledger or DailyLedger(settings)
    first_day, last_day = settings.start_date.date(), last_event_day(settings, now)
    skipped = ledger.skipped_days
    open_rows, waiting = waiting_for_partition(
        {pair: n for pair, n in ledger.unaccounted.items() if pair[0] >= first_day}, last_day)
    # A skipped day is never rebuilt: whatever changed in its rows is held back with its pending ones.
    held = {pair: n for pair, n in open_rows.items() if pair[0] in skipped}
    open_rows = {pair: n for pair, n in open_rows.items() if pair not in held}
    # Rebuilt whatever the late-data rule says: a day with fewer rows than accounted for (a rerun removed
    # some), or with other content at the same count (rows corrected in place).
    must_rebuild = {day for (day, _), n in open_rows.items() if n < 0}
    must_rebuild |= {day for day in ledger.content_changed_days if first_day <= day <= last_day}
    _, _, pending = ledger.state
    pending_by_day: dict[date, int] = {}
    for (day, _), n in pending.items():
        if day not in skipped:  # a skipped day's pending rows may be negative: they wait for nothing
            pending_by_day[day] = pending_by_day.get(day, 0) + n
    grown = {pair: n for pair, n in open_rows.items() if pair[0] not in must_rebuild}
    plan = days_to_process(grown, {d: n for d, n in pending_by_day.items() if n},
                           reprocess_days=settings.reprocess_days, min_rows_to_process=settings.min_rows_to_process,
                           start_date=first_day)
    days = sorted(set(plan.days) | must_rebuild)
    return (LateDaysPlan(days=days, skipped={d: n for d, n in plan.skipped.items() if d not in must_rebuild},
                         waiting=waiting),
            {**{pair: n for pair, n in grown.items() if pair[0] not in days}, **held})


def record_pending(settings: Settings, new_pending: dict[Pair, int]) -> None:
    """Add rows to the pending counts of these (event day, load day) pairs."""
    if not new_pending:
        return
    pairs = sorted(new_pending)
    source = pa.table({
        "event_date": pa.array([d for d, _ in pairs], pa.date32()),
        "load_date": pa.array([ld for _, ld in pairs], pa.date32()),
        "rows_aggregated": pa.array([0] * len(pairs), pa.int64()),
        "rows_pending": pa.array([new_pending[p] for p in pairs], pa.int64()),
        "last_rebuilt_at": pa.array([None] * len(pairs), pa.timestamp("us", tz="UTC")),
        "last_rebuilt_run_id": pa.array([None] * len(pairs), pa.string()),
        "digest_aggregated": pa.array([None] * len(pairs), pa.int64()),
    })
    path = settings.table_path(DAY_LEDGER)
    if not DeltaTable.is_deltatable(path):
        append_arrow(path, source)
        return
    (DeltaTable(path).merge(source, predicate="t.event_date = s.event_date AND t.load_date = s.load_date",
                            source_alias="s", target_alias="t", merge_schema=True)
     .when_matched_update({"rows_pending": "t.rows_pending + s.rows_pending"})
     .when_not_matched_insert_all()
     .execute())


def users_queued(settings: Settings) -> bool:
    """Whether rebuilt days queued users that attributes has not taken yet (its run failed or
    was killed after the days were rebuilt)."""
    queue = read_delta_arrow(settings.table_path(USERS_TO_REFRESH), ["append_id"])
    return queue is not None and queue.num_rows > 0


def recorded_attribute_keys(settings: Settings) -> set[str] | None:
    """The attributes (name@version) the attributes table holds; None: no table."""
    path = settings.table_path(ATTRIBUTES)
    if not DeltaTable.is_deltatable(path):
        return None
    if VERSIONS_COLUMN not in DeltaTable(path).schema().to_arrow().names:
        return held_attribute_keys(None)
    recorded = read_delta_arrow(path, [VERSIONS_COLUMN]).column(0).unique().to_pylist()
    return {key for text in recorded for key in held_attribute_keys(text)}


def declared_attributes_changed(settings: Settings) -> bool:
    """Whether the attributes table holds other declared attributes than the settings declare
    (an attributes run is then due, with no day rebuilt)."""
    recorded = recorded_attribute_keys(settings)
    return recorded is not None and recorded != {d.key for d in settings.declared_attributes()}


def days_loaded_between(settings: Settings, start: datetime, end: datetime) -> set[date]:
    """The event days of the filtered rows loaded in [start, end)."""
    counts = read_delta_arrow(settings.table_path(FILTERED_COUNTS), ["event_date", "load_hour_tstamp"])
    if counts is None:
        return set()
    hours = counts["load_hour_tstamp"]
    loaded = counts.filter(pc.and_(pc.greater_equal(hours, pa.scalar(start, hours.type)),
                                   pc.less(hours, pa.scalar(end, hours.type))))
    return set(loaded["event_date"].to_pylist())


def rows_accounted_for(settings: Settings, now: datetime) -> dict:
    """Per event day, filtered rows against rows aggregated + rows pending; `broken`: the days
    with an unaccounted (event day, load day) pair, each with filtered - aggregated - pending;
    `waiting`: those after the last daily partition that exists at `now`, which are not broken
    (they cannot be rebuilt yet), with their unaccounted rows."""
    ledger = DailyLedger(settings)
    filtered, aggregated, pending = ({day: 0 for day, _ in sums} for sums in ledger.state)
    for totals, sums in zip((filtered, aggregated, pending), ledger.state):
        for (day, _), n in sums.items():
            totals[day] += n
    off_pairs, waiting = waiting_for_partition(ledger.unaccounted, last_event_day(settings, now))
    day_difference = conservation_check(filtered, aggregated, pending)
    return {"filtered": filtered, "aggregated": aggregated, "pending": pending, "waiting": waiting,
            "broken": {day: day_difference.get(day, 0) for day in sorted({day for day, _ in off_pairs})}}
