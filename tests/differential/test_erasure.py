"""Erasure: `forget` removes users from every table as if the source had never held
their rows, keeps them out of later runs, and vacuum then leaves no data file holding them.

Three users are erased at once: e-u1 (sessions over midnight: two event days, load hours on
both sides of it), g-u1 (every invalid row: the rejected rows hold it) and the user_id `bob`
(one event of a session whose other events stay: the session is derived again without it).
The judge is the documented rules applied to the source without their rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.names import HOUR_LEDGER
from tests.delta_reads import read_table
from tests.differential import hostile, reference
from tests.differential.hostile import at
from tests.differential.test_differential import (
    AS_OF,
    assert_same_tables,
    pipeline_tables,
    quiet,
    reference_settings,
    use,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ERASED = {"domain_userid": ("e-u1", "g-u1"), "user_id": ("bob",)}


def holds_an_erased_id(row: dict) -> bool:
    return any(row.get(column) in values for column, values in ERASED.items())


def rows_holding(warehouse: Path, name: str) -> int:
    table = read_table(warehouse / name)
    return sum(holds_an_erased_id(row) for row in table.select(
        [c for c in ERASED if c in table.column_names]).to_pylist())


def data_files_holding(warehouse: Path) -> list[str]:
    """Every data file of the warehouse (any version's, not only live ones) with an erased id in
    a string column."""
    erased = {value for values in ERASED.values() for value in values}
    out = []
    for path in warehouse.rglob("*.parquet"):
        if "_delta_log" in path.parts:
            continue
        table = pq.read_table(path)
        for name in table.column_names:
            if pa.types.is_string(table.schema.field(name).type) and erased & set(table[name].to_pylist()):
                out.append(f"{path.relative_to(warehouse)}: {name}")
    return out


def test_forget_removes_users_from_every_table_and_keeps_them_out(spark, instance, tmp_path, monkeypatch, capsys):
    from incremental_assets import cli, runner
    from incremental_assets.operator import apply, forget, plans
    from incremental_assets.operator.maintenance import maintain_tables
    from incremental_assets.operator.operations import describe_limits
    from incremental_assets.planning.plans import ERASED_HOUR, SOURCE_ROWS
    from incremental_assets.settings import Settings
    from incremental_assets.state import erasure_requests as erasure
    from resources.tables.stores import table_store

    rows = hostile.midnight_sessions() + hostile.login_later() + hostile.invalid_rows()
    source, warehouse = str(tmp_path / "events"), tmp_path / "incremental"
    use(monkeypatch, source, warehouse, INCREMENTAL_VACUUM_RETENTION_HOURS="0",
        INCREMENTAL_VACUUM_MIN_RETENTION_HOURS="0")
    hostile.write_source(source, rows)
    assert runner.run_until(at(3), instance=instance, echo=quiet).success
    settings = Settings.load()
    tables = table_store(spark, settings.warehouse_root, settings.table_engine)
    ids = forget.erased([(column, value) for column, values in ERASED.items() for value in values])

    # The dry run counts what each table holds, as read independently here.
    found = forget.find(settings, tables, ids)
    for name in ("base_events", "filtered_events", "sessions_lifecycle_manifest", "rejected_events",
                 "daily_aggregates", "attributes"):
        assert found.rows[name] == rows_holding(warehouse, name) > 0, name
    assert found.rows[SOURCE_ROWS] == sum(map(holds_an_erased_id, [r for r in rows if reference.load_time(r)]))
    assert found.load_hours and all(h.minute == 0 and h < at(3) for h in found.load_hours)
    assert found.linked_domain_userids == ("d-u2",)  # bob's device: its other rows stay

    # The erasure's plan: the processed hours holding the ids, the rows per table, the days of
    # their sessions. An erased user's event landing after it (a source commit) refuses it.
    planned = apply.plan_erasure(settings, at(3, 1), tables, ids)
    assert planned.trigger == "forget 3 id(s)" and planned.erasure.rows == tuple(sorted(found.rows.items()))
    assert {h.hour for h in planned.hours if h.reason == ERASED_HOUR} == set(found.load_hours)
    assert {d.day for d in planned.days} == set(found.event_days) and found.sessions > 0
    assert not {"e-u1", "g-u1", "bob"} & set(plans.as_json(planned).replace('"', " ").split())
    plans.record_plan(settings, planned, at(3, 1))
    rows.append(hostile.event(at(3, 0, 40), session="e-s9", user="e-u1"))
    hostile.write_source(source, rows[-1:])
    with pytest.raises(plans.PlanRefused, match="closure changed since the plan"):
        runner.apply_plan(settings, planned.plan_id, instance=instance, echo=quiet)

    # Planned again and applied: it runs exactly the hours listed.
    plan = apply.plan_erasure(settings, at(3, 1), tables, ids)
    plans.record_plan(settings, plan, at(3, 1))
    report = runner.apply_plan(settings, plan.plan_id, instance=instance, echo=quiet)
    assert report.success, (report.runs, report.refused)
    ledger = read_table(settings.table_path(HOUR_LEDGER)).to_pylist()
    hourly_runs = {run.run_id for run in report.runs if run.job == "hourly_job"}
    assert {r["load_hour_tstamp"].astimezone(dt.UTC) for r in ledger if r["run_id"] in hourly_runs
            and r["source_fingerprint"]} == {h.hour for h in plan.hours}
    # Every day the erasure takes rows from is rebuilt; a new hour's own day is planned too (its
    # rows may all lie on the day before).
    assert set(found.event_days) <= set(report.rebuilt_days) <= {d.day for d in plan.days}, (report, plan.days)
    assert {instance.get_run_by_id(run.run_id).tags["incremental/plan_id"] for run in report.runs} == {plan.plan_id}
    left = forget.find(settings, tables, ids)
    assert left.rows_in_tables == 0, left.describe()

    kept = [row for row in rows if not holds_an_erased_id(row)]
    assert_same_tables(pipeline_tables(warehouse), reference.expected_tables(kept, reference_settings(), AS_OF),
                       "after forget vs the documented rules without the erased rows")
    records = erasure.request_records(settings)
    assert {(r.state, r.id_column) for r in records} == {(s, c) for s in ("REQUESTED", "COMPLETED")
                                                         for c in ("domain_userid", "user_id")}
    assert len(records) == 6 and not erasure.open_requests(records)
    assert "erasures: 1 request(s), 1 completed" in describe_limits(settings, at(3, 1))
    assert {(r.rows_found, r.load_hours) for r in records if r.state == "COMPLETED"} == {
        (found.rows_in_tables, len(found.load_hours))}
    assert all(r.detail.endswith(f"plan {plan.plan_id}") for r in records), records
    assert not {"e-u1", "g-u1", "bob"} & {v for r in records for v in (r.id_sha256, r.detail)}

    # A later event of an erased user is left out as it lands.
    hostile.write_source(source, [hostile.event(at(3, 2), session="e-s9", user="e-u1")])
    assert runner.run_until(at(3, 4), instance=instance, echo=quiet).success
    assert_same_tables(pipeline_tables(warehouse), reference.expected_tables(kept, reference_settings(), AS_OF),
                       "an erased user's event landing later")

    # Files of earlier versions still hold the rows; vacuum deletes them. The Delta logs never
    # held them: their statistics cover time and number columns only.
    assert data_files_holding(warehouse)
    maintain_tables(settings, tables, at(3, 5))
    assert data_files_holding(warehouse) == []
    assert [p for p in warehouse.rglob("_delta_log/*") if p.is_file()
            and any(value.encode() in p.read_bytes() for values in ERASED.values() for value in values)] == []

    # `forget --dry-run` shows the erasure's plan: once erased, nothing is left to remove.
    capsys.readouterr()
    assert cli.main(["forget", "--domain-userid", "e-u1", "--dry-run", "--until", at(3, 5).isoformat()]) == 0
    shown = capsys.readouterr().out
    assert "forget 1 id(s)" in shown and "0 row(s) in the warehouse's tables to remove" in shown, shown
    assert "apply it: incremental-assets apply" in shown and "e-u1" not in shown.split("\n", 1)[1], shown
