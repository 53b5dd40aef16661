"""The default declaration (docs/rules.md 7): the attributes every table has unless a team's file
says `defaults: false`, written in the declaration language a team uses for its own.

An attribute whose rows and values `daily_aggregates` already holds per user and day (counts of
all events, page views, page pings or transactions, revenue, sessions, event days) is computed
from that table, as the defaults are: it needs no state of its own. Any other is merged from
`attribute_states`.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from incremental_assets.planning.attribute_declarations import (
    AttributeDeclaration,
    AttributeDeclarationError,
    declarations,
)

DEFAULT_ATTRIBUTES_YAML = """\
attributes:
  - {name: first_event_date, aggregation: min, property: event_date, type: date,
     description: "The first event day with a filtered event."}
  - {name: last_event_date, aggregation: max, property: event_date, type: date,
     description: "The last event day with a filtered event."}
  - {name: days_active, aggregation: distinct_count, property: event_date,
     description: "Event days with at least one filtered event."}
  - {name: lifetime_events, aggregation: count, description: "Filtered events."}
  - {name: lifetime_page_views, aggregation: count, events: [page_view], description: "Page views."}
  - {name: lifetime_transactions, aggregation: count, events: [transaction], description: "Transactions."}
  - {name: lifetime_revenue, aggregation: sum, property: tr_total, events: [transaction], type: decimal,
     default: 0, description: "Sum of the transactions' tr_total."}
  - {name: lifetime_sessions, aggregation: distinct_count, property: domain_sessionid,
     description: "Distinct sessions (a session over midnight counts once)."}
  - {name: page_views_last_7_days, aggregation: count, events: [page_view], period: 7,
     description: "Page views on the 7 event days before attributes_as_of."}
  - {name: sessions_last_7_days, aggregation: distinct_count, property: domain_sessionid, period: 7,
     description: "Distinct sessions on the 7 event days before attributes_as_of."}
  - {name: revenue_last_30_days, aggregation: sum, property: tr_total, events: [transaction], type: decimal,
     default: 0, period: 30, description: "Revenue on the 30 event days before attributes_as_of."}
  - {name: events_last_30_days, aggregation: count, period: 30,
     description: "Filtered events on the 30 event days before attributes_as_of."}
"""
DEFAULT_ATTRIBUTES: tuple[AttributeDeclaration, ...] = declarations(
    yaml.safe_load(DEFAULT_ATTRIBUTES_YAML)["attributes"], where="the default declaration")
# Columns the attributes table has whatever is declared.
KEY_COLUMN, AS_OF_COLUMN = "domain_userid", "attributes_as_of"

NO_ATTRIBUTES = "(none)"  # what a table of an empty declaration (`defaults: false`, no attribute) records

# daily_aggregates' per-user-per-day count columns, by the one event name they count.
_DAILY_COUNTS = {"page_view": "page_views", "page_ping": "page_pings", "transaction": "transactions"}


def daily_measure(declared: AttributeDeclaration) -> str | None:
    """The daily_aggregates column an attribute aggregates over its period, when that table holds
    exactly what the attribute reads; None: it is merged from its states.

    `events`, `page_views`, `page_pings`, `transactions` and `revenue` are summed, `session_ids`
    united, `event_date` counted, or its min or max taken. A count or sum qualifies only with
    the default 0 (a day with rows but none counted sums to 0 where a state would be missing), a
    sum only of `tr_total` over transactions as `type: decimal` (the day's revenue is rounded to
    cents), and nothing with criteria or an event's vendor or version."""
    if declared.criteria or any(e.vendor or e.version for e in declared.events):
        return None
    names = tuple(e.name for e in declared.events)
    prop = str(declared.property_path) if declared.property_path else None
    kind, zero_default = declared.aggregation, declared.default == 0
    if kind == "count" and prop is None and zero_default:
        return "events" if not names else _DAILY_COUNTS.get(names[0]) if len(names) == 1 else None
    if kind == "sum" and prop == "tr_total" and names == ("transaction",) and declared.value_type == "decimal" \
            and zero_default:
        return "revenue"
    if kind == "distinct_count" and not names and zero_default and prop in ("domain_sessionid", "event_date"):
        return "session_ids" if prop == "domain_sessionid" else "event_date"
    if kind in ("min", "max") and not names and prop == "event_date" and declared.value_type == "date":
        return "event_date"
    return None


def from_daily(declared: Sequence[AttributeDeclaration]) -> tuple[AttributeDeclaration, ...]:
    return tuple(d for d in declared if daily_measure(d) is not None)


def from_states(declared: Sequence[AttributeDeclaration]) -> tuple[AttributeDeclaration, ...]:
    return tuple(d for d in declared if daily_measure(d) is None)


def with_defaults(declared: Sequence[AttributeDeclaration], defaults: bool,
                  where: str) -> tuple[AttributeDeclaration, ...]:
    """A file's declarations after the default ones (unless `defaults: false`); a name of both
    is refused, naming it."""
    if not defaults:
        return tuple(declared)
    default_names = {d.name for d in DEFAULT_ATTRIBUTES}
    for d in declared:
        if d.name in default_names:
            raise AttributeDeclarationError(
                f"{where}: attribute {d.name!r} is a default attribute; to declare it otherwise, set "
                "'defaults: false' and declare every attribute to keep (the defaults are in "
                "incremental_assets/planning/default_attributes.py)")
    return (*DEFAULT_ATTRIBUTES, *declared)


def held_attribute_keys(versions: str | None) -> set[str]:
    """The attributes (name@version) an attributes table holds, from its `attribute_versions`:
    a table that records none (written before the column, or by the default declaration alone)
    holds the default declaration."""
    if not versions:
        return {d.key for d in DEFAULT_ATTRIBUTES}
    return set(versions.split(",")) - {NO_ATTRIBUTES}


def recorded_versions(declared: Sequence[AttributeDeclaration]) -> str | None:
    """What the attributes table records of a declaration (`attribute_versions`): its keys,
    sorted and comma-separated; None for the default declaration alone (so that tables of it
    keep no such column)."""
    keys = sorted(d.key for d in declared)
    if keys == sorted(d.key for d in DEFAULT_ATTRIBUTES):
        return None
    return ",".join(keys) or NO_ATTRIBUTES
