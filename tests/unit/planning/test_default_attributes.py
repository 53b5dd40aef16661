"""The default declaration: the columns every attributes table has unless a file says
`defaults: false`, which of them (and of a team's) daily_aggregates holds, and what a table
records of it."""

import pytest

from incremental_assets.planning.attribute_declarations import AttributeDeclarationError, declaration
from incremental_assets.planning.default_attributes import (
    DEFAULT_ATTRIBUTES,
    daily_measure,
    held_attribute_keys,
    recorded_versions,
    with_defaults,
)
from incremental_assets.settings import Settings, SettingsError


def test_the_defaults_are_the_documented_columns_each_computed_from_daily_aggregates():
    measures = {d.name: (daily_measure(d), d.period_days) for d in DEFAULT_ATTRIBUTES}
    assert measures == {
        "first_event_date": ("event_date", None), "last_event_date": ("event_date", None),
        "days_active": ("event_date", None), "lifetime_events": ("events", None),
        "lifetime_page_views": ("page_views", None), "lifetime_transactions": ("transactions", None),
        "lifetime_revenue": ("revenue", None), "lifetime_sessions": ("session_ids", None),
        "page_views_last_7_days": ("page_views", 7), "sessions_last_7_days": ("session_ids", 7),
        "revenue_last_30_days": ("revenue", 30), "events_last_30_days": ("events", 30)}


VIEWS = {"name": "views", "aggregation": "count", "events": ["page_view"]}


@pytest.mark.parametrize("changed", [
    {"criteria": {"all": [{"property": "page_urlpath", "operator": "like", "value": "%pricing%"}]}},
    {"events": [{"name": "page_view", "vendor": "com.snowplowanalytics.snowplow"}]},
    {"events": ["page_view", "page_ping"]},  # daily_aggregates counts each alone
    {"events": ["link_click"]},
    {"default": -1},  # a day with rows but no page view sums to 0 there: a state gives the default
    {"property": "page_urlpath"},  # counts rows with a value
])
def test_a_declaration_daily_aggregates_does_not_hold_is_merged_from_states(changed):
    assert daily_measure(declaration(VIEWS)) == "page_views"
    assert daily_measure(declaration({**VIEWS, **changed})) is None


def test_only_a_decimal_revenue_sum_with_default_0_comes_from_the_daily_revenue():
    revenue = {"name": "r", "aggregation": "sum", "property": "tr_total", "events": ["transaction"],
               "type": "decimal", "default": 0}
    assert daily_measure(declaration(revenue)) == "revenue"
    for changed in ({"type": "number"}, {"default": None}, {"events": ["page_view"]}):
        assert daily_measure(declaration({**revenue, **changed})) is None, changed
    first_day = {"name": "f", "aggregation": "min", "property": "event_date", "type": "date"}
    assert daily_measure(declaration(first_day)) == "event_date"
    assert daily_measure(declaration({**first_day, "type": "string"})) is None


def test_a_file_adds_to_the_defaults_or_replaces_them(tmp_path):
    added = tmp_path / "added.yml"
    added.write_text("attributes:\n  - {name: views_14_days, aggregation: count, events: [page_view], period: 14}\n")
    declared = Settings.load({"attributes_file": str(added)}, environ={}).declared_attributes()
    assert [d.name for d in declared] == [*(d.name for d in DEFAULT_ATTRIBUTES), "views_14_days"]
    replaced = tmp_path / "replaced.yml"
    replaced.write_text("defaults: false\nattributes:\n"
                        "  - {name: sessions_last_7_days, aggregation: distinct_count, property: domain_sessionid,"
                        " period: 14}\n")
    (sessions,) = Settings.load({"attributes_file": str(replaced)}, environ={}).declared_attributes()
    assert sessions.period_days == 14 and daily_measure(sessions) == "session_ids"
    python_file = tmp_path / "team.py"
    python_file.write_text("DEFAULTS = False\nATTRIBUTES = [{'name': 'events', 'aggregation': 'count'}]\n")
    (events,) = Settings.load({"attributes_file": str(python_file)}, environ={}).declared_attributes()
    assert daily_measure(events) == "events"


@pytest.mark.parametrize("text, message", [
    ("attributes:\n  - {name: days_active, aggregation: count}\n",
     r"'days_active' is a default attribute; to declare it otherwise, set 'defaults: false'"),
    ("defaults: no-thanks\nattributes: []\n", r"defaults 'no-thanks' is not accepted; use true or false"),
    ("default: false\nattributes: []\n", r"unknown key\(s\) default; accepted: attributes, defaults"),
    ("defaults: false\nattributes:\n  - {name: attributes_as_of, aggregation: count}\n",
     r"'attributes_as_of' is a column the attributes table has anyway"),
    ("attributes:\n  - {name: d, aggregation: min, property: event_date, type: date, default: soon}\n",
     r"attribute 'd': default 'soon' is not accepted; a date is YYYY-MM-DD"),
    ("attributes:\n  - {name: d, aggregation: max, property: event_date, type: day}\n",
     r"type 'day' is not accepted; use one of string, number, decimal, date"),
])
def test_a_bad_use_of_the_defaults_is_refused_naming_it(tmp_path, text, message):
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    with pytest.raises(SettingsError, match=message):
        Settings.load({"attributes_file": str(bad)}, environ={})


def test_a_table_recording_no_versions_holds_the_default_declaration():
    defaults = {d.key for d in DEFAULT_ATTRIBUTES}
    assert recorded_versions(DEFAULT_ATTRIBUTES) is None and held_attribute_keys(None) == defaults
    views = declaration(VIEWS)
    both = with_defaults([views], True, "f.yml")
    assert held_attribute_keys(recorded_versions(both)) == defaults | {views.key}
    assert held_attribute_keys(recorded_versions(with_defaults([], False, "f.yml"))) == set()
    with pytest.raises(AttributeDeclarationError, match="f.yml: attribute 'lifetime_events' is a default"):
        with_defaults([declaration({"name": "lifetime_events", "aggregation": "count"})], True, "f.yml")
