"""Every table the pipeline writes, walked through the capabilities that must reach all of them:
`forget` leaves no row holding an erased user's ids (docs/rules.md 1, "Erased users"), and a
start moved later leaves no row of the time before it (docs/rules.md 1).

The tables come from one list (`names.WAREHOUSE_TABLES`): a table added later is walked too, and
a table in the warehouse directory that is not in the list fails the walk.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from incremental_assets.names import WAREHOUSE_TABLES
from tests.delta_reads import read_table
from tests.differential import hostile
from tests.differential.hostile import at
from tests.differential.test_differential import WITH_DECLARED, quiet, use

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ERASED_DEVICE, ERASED_LOGIN = "x-u1", "y-login"  # a device erased whole; a user_id on a device that stays
ERASED_SESSIONS = ("x-s1", "x-s2", "x-s3")
ERASED_TEXT = (ERASED_DEVICE, "x-login", ERASED_LOGIN, *ERASED_SESSIONS)


def source_rows() -> list[dict]:
    """x-u1 has rows of every kind: a logged-in session (x-s1, a copy of one event replayed a day
    later), a session quarantined past max_session_days (x-s2), a rejected row (x-s3). y-u2 logs in
    as y-login on one event of a session that stays; z-u3 is untouched."""
    x = hostile.session_events("x-s1", ERASED_DEVICE, at(0, 10), 4, dt.timedelta(minutes=10))
    x[1]["user_id"] = "x-login"
    x.append(hostile.event(at(0, 11), session="x-s1", user=ERASED_DEVICE, name="transaction",
                           tr_total=Decimal("12.50")))
    x.append(hostile.copy_loaded_at(x[0], at(1, 9, 5)))
    x += [hostile.event(at(0, 12), session="x-s2", user=ERASED_DEVICE),
          hostile.event(at(3, 13), session="x-s2", user=ERASED_DEVICE)]
    late = at(0, 14, 10)
    x.append(hostile.event(late + dt.timedelta(hours=25), session="x-s3", user=ERASED_DEVICE, load=late))
    y = hostile.session_events("y-s1", "y-u2", at(0, 10, 30), 3, dt.timedelta(minutes=10))
    y[1]["user_id"] = ERASED_LOGIN
    z = hostile.session_events("z-s1", "z-u3", at(2, 9), 3, dt.timedelta(minutes=10))
    return x + y + z


def warehouse_tables(warehouse: Path) -> dict[str, list[dict]]:
    """Every table of the warehouse, by name; a directory there that is not in the list fails."""
    # `_staging` holds the files of writes in flight (resources/tables/staging.py): none once runs end.
    assert not [p for p in (warehouse / "_staging").rglob("*") if p.is_file()], "staged files left behind"
    present = {p.name for p in warehouse.iterdir() if p.is_dir() and p.name != "_staging"}
    assert present <= set(WAREHOUSE_TABLES), f"tables not in names.WAREHOUSE_TABLES: {present - set(WAREHOUSE_TABLES)}"
    return {name: read_table(warehouse / name).to_pylist() for name in WAREHOUSE_TABLES if name in present}


def state_values(tables: dict[str, list[dict]], user: str) -> set[tuple]:
    """The user's attribute states as (day, state key, value, events)."""
    return {(r["event_date"], v["value"], r["attribute"], v["events"]) for r in tables["attribute_states"]
            if r["domain_userid"] == user for v in r["value_counts"]}


def row_text(row: dict) -> str:
    """A row's every value as text, nested lists, structs and JSON text included."""
    return json.dumps(row, default=str, ensure_ascii=False)


def tables_holding(tables: dict[str, list[dict]], texts) -> dict[str, list[str]]:
    """Per table, the rows (as text) in which any of `texts` appears."""
    found = {name: [t for t in map(row_text, rows) if any(x in t for x in texts)] for name, rows in tables.items()}
    return {name: rows for name, rows in found.items() if rows}


def test_forget_then_a_moved_start_leave_nothing_behind_in_any_table(spark, instance, tmp_path, monkeypatch):
    """One lake (a first run spared): forget, the next hour, then the start moved later."""
    from incremental_assets import runner
    from incremental_assets.operator import apply, forget, plans
    from incremental_assets.operator.operations import skip_item
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    source, warehouse = str(tmp_path / "events"), tmp_path / "incremental"
    use(monkeypatch, source, warehouse, **WITH_DECLARED)
    hostile.write_source(source, source_rows())
    assert runner.run_until(at(4, 1), instance=instance, echo=quiet).success
    first = warehouse_tables(warehouse)
    before = tables_holding(first, ERASED_TEXT)
    # The walk reaches every kind of table a user's rows sit in.
    assert {"base_events", "event_copies", "rejected_events", "sessions_lifecycle_manifest", "quarantined_sessions",
            "filtered_events", "daily_aggregates", "attributes", "attribute_states"} <= set(before), sorted(before)

    settings = Settings.load()
    # An event day an operator skipped is never rebuilt, yet the erasure reaches it too.
    skip_item(settings, f"daily_aggregates/{at(0):%Y-%m-%d}", note="a day held back", now=at(4, 1, 30))
    tables = table_store(spark, settings.warehouse_root, settings.table_engine)
    ids = forget.erased([("domain_userid", ERASED_DEVICE), ("user_id", ERASED_LOGIN)])
    plan = apply.plan_erasure(settings, at(4, 2), tables, ids)
    plans.record_plan(settings, plan, at(4, 2))
    report = runner.apply_erasure(settings, plan, tables, instance=instance, echo=quiet, now=at(4, 2))
    assert all(run.success for run in report.runs), report.runs
    assert runner.run_until(at(4, 3), instance=instance, echo=quiet).success

    after = warehouse_tables(warehouse)
    left = tables_holding(after, ERASED_TEXT)
    assert not left, "tables still holding an erased user:\n" + "\n".join(
        f"  {name}: {len(rows)} row(s), e.g. {rows[0][:400]}" for name, rows in sorted(left.items()))
    # The others stay: the device that logged in as the erased user_id keeps its other rows.
    assert tables_holding(after, ("y-u2",)).keys() >= {"base_events", "daily_aggregates", "attribute_states"}
    # Its states of the skipped day lose the erased value alone.
    assert state_values(after, "y-u2") == {v for v in state_values(first, "y-u2") if v[1] != ERASED_LOGIN}
    assert report.success and not report.refused, report.refused
    assert after["erasure_requests"], "the request is recorded, as digests"

    # The start moved later: every table keyed by time loses what lies before it.
    start = at(1)
    assert before_start(after, start), "the runs wrote rows before the new start"
    monkeypatch.setenv("INCREMENTAL_START_DATE", start.date().isoformat())
    assert runner.run_until(at(4, 4), instance=instance, echo=quiet).success
    early = before_start(warehouse_tables(warehouse), start)
    assert not early, "tables still holding rows before the new start:\n" + "\n".join(
        f"  {name}: {len(rows)} row(s), e.g. {rows[0]}" for name, rows in sorted(early.items()))


# The columns a table is keyed by time in: load times and hours, and event days (a row loaded
# after the start may still have been derived before it: derived times are not keys).
TIME_KEYS = ("load_tstamp", "load_hour_tstamp", "first_load_tstamp", "load_date", "event_date", "first_event_date")
# Records of what was done and when, not rows of an hour or a day: they keep their history.
RECORDS = ("processing_manifest", "plans", "erasure_requests", "skipped_load_hours")


def before_start(tables: dict[str, list[dict]], start: dt.datetime) -> dict[str, list[dict]]:
    """Per table keyed by time, its rows with a time key before `start`."""
    def early(value) -> bool:
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.UTC) < start
        return isinstance(value, dt.date) and value < start.date()

    found = {name: [r for r in rows if any(early(r.get(key)) for key in TIME_KEYS)]
             for name, rows in tables.items() if name not in RECORDS}
    return {name: rows for name, rows in found.items() if rows}
