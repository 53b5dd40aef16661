"""An independent computation of docs/rules.md, in plain Python.

Written from the rules page only (never from the pipeline's code), so that a differential test
can compare the pipeline's tables with `expected_tables(...)`. One function per section of the
page; the final state of every table is a function of the source rows and the settings alone.

Readings chosen where the page leaves room:
- Every load hour from `start_date`'s hour on is closed and processed; load hours before it
  do not exist, so their rows are neither kept nor rejected (section 1).
- `rejected_events` holds every rejected row, identical copies included (section 2).
- Dedupe: a copy is dropped when a better-ranked copy was loaded *strictly less* than
  `dedupe_lookback_days` before it; at exactly the look-back it is kept (section 3).
- A copy is dropped by any better-ranked copy, kept or not: A, B (+20 d), C (+40 d) keeps A only.
- `user_id` and `domain_sessionidx` of a session are taken from its kept events (within the
  limit), like end, count and last load: an event past the limit only sets `quarantined_at` (4).
- `filtered_events_counts.load_hour_tstamp` / `load_date` are those of the row's own
  `load_tstamp` (5).
- `daily_aggregates` groups by the event's own `domain_userid`, not the session's; its
  counts use the event names `page_view`, `page_ping`, `transaction`; a null `tr_total`
  adds 0 to revenue (6).
- Window metrics of a user without rows in the window are 0 (7).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from incremental_assets.planning.default_attributes import recorded_versions, with_defaults
from tests.declared_reference import declared_values

DAY = dt.timedelta(days=1)
CENTS = Decimal("0.01")

SOURCE_KEYS = (
    "event_id", "app_id", "event_name", "domain_userid", "domain_sessionid", "domain_sessionidx",
    "user_id", "collector_tstamp", "dvce_created_tstamp", "dvce_sent_tstamp", "derived_tstamp",
    "load_tstamp", "tr_total",
)
TIMESTAMP_KEYS = ("collector_tstamp", "dvce_created_tstamp", "dvce_sent_tstamp", "derived_tstamp", "load_tstamp")

COLUMNS = {
    "base_events": ("event_id", "load_tstamp", "collector_tstamp", "derived_tstamp", "domain_sessionid",
                    "domain_userid", "user_id", "event_name", "app_id", "load_date"),
    "rejected_events": ("event_id", "load_hour_tstamp", "reject_reason"),
    "sessions_lifecycle_manifest": ("domain_sessionid", "domain_userid", "user_id", "app_id", "domain_sessionidx",
                                    "start_tstamp", "end_tstamp", "event_count", "first_load_tstamp",
                                    "last_load_tstamp", "is_quarantined", "quarantined_at"),
    "quarantined_sessions": ("domain_sessionid", "domain_userid", "start_tstamp", "end_tstamp", "event_count",
                             "quarantined_at"),
    "filtered_events": ("event_id", "load_tstamp", "derived_tstamp", "event_date", "domain_sessionid",
                        "domain_userid", "event_name", "session_start_tstamp", "session_domain_userid",
                        "session_user_id"),
    "filtered_events_counts": ("load_hour_tstamp", "event_date", "load_date", "rows"),
    "daily_aggregates": ("event_date", "domain_userid", "events", "page_views", "page_pings", "sessions",
                         "session_ids", "transactions", "revenue", "first_event_tstamp", "last_event_tstamp"),
    "attributes": ("domain_userid", "first_event_date", "last_event_date", "days_active", "lifetime_events",
                   "lifetime_page_views", "lifetime_transactions", "lifetime_revenue", "lifetime_sessions",
                   "page_views_last_7_days", "sessions_last_7_days", "revenue_last_30_days",
                   "events_last_30_days", "attributes_as_of"),
}


@dataclass(frozen=True)
class Settings:
    start_date: dt.datetime
    max_session_days: int = 3
    days_late_allowed: int = 3
    dedupe_lookback_days: int = 30
    app_ids: tuple = ()
    event_names: tuple = ()
    allow_null_dvce_tstamps: bool = True


def expected_tables(rows: list[dict], settings: Settings, as_of: dt.date,
                    declared: tuple = ()) -> dict[str, list[dict]]:
    """Every table the rules give; `attributes` with the `declared` attributes' columns too."""
    read = rows_read(rows, settings)
    valid, rejected = split_valid_and_rejected(read, settings)
    base = kept_copies(valid, settings)
    sessions = sessions_lifecycle(base, settings)
    filtered = filtered_events(base, sessions, settings)
    daily = daily_aggregates(filtered)
    tables = {
        "base_events": base,
        "rejected_events": rejected,
        "sessions_lifecycle_manifest": list(sessions.values()),
        "quarantined_sessions": [s for s in sessions.values() if s["is_quarantined"]],
        "filtered_events": filtered,
        "filtered_events_counts": filtered_events_counts(filtered),
        "daily_aggregates": daily,
        "attributes": attributes(daily, as_of),
    }
    out = {name: [{column: row[column] for column in COLUMNS[name]} for row in table]
           for name, table in tables.items()}
    if declared:
        values = declared_values(filtered, [row["domain_userid"] for row in out["attributes"]], declared, as_of)
        versions = recorded_versions(with_defaults(declared, True, "test"))
        out["attributes"] = [{**row, **values[row["domain_userid"]], "attribute_versions": versions}
                             for row in out["attributes"]]
    return out


# 1. Load time and load hours

def load_time(row: dict) -> dt.datetime | None:
    return row["load_tstamp"] if row["load_tstamp"] is not None else row["collector_tstamp"]


def hour_of(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def utc_date(t: dt.datetime) -> dt.date:
    return t.astimezone(dt.UTC).date()


def normalized(row: dict) -> dict:
    """The row with every source key (missing ones None); aware UTC timestamps only."""
    unknown = set(row) - set(SOURCE_KEYS)
    if unknown:
        raise ValueError(f"unknown source keys {sorted(unknown)}")
    full = {key: row.get(key) for key in SOURCE_KEYS}
    for key in TIMESTAMP_KEYS:
        if full[key] is not None:
            if full[key].utcoffset() is None:
                raise ValueError(f"{key} must be timezone-aware: {full[key]!r}")
            full[key] = full[key].astimezone(dt.UTC)
    return full


def rows_read(rows: list[dict], settings: Settings) -> list[dict]:
    """Rows of the load hours that exist: from start_date's hour on, with a load time."""
    first_hour = hour_of(settings.start_date.astimezone(dt.UTC))
    read = []
    for row in map(normalized, rows):
        t = load_time(row)
        if t is not None and hour_of(t) >= first_hour:
            read.append({**row, "load_hour_tstamp": hour_of(t)})
    return read


# 2. Rows that are not events: rejected_events

REQUIRED = ("event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp")


def in_app_ids(row: dict, settings: Settings) -> bool:
    return not settings.app_ids or row["app_id"] in settings.app_ids


def sent_too_late(row: dict, settings: Settings) -> bool:
    sent = row["dvce_sent_tstamp"] if row["dvce_sent_tstamp"] is not None else row["collector_tstamp"]
    created = row["dvce_created_tstamp"] if row["dvce_created_tstamp"] is not None else row["collector_tstamp"]
    # A comparison with a null is not true (SQL): a row missing either side is not late.
    if sent is None or created is None:
        return False
    return sent > created + settings.days_late_allowed * DAY


def reject_reason(row: dict, settings: Settings) -> str | None:
    for key in REQUIRED:
        if row[key] is None:
            return f"null {key}"
    if row["derived_tstamp"] > row["load_tstamp"] + DAY:
        return "derived_tstamp after load_tstamp"
    if not settings.allow_null_dvce_tstamps and (row["dvce_created_tstamp"] is None or row["dvce_sent_tstamp"] is None):
        return "null dvce_tstamp"
    if sent_too_late(row, settings):
        return "sent_too_late"
    return None


def split_valid_and_rejected(read: list[dict], settings: Settings) -> tuple[list[dict], list[dict]]:
    valid, rejected = [], []
    for row in read:
        if not in_app_ids(row, settings):
            continue
        reason = reject_reason(row, settings)
        if reason is None:
            valid.append(row)
        else:
            rejected.append({**row, "reject_reason": reason})
    return valid, rejected


# 3. One copy of each event: base_events

def rank_key(row: dict) -> tuple:
    """Earlier load first, then earlier collector time with null last (the row hash is not modelled)."""
    collector = row["collector_tstamp"]
    return (row["load_tstamp"], collector is None, collector or row["load_tstamp"])


def distinct_copies(copies: list[dict]) -> list[dict]:
    """Copies in rank order, identical rows once; a tie between different rows is an error."""
    by_rank: dict[tuple, dict] = {}
    for row in copies:
        key = rank_key(row)
        if key in by_rank and by_rank[key] != row:
            raise ValueError(f"ambiguous tie between copies of {row['event_id']!r} at {key}: "
                             "the pipeline breaks it by a row hash the reference cannot reproduce")
        by_rank[key] = row
    return [by_rank[key] for key in sorted(by_rank)]


def kept_copies(valid: list[dict], settings: Settings) -> list[dict]:
    lookback = settings.dedupe_lookback_days * DAY
    by_event = defaultdict(list)
    for row in valid:
        by_event[row["event_id"]].append(row)
    kept = []
    for copies in by_event.values():
        ranked = distinct_copies(copies)
        for i, copy in enumerate(ranked):
            # Any better copy counts, kept or not: A, B (+20 d), C (+40 d) keeps only A.
            if not any(copy["load_tstamp"] - better["load_tstamp"] < lookback for better in ranked[:i]):
                kept.append({**copy, "load_date": utc_date(copy["load_tstamp"])})
    return kept


# 4. Sessions: sessions_lifecycle_manifest, quarantined_sessions

def event_order(row: dict) -> tuple:
    return (row["derived_tstamp"], row["event_id"])


def check_unambiguous_order(events: list[dict]) -> None:
    """Two events with the same (derived_tstamp, event_id) must agree on what the order picks."""
    seen: dict[tuple, tuple] = {}
    for row in events:
        picked = (row["domain_userid"], row["app_id"], row["user_id"])
        if seen.setdefault(event_order(row), picked) != picked:
            raise ValueError(f"ambiguous tie in session {row['domain_sessionid']!r} at {event_order(row)}")


def session_row(events: list[dict], settings: Settings) -> dict:
    check_unambiguous_order(events)
    ordered = sorted(events, key=event_order)
    first = ordered[0]
    start = first["derived_tstamp"]
    limit = start + settings.max_session_days * DAY
    inside = [e for e in ordered if e["derived_tstamp"] <= limit]
    past = [e for e in ordered if e["derived_tstamp"] > limit]
    user_ids = [e["user_id"] for e in inside if e["user_id"] is not None]
    indexes = [e["domain_sessionidx"] for e in inside if e["domain_sessionidx"] is not None]
    quarantined_at = min((e["load_tstamp"] for e in past), default=None)
    return {
        "domain_sessionid": first["domain_sessionid"],
        "domain_userid": first["domain_userid"],
        "user_id": user_ids[-1] if user_ids else None,
        "app_id": first["app_id"],
        "domain_sessionidx": min(indexes, default=None),
        "start_tstamp": start,
        "end_tstamp": max(e["derived_tstamp"] for e in inside),
        "event_count": len(inside),
        "first_load_tstamp": min(e["load_tstamp"] for e in ordered),
        "last_load_tstamp": max(e["load_tstamp"] for e in inside),
        "is_quarantined": quarantined_at is not None,
        "quarantined_at": quarantined_at,
        "limit": limit,
    }


def sessions_lifecycle(base: list[dict], settings: Settings) -> dict[str, dict]:
    by_session = defaultdict(list)
    for row in base:
        by_session[row["domain_sessionid"]].append(row)
    return {sid: session_row(events, settings) for sid, events in by_session.items()}


# 5. filtered_events

def filtered_events(base: list[dict], sessions: dict[str, dict], settings: Settings) -> list[dict]:
    filtered = []
    for row in base:
        session = sessions[row["domain_sessionid"]]
        if row["derived_tstamp"] < settings.start_date:
            continue
        if settings.event_names and row["event_name"] not in settings.event_names:
            continue
        if row["derived_tstamp"] > session["limit"]:
            continue
        filtered.append({
            **row,
            "event_date": utc_date(row["derived_tstamp"]),
            "session_start_tstamp": session["start_tstamp"],
            "session_domain_userid": session["domain_userid"],
            "session_user_id": session["user_id"],
        })
    return filtered


def filtered_events_counts(filtered: list[dict]) -> list[dict]:
    counts: dict[tuple, int] = defaultdict(int)
    for row in filtered:
        counts[(hour_of(row["load_tstamp"]), row["event_date"], row["load_date"])] += 1
    return [{"load_hour_tstamp": hour, "event_date": event_date, "load_date": load_date, "rows": n}
            for (hour, event_date, load_date), n in counts.items()]


# 6. Event days: daily_aggregates (min_rows_to_process = 1: every filtered row is aggregated)

def revenue_of(rows: list[dict]) -> Decimal:
    total = sum((r["tr_total"] for r in rows if r["event_name"] == "transaction" and r["tr_total"] is not None),
                Decimal(0))
    return total.quantize(CENTS)


def day_row(event_date: dt.date, domain_userid: str, rows: list[dict]) -> dict:
    names = [r["event_name"] for r in rows]
    session_ids = sorted({r["domain_sessionid"] for r in rows})
    return {
        "event_date": event_date,
        "domain_userid": domain_userid,
        "events": len(rows),
        "page_views": names.count("page_view"),
        "page_pings": names.count("page_ping"),
        "sessions": len(session_ids),
        "session_ids": session_ids,
        "transactions": names.count("transaction"),
        "revenue": revenue_of(rows),
        "first_event_tstamp": min(r["derived_tstamp"] for r in rows),
        "last_event_tstamp": max(r["derived_tstamp"] for r in rows),
    }


def daily_aggregates(filtered: list[dict]) -> list[dict]:
    by_day = defaultdict(list)
    for row in filtered:
        by_day[(row["event_date"], row["domain_userid"])].append(row)
    return [day_row(event_date, user, rows) for (event_date, user), rows in by_day.items()]


# 7. Users: attributes

def user_row(domain_userid: str, days: list[dict], as_of: dt.date) -> dict:
    last_7 = [d for d in days if as_of - dt.timedelta(days=7) <= d["event_date"]]
    last_30 = [d for d in days if as_of - dt.timedelta(days=30) <= d["event_date"]]
    return {
        "domain_userid": domain_userid,
        "first_event_date": min(d["event_date"] for d in days),
        "last_event_date": max(d["event_date"] for d in days),
        "days_active": len(days),
        "lifetime_events": sum(d["events"] for d in days),
        "lifetime_page_views": sum(d["page_views"] for d in days),
        "lifetime_transactions": sum(d["transactions"] for d in days),
        "lifetime_revenue": sum((d["revenue"] for d in days), Decimal(0)).quantize(CENTS),
        "lifetime_sessions": len({s for d in days for s in d["session_ids"]}),
        "page_views_last_7_days": sum(d["page_views"] for d in last_7),
        "sessions_last_7_days": len({s for d in last_7 for s in d["session_ids"]}),
        "revenue_last_30_days": sum((d["revenue"] for d in last_30), Decimal(0)).quantize(CENTS),
        "events_last_30_days": sum(d["events"] for d in last_30),
        "attributes_as_of": as_of,
    }


def attributes(daily: list[dict], as_of: dt.date) -> list[dict]:
    by_user = defaultdict(list)
    for day in daily:
        if day["event_date"] < as_of:
            by_user[day["domain_userid"]].append(day)
    return [user_row(user, days, as_of) for user, days in by_user.items()]
