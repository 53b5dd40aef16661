"""Table maintenance and declared attributes' states (docs/rules.md 8): the states no declared
attribute reads are deleted, but only once the attributes table holds declared attributes alone
(a declaration changed back to what the table holds must find its states)."""

from __future__ import annotations

import datetime as dt

import pytest

from incremental_assets.names import ATTRIBUTE_STATES, ATTRIBUTES
from incremental_assets.operator.maintenance import drop_undeclared_states
from incremental_assets.planning.attribute_declarations import VERSIONS_COLUMN, declarations
from incremental_assets.planning.default_attributes import recorded_versions
from incremental_assets.settings import Settings
from resources.tables.stores import table_store

pytestmark = [pytest.mark.spark]

# Clicks, not page views: daily_aggregates holds the page views, which then keep no state.
VIEWS_7 = {"name": "clicks_7_days", "aggregation": "count", "events": ["link_click"], "period": 7}
VIEWS_30 = {**VIEWS_7, "name": "clicks_30_days", "period": 30}  # the same rows: the same states
OSES = {"name": "oses", "aggregation": "distinct_list", "property": "os"}


def _warehouse(spark, tmp_path, table_holds: list[dict], declared: list[dict]):
    yaml = "attributes:\n" + "".join(f"  - {entry}\n" for entry in declared)
    (tmp_path / "attributes.yml").write_text(yaml.replace("'", '"'))
    settings = Settings.load({"warehouse": str(tmp_path / "wh"), "attributes_file": str(tmp_path / "attributes.yml")},
                             environ={})
    tables = table_store(spark, settings.warehouse_root, settings.table_engine)
    keys = sorted({d.state_key for d in declarations([VIEWS_7, VIEWS_30, OSES])})
    state = "array<struct<value:string,events:bigint,first_tstamp:timestamp,last_tstamp:timestamp>>"
    tables.overwrite(ATTRIBUTE_STATES, spark.createDataFrame(
        [(dt.date(2026, 3, 1), "u1", key, []) for key in keys],
        f"event_date date, domain_userid string, attribute string, value_counts {state}"), partition_by=["event_date"])
    tables.overwrite(ATTRIBUTES, spark.createDataFrame(
        [("u1", recorded_versions(declarations(table_holds)))], f"domain_userid string, {VERSIONS_COLUMN} string"))
    return settings, tables


def _state_keys(tables) -> set[str]:
    return {row[0] for row in tables.read(ATTRIBUTE_STATES, columns=["attribute"]).collect()}


def test_states_no_declared_attribute_reads_are_dropped_once_the_table_caught_up(spark, tmp_path):
    settings, tables = _warehouse(spark, tmp_path, table_holds=[VIEWS_30], declared=[VIEWS_30])
    (views, oses) = declarations([VIEWS_30, OSES])
    assert drop_undeclared_states(settings, tables) == [oses.state_key]
    assert _state_keys(tables) == {views.state_key}


def test_nothing_is_dropped_while_the_table_holds_an_attribute_no_longer_declared(spark, tmp_path):
    """The declaration went from the list of systems to the 7-day views; until an attributes run
    drops `oses` from the table, a change back to it must find its states."""
    settings, tables = _warehouse(spark, tmp_path, table_holds=[VIEWS_7, OSES], declared=[VIEWS_7])
    before = _state_keys(tables)
    assert drop_undeclared_states(settings, tables) == []
    assert _state_keys(tables) == before and len(before) == 2
