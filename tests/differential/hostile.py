"""Small hostile sources for the differential suite: plain row dicts, no Spark.

Day 0 is 2026-01-05 (UTC). Each builder returns the rows of one source in the order a loader
would append them (rows that land late in an old load hour come last) and says in its
docstring which load hours (load time floored to the hour) its rows sit in.
"""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from hypothesis import strategies as st

UTC = dt.UTC
DAY0 = dt.datetime(2026, 1, 5, tzinfo=UTC)

_event_ids = itertools.count(1)


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0) -> dt.datetime:
    """A UTC time `day` days after 2026-01-05 (negative days are before it)."""
    return DAY0 + dt.timedelta(days=day, hours=hour, minutes=minute, seconds=second)


def event(derived: dt.datetime, *, event_id: str | None = None, session: str = "s1", user: str = "u1",
          app: str = "web", name: str = "page_view", user_id: str | None = None, sessionidx: int = 1,
          load: dt.datetime | None = None, tr_total: Decimal | None = None, **overrides) -> dict:
    """One valid event: created at `derived`, sent and collected 2 s later, loaded 5 min after that."""
    collector = derived + dt.timedelta(seconds=2)
    row = {
        "event_id": event_id or f"ev-{next(_event_ids):05d}",
        "app_id": app,
        "event_name": name,
        "domain_userid": user,
        "domain_sessionid": session,
        "domain_sessionidx": sessionidx,
        "user_id": user_id,
        "collector_tstamp": collector,
        "dvce_created_tstamp": derived,
        "dvce_sent_tstamp": collector,
        "derived_tstamp": derived,
        "load_tstamp": load or collector + dt.timedelta(minutes=5),
        "tr_total": tr_total,
    }
    return {**row, **overrides}


def copy_loaded_at(row: dict, load: dt.datetime) -> dict:
    """The same event loaded again (a replay): only the load time differs."""
    return {**row, "load_tstamp": load}


def session_events(session: str, user: str, start: dt.datetime, count: int, every: dt.timedelta, **kw) -> list[dict]:
    return [event(start + i * every, session=session, user=user, **kw) for i in range(count)]


# a) replays

def replayed_duplicates() -> list[dict]:
    """Events loaded on day 0 in hours 10:00 and 11:00, replayed 10 and 40 days later.

    Replays land in 2026-01-15 09:00 (10 days later: within the look-back, dropped) and
    2026-02-14 08:00 (40 days later); one 10-day replay has no collector_tstamp. A 40-day
    replay of an event not replayed at 10 days is an event of its own again; one replayed at
    both is dropped (29 d 23 h after the 10-day copy).
    """
    originals = session_events("a-s1", "a-u1", at(0, 10, 0), 8, dt.timedelta(minutes=7))
    originals += session_events("a-s2", "a-u2", at(0, 10, 50), 6, dt.timedelta(minutes=3))
    after_10_days = [copy_loaded_at(r, at(10, 9, 10 + i)) for i, r in enumerate(originals[0:6])]
    # A replayed copy without collector_tstamp is still a copy of the same event: dropped.
    after_10_days[0] = {**after_10_days[0], "collector_tstamp": None}
    after_40_days = [copy_loaded_at(r, at(40, 8, 10 + i)) for i, r in enumerate(originals[4:10])]
    return originals + after_10_days + after_40_days


# b) a file landing in an old hour

def copies_in_old_hours() -> list[dict]:
    """Copies loaded in hours day 1 14:00 and day 2 16:00; earlier copies of some land afterwards
    in the older hours day 1 09:00 and day 2 15:00.

    The late-landing copies (appended last) rank first: they replace the copies already present.
    """
    present = session_events("b-s1", "b-u1", at(1, 8, 0), 8, dt.timedelta(minutes=4), load=at(1, 14, 5))
    present += session_events("b-s2", "b-u2", at(2, 15, 0), 6, dt.timedelta(minutes=5), load=at(2, 16, 1))
    earlier = [copy_loaded_at(r, at(1, 9, 30)) for r in present[0:3]]
    earlier += [copy_loaded_at(r, at(2, 15, 40 + i)) for i, r in enumerate(present[10:12])]
    return present + earlier


# c) a session whose start moves earlier

def late_session_start() -> list[dict]:
    """c-s1 is loaded in hour day 1 10:00, c-s2 (same user) in day 1 12:00; c-s1's first event
    (another app, a smaller domain_sessionidx) lands 2 days late, in hour day 3 10:00.

    The session's start, app_id and smallest domain_sessionidx change when the late event arrives.
    """
    on_time = session_events("c-s1", "c-u1", at(1, 10, 0), 10, dt.timedelta(minutes=6), sessionidx=4)
    first = event(at(1, 9, 40), session="c-s1", user="c-u1", app="mobile", sessionidx=3, load=at(3, 10, 15))
    other = session_events("c-s2", "c-u1", at(1, 12, 0), 5, dt.timedelta(minutes=2), sessionidx=5)
    return on_time + other + [first]


# d) a login later in a session

def login_later() -> list[dict]:
    """Sessions loaded in hours day 0 15:00, 16:00 and day 1 00:00, 01:00; user_id appears on later events only."""
    rows = session_events("d-s1", "d-u1", at(0, 15, 0), 6, dt.timedelta(minutes=9))
    rows[3]["user_id"] = "alice"  # later events stay anonymous: the latest non-null wins
    rows += session_events("d-s2", "d-u2", at(0, 15, 30), 5, dt.timedelta(minutes=8))
    rows[-4]["user_id"] = "bob"
    rows[-1]["user_id"] = "carol"
    rows += session_events("d-s3", "d-u3", at(1, 0, 50), 4, dt.timedelta(minutes=5))
    rows[-2]["user_id"] = "dave"
    return rows


# e) sessions over midnight

def midnight_sessions() -> list[dict]:
    """Sessions from day 1 23:40 to day 2 00:30, loaded in hours day 1 23:00 and day 2 00:00.

    One event of 23:58 is loaded after midnight (hour day 2 00:00): event day 1, load day 2.
    The same user has a second session on day 2 around 10:00 (load hour 10:00).
    """
    rows = session_events("e-s1", "e-u1", at(1, 23, 40), 10, dt.timedelta(minutes=5))
    rows.append(event(at(1, 23, 58), session="e-s1", user="e-u1", name="page_ping", load=at(2, 0, 20)))
    rows += session_events("e-s2", "e-u2", at(1, 23, 50), 4, dt.timedelta(minutes=6), name="page_ping")
    rows += session_events("e-s3", "e-u1", at(2, 10, 0), 3, dt.timedelta(minutes=10), sessionidx=2)
    return rows


# f) runaway bots

def runaway_bots() -> list[dict]:
    """Bot sessions with an event every 6 hours for 4 days (each loaded 5 min later, hours 00/06/12/18).

    f-bot1 runs from day 0 00:00 and is quarantined once past day 3 00:00; an event of day 3
    20:00, past its limit, logs a user in (`user_id`) with a smaller `domain_sessionidx`: the
    session's row ignores it, as it ignores every event past the limit (and a frozen session
    is not even recomputed for it). f-bot2 runs from
    day 1 00:00 for 3 days (within its limit) until its earlier event of day 0 12:00 arrives
    late, loaded day 3 13:00: its limit moves to day 3 12:00 and its last events fall past it.
    """
    rows = session_events("f-bot1", "f-bot", at(0, 0, 0), 17, dt.timedelta(hours=6))
    rows.append(event(at(3, 20, 0), session="f-bot1", user="f-bot", user_id="f-login", sessionidx=0))
    rows += session_events("f-bot2", "f-bot", at(1, 0, 0), 13, dt.timedelta(hours=6), sessionidx=2)
    rows += session_events("f-s1", "f-u1", at(2, 9, 0), 4, dt.timedelta(minutes=10))
    rows.append(event(at(0, 12, 0), session="f-bot2", user="f-bot", sessionidx=2, load=at(3, 13, 0)))
    return rows


# g) invalid rows

def invalid_rows() -> list[dict]:
    """Rows of day 0 loaded in hour 20:00; rows without load_tstamp sit in their collector hour 19:00.

    Every reject reason, rows on the edge of each check (kept), rows with two faults (the
    first reason wins), null device times (kept unless allow_null_dvce_tstamps is false) and
    one row with no load time at all (never read: it has no load hour).
    """
    t = at(0, 19, 50)
    load = at(0, 20, 10)
    bad = {"session": "g-s1", "user": "g-u1", "load": load}
    return [
        event(t, **bad),
        event(t, **bad) | {"event_id": None},
        event(t, **bad) | {"domain_userid": None},
        event(t, **bad) | {"domain_sessionid": None},
        event(t, **bad) | {"derived_tstamp": None},
        event(t, **bad) | {"load_tstamp": None},  # load hour from collector: 19:00
        event(t, **bad) | {"load_tstamp": None, "event_id": None},
        event(load + dt.timedelta(hours=24, seconds=1), **bad),  # derived after load
        event(load + dt.timedelta(hours=24), **bad),  # exactly 24 h: kept
        event(load + dt.timedelta(days=2), **bad) | {"domain_userid": None},  # two faults: null first
        event(load + dt.timedelta(days=2), **bad) | {"dvce_created_tstamp": t - dt.timedelta(days=5)},  # derived first
        event(t, **bad) | {"dvce_created_tstamp": t - dt.timedelta(days=3, seconds=1)},  # sent too late
        event(t, **bad) | {"dvce_created_tstamp": t - dt.timedelta(days=3) + dt.timedelta(seconds=2)},  # exactly 3 d
        event(t, **bad) | {"dvce_created_tstamp": None, "dvce_sent_tstamp": t + dt.timedelta(days=4)},  # vs collector
        event(t, **bad) | {"dvce_created_tstamp": None, "dvce_sent_tstamp": None},  # null dvce times
        event(t, **bad) | {"dvce_sent_tstamp": None},
        event(t, **bad) | {"dvce_created_tstamp": None, "dvce_sent_tstamp": None, "collector_tstamp": None},
        event(t, **bad) | {"dvce_created_tstamp": t - dt.timedelta(days=5), "dvce_sent_tstamp": None},  # late sent=coll
        event(t, **bad) | {"dvce_created_tstamp": t - dt.timedelta(days=5), "app_id": "other"},  # late, other app
        event(t, **bad) | {"load_tstamp": None, "collector_tstamp": None},  # never read
    ]


# h) commerce and filters

def commerce_and_filters() -> list[dict]:
    """Transactions, pings, several apps and event names; loads on days 0-2 in hours 12:00 and 13:00."""
    rows = []
    for day in range(3):
        user = f"h-u{day % 2}"
        web, mobile = f"h-web{day}", f"h-mob{day}"
        rows += session_events(web, user, at(day, 12, 0), 3, dt.timedelta(minutes=4))
        rows += session_events(web, user, at(day, 12, 15), 4, dt.timedelta(minutes=1), name="page_ping")
        rows.append(event(at(day, 12, 30), session=web, user=user, name="transaction", tr_total=Decimal("19.99")))
        rows.append(event(at(day, 12, 31), session=web, user=user, name="transaction", tr_total=Decimal("0.01")))
        rows.append(event(at(day, 12, 32), session=web, user=user, name="transaction"))  # no total
        rows.append(event(at(day, 12, 33), session=web, user=user, name="link_click"))
        rows += session_events(mobile, user, at(day, 12, 50), 3, dt.timedelta(minutes=5), app="mobile",
                               name="screen_view")
        rows.append(event(at(day, 13, 5), session=mobile, user=user, app="mobile", name="transaction",
                          tr_total=Decimal("100.10")))
        rows.append(event(at(day, 13, 10), session=f"h-int{day}", user="h-staff", app="internal"))
    return rows


BUILDERS = (replayed_duplicates, copies_in_old_hours, late_session_start, login_later, midnight_sessions,
            runaway_bots, invalid_rows, commerce_and_filters)


# Writing a source

# (name, type) in the order of ATOMIC_EVENTS_SCHEMA (incremental_assets/sources/schema.py).
SOURCE_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("app_id", pa.string()),
    ("collector_tstamp", pa.timestamp("us", tz="UTC")),
    ("dvce_created_tstamp", pa.timestamp("us", tz="UTC")),
    ("event_id", pa.string()),
    ("user_id", pa.string()),
    ("domain_userid", pa.string()),
    ("domain_sessionidx", pa.int32()),
    ("tr_total", pa.decimal128(18, 2)),
    ("dvce_sent_tstamp", pa.timestamp("us", tz="UTC")),
    ("domain_sessionid", pa.string()),
    ("derived_tstamp", pa.timestamp("us", tz="UTC")),
    ("event_name", pa.string()),
    ("load_tstamp", pa.timestamp("us", tz="UTC")),
    ("load_date", pa.date32()),
]


# The table properties a new source gets: statistics on its time columns.
SOURCE_CONFIGURATION = {"delta.dataSkippingStatsColumns": "load_tstamp,collector_tstamp,derived_tstamp"}


def load_date(row: dict) -> dt.date | None:
    t = row.get("load_tstamp") or row.get("collector_tstamp")
    return t.astimezone(UTC).date() if t is not None else None


def source_table(rows: list[dict], load_date_of=load_date) -> pa.Table:
    full = [{**row, "load_date": load_date_of(row)} for row in rows]
    schema = pa.schema(SOURCE_COLUMNS)
    return pa.Table.from_pydict({name: [row.get(name) for row in full] for name in schema.names}, schema=schema)


def write_source(path: str | Path, rows: list[dict], mode: str = "append", load_date_of=load_date,
                 partitioned: bool = True) -> None:
    """Appends `rows`, partitioned by `load_date_of(row)` (by default the UTC date of its load
    time), or in a table without partitions."""
    from deltalake import DeltaTable, write_deltalake

    creating = not DeltaTable.is_deltatable(str(path))
    write_deltalake(str(path), source_table(rows, load_date_of), mode=mode,
                    partition_by=["load_date"] if partitioned else None,
                    configuration=SOURCE_CONFIGURATION if creating else None)


# Random sources

DERIVED_HOURS = (0, 1, 11, 23)
DERIVED_MINUTES = (0, 30, 59)
# Load delays after collection: same hour, next hour, late days, around the look-back, far beyond it.
LOAD_DELAYS = tuple(dt.timedelta(minutes=m) for m in (1, 7, 61)) + tuple(
    dt.timedelta(days=d) for d in (1, 2, 5, 10, 29.99, 30, 31, 40))
# Each nulls or breaks one thing; all but "collector_tstamp" (a valid copy that ranks after
# its loaded-at-the-same-time peers) make the copy invalid.
FAULTS = ("event_id", "domain_userid", "domain_sessionid", "derived_tstamp", "load_tstamp",
          "dvce_created_tstamp", "dvce_sent_tstamp", "derived_after_load", "sent_too_late", "no_load_time",
          "collector_tstamp")


def with_fault(row: dict, fault: str) -> dict:
    if fault == "derived_after_load":
        return {**row, "load_tstamp": row["derived_tstamp"] - dt.timedelta(days=1, seconds=1)}
    if fault == "sent_too_late":
        return {**row, "dvce_created_tstamp": row["derived_tstamp"] - dt.timedelta(days=4)}
    if fault == "no_load_time":
        return {**row, "load_tstamp": None, "collector_tstamp": None}
    return {**row, fault: None}


@st.composite
def random_event(draw, event_ids: list[str]) -> dict:
    derived = at(draw(st.integers(-1, 3)), draw(st.sampled_from(DERIVED_HOURS)), draw(st.sampled_from(DERIVED_MINUTES)))
    name = draw(st.sampled_from(("page_view", "page_view", "page_ping", "transaction", "link_click")))
    return event(
        derived,
        event_id=draw(st.sampled_from(event_ids)),  # a small pool: unrelated events share ids
        session=draw(st.sampled_from(("r-s1", "r-s2", "r-s3"))),
        user=draw(st.sampled_from(("r-u1", "r-u2"))),
        app=draw(st.sampled_from(("web", "web", "mobile"))),
        name=name,
        user_id=draw(st.sampled_from((None, None, "alice", "bob"))),
        sessionidx=draw(st.integers(1, 3)),
        tr_total=draw(st.sampled_from((None, Decimal("9.99"), Decimal("0.05")))) if name == "transaction" else None,
    )


@st.composite
def copies_of(draw, original: dict) -> list[dict]:
    """One to three loads of an event; some with a fault, some collected twice in the same load."""
    copies = []
    for delay in draw(st.lists(st.sampled_from(LOAD_DELAYS), min_size=1, max_size=3)):
        copy = copy_loaded_at(original, original["collector_tstamp"] + delay)
        if draw(st.integers(0, 9)) == 0:
            copy = with_fault(copy, draw(st.sampled_from(FAULTS)))
        copies.append(copy)
        if copy["collector_tstamp"] is not None and draw(st.integers(0, 7)) == 0:
            # The same load, collected a second later: collector time decides the rank.
            copies.append({**copy, "collector_tstamp": copy["collector_tstamp"] + dt.timedelta(seconds=1)})
        if draw(st.integers(0, 7)) == 0:  # an identical row
            copies.append(dict(copy))
    return copies


def without_ambiguous_ties(rows: list[dict]) -> list[dict]:
    """Drop rows that would tie with a different row on (event_id, load, collector), or on
    (event_id, derived_tstamp) with other user, app or user_id: only the pipeline's hash breaks those."""
    by_rank: dict[tuple, dict] = {}
    by_order: dict[tuple, tuple] = {}
    kept = []
    for row in rows:
        rank = (row["event_id"], row["load_tstamp"], row["collector_tstamp"])
        order = (row["event_id"], row["derived_tstamp"])
        picked = (row["domain_userid"], row["app_id"], row["user_id"])
        if by_rank.setdefault(rank, row) != row or by_order.setdefault(order, picked) != picked:
            continue
        kept.append(row)
    return kept


@st.composite
def source_rows(draw, max_events: int = 12) -> list[dict]:
    event_ids = [f"r-e{i}" for i in range(max(2, max_events // 2))]
    originals = draw(st.lists(random_event(event_ids), min_size=1, max_size=max_events))
    rows = [copy for original in originals for copy in draw(copies_of(original))]
    return without_ambiguous_ties(rows)
