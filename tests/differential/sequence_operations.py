"""The operations `test_operation_sequences.py` draws, and the judge's view of what they did:
`Lake` holds the rows the source holds, the operator's records and the settings, and gives the
tables docs/rules.md makes of them (`expected`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import threading
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from hypothesis import event
from hypothesis import strategies as st

from incremental_assets.planning.default_attributes import recorded_versions, with_defaults
from tests.declared_reference import declared_values
from tests.differential import hostile, reference
from tests.differential.test_app_watermarks import failing_after_the_writes
from tests.differential.test_differential import (
    AS_OF,
    DECLARED,
    NARROWED,
    START_DATE,
    WITH_DECLARED,
    fail_locked_hour_items,
    failing_for,
    hour_item,
    quiet,
    reference_settings,
    use,
)

APP_IDS = (("web",), ("mobile",), ("web", "mobile"))
# The warehouse tables an operator's action writes, which no run derives from the source.
OPERATOR_RECORDS = ("erasure_requests", "skipped_load_hours")
# An extra column of the source (a context field): passed through to the tables the rows reach.
EXTRA = "ctx_score"
EXTRA_TYPES = {"int": pa.int32(), "double": pa.float64()}


def extra_value(row: dict, type_name: str):
    """The extra column's value of a row: a whole number, with a fraction once the field is a double."""
    whole = len(row.get("event_id") or "") + (row.get("domain_sessionidx") or 0)
    return whole + 0.7 if type_name == "double" else whole


@dataclass
class Lake:
    """The source as it grows, what the operator did to it and the settings; the judge's view."""

    path: str
    warehouse: str
    spark_source: bool  # written by Spark with deletion vectors on; else by delta-rs
    declared: bool  # the declared attributes file is set
    pending: list[tuple[dt.datetime, dict]]
    rows: list[dict] = field(default_factory=list)  # the rows the source holds now
    erased_users: set[str] = field(default_factory=set)
    skipped_hours: set[dt.datetime] = field(default_factory=set)
    skipped_days: dict[dt.date, list[dict]] = field(default_factory=dict)  # the filtered rows of its last build
    event_names: tuple = ()
    start_date: dt.datetime = START_DATE
    app_ids: tuple = ()
    extra_type: str = "int"  # the type the source holds EXTRA in
    ran: bool = False  # a run succeeded since the source first held rows

    def use(self, monkeypatch) -> None:
        # One hourly run per due range, however long: a run of many Dagster runs costs more than
        # it finds here (runs cut into pieces are judged in test_differential.py).
        extra = {"INCREMENTAL_START_DATE": self.start_date.date().isoformat(), "INCREMENTAL_MAX_HOURS_PER_RUN": "2000",
                 **({"INCREMENTAL_EVENT_NAMES": ",".join(self.event_names)} if self.event_names else {}),
                 **({"INCREMENTAL_APP_IDS": ",".join(self.app_ids)} if self.app_ids else {}),
                 **(WITH_DECLARED if self.declared else {})}
        for unset in {"INCREMENTAL_EVENT_NAMES", "INCREMENTAL_APP_IDS", *WITH_DECLARED} - set(extra):
            monkeypatch.delenv(unset, raising=False)  # every app, every event name, no declaration
        use(monkeypatch, self.path, self.warehouse, **extra)

    def settings(self) -> reference.Settings:
        return dataclasses.replace(reference_settings(self.event_names), start_date=self.start_date,
                                   app_ids=self.app_ids)

    def source_table(self, rows: list[dict]) -> pa.Table:
        values = [extra_value(row, self.extra_type) for row in rows]
        return hostile.source_table(rows).append_column(EXTRA, pa.array(values, EXTRA_TYPES[self.extra_type]))

    def write(self, spark, rows: list[dict], staging, mode: str = "append") -> None:
        """Appends `rows` (or, with mode "overwrite", rewrites the table with them, its schema too)."""
        if self.spark_source:
            staged = str(staging / f"landing-{len(self.rows)}-{len(rows)}-{mode}.parquet")
            pq.write_table(self.source_table(rows), staged)
            writer = spark.read.parquet(staged).write.format("delta").mode(mode).partitionBy("load_date")
            if mode == "overwrite":
                writer = writer.option("overwriteSchema", "true")
            writer.option("delta.enableDeletionVectors", "true").save(self.path)
        else:
            creating = not DeltaTable.is_deltatable(self.path)
            write_deltalake(self.path, self.source_table(rows), mode=mode, partition_by=["load_date"],
                            schema_mode="overwrite" if mode == "overwrite" else None,
                            configuration=hostile.SOURCE_CONFIGURATION if creating else None)

    def land_until(self, spark, t: dt.datetime, staging) -> None:
        due = [row for landed, row in self.pending if landed <= t]
        self.pending = [(landed, row) for landed, row in self.pending if landed > t]
        if due:
            self.write(spark, due, staging)
            self.rows += due

    def expected_rows(self) -> list[dict]:
        return [r for r in self.rows if r.get("domain_userid") not in self.erased_users
                and ((t := reference.load_time(r)) is None or reference.hour_of(t) not in self.skipped_hours)]

    def filtered(self) -> list[dict]:
        """reference.py's filtered events of the rows the source holds, under the settings now."""
        settings = self.settings()
        valid, _ = reference.split_valid_and_rejected(reference.rows_read(self.expected_rows(), settings), settings)
        base = reference.kept_copies(valid, settings)
        return reference.filtered_events(base, reference.sessions_lifecycle(base, settings), settings)

    def expected(self) -> dict[str, list[dict]]:
        """docs/rules.md's tables; a skipped day keeps what its last build aggregated (section 6),
        but no erased user's rows (section 1) and no day before the start (section 1)."""
        declared = DECLARED if self.declared else ()
        tables = reference.expected_tables(self.expected_rows(), self.settings(), AS_OF, declared)
        kept = {day: [r for r in rows if r["domain_userid"] not in self.erased_users]
                for day, rows in self.skipped_days.items() if day >= self.start_date.date()}
        if not self.skipped_days:
            return tables
        filtered = [r for r in self.filtered() if r["event_date"] not in self.skipped_days]
        filtered += [r for rows in kept.values() for r in rows]
        daily = reference.daily_aggregates(filtered)
        users = reference.attributes(daily, AS_OF)
        tables["daily_aggregates"] = [{c: r[c] for c in reference.COLUMNS["daily_aggregates"]} for r in daily]
        tables["attributes"] = [{c: r[c] for c in reference.COLUMNS["attributes"]} for r in users]
        if declared:
            values = declared_values(filtered, [r["domain_userid"] for r in users], declared, AS_OF)
            versions = recorded_versions(with_defaults(declared, True, "test"))
            tables["attributes"] = [{**r, **values[r["domain_userid"]], "attribute_versions": versions}
                                    for r in tables["attributes"]]
        return tables


def run(instance, t: dt.datetime, expect_success: bool | None = True):
    from incremental_assets import runner

    report = runner.run_until(t, instance=instance, echo=quiet)
    assert expect_success is None or report.success == expect_success, (t, report.refused, report.runs)
    return report


def delete_event(spark, lake: Lake, event_id: str) -> None:
    if lake.spark_source:
        spark.sql(f"DELETE FROM delta.`{lake.path}` WHERE event_id = '{event_id}'")
    else:
        DeltaTable(lake.path).delete(f"event_id = '{event_id}'")
    lake.rows = [r for r in lake.rows if r.get("event_id") != event_id]


def compact(spark, lake: Lake) -> None:
    if lake.spark_source:
        spark.sql(f"OPTIMIZE delta.`{lake.path}`")
    else:
        DeltaTable(lake.path).optimize.compact()


def recreate(spark, lake: Lake, staging) -> None:
    """The source table deleted and written again at its path with the rows it holds: a new log."""
    shutil.rmtree(lake.path)
    if lake.spark_source:
        spark.catalog.clearCache()
    lake.write(spark, lake.rows, staging)


def resolve_all(prefix: str = "base_events/") -> None:
    from incremental_assets.operator.operations import resolve_item
    from incremental_assets.planning.processing_manifest import ItemStatus
    from incremental_assets.settings import Settings
    from resources.manifest import ManifestStore

    states = ManifestStore.of(Settings.load()).states()
    for item in sorted(i for i, s in states.items() if i.startswith(prefix) and s.status is ItemStatus.FAIL_LOCKED):
        resolve_item(Settings.load(), item, note="transient")


def fail_then(operation: str, data, *, monkeypatch, instance, lake: Lake, loaded, t: dt.datetime) -> None:
    """A run fails on a load hour, then the operator resolves its items, or skips the hour."""
    from incremental_assets.operator.operations import skip_item
    from incremental_assets.settings import Settings
    from incremental_assets.steps import hourly as hourly_step

    hour = data.draw(st.sampled_from(loaded), label="failing hour")
    with monkeypatch.context() as m:
        m.setattr(hourly_step, "compute", failing_for(hour))
        run(instance, t, expect_success=None)
    if hour_item(hour) in fail_locked_hour_items() and operation == "fail_then_skip":
        skip_item(Settings.load(), hour_item(hour), note="bad file")
        lake.skipped_hours.add(hour)
    resolve_all()


def change_app_ids(data, *, monkeypatch, instance, lake: Lake, t: dt.datetime, failing: bool) -> None:
    """`app_ids` changed (an app added or taken out); with `failing`, its catch-up fails once its
    rows are written, then the operator resolves it or changes `app_ids` back."""
    from incremental_assets.steps import hourly as hourly_step

    before = lake.app_ids
    lake.app_ids = data.draw(st.sampled_from([a for a in APP_IDS if a != before]), label="app_ids")
    lake.use(monkeypatch)
    if not failing:
        return
    with monkeypatch.context() as m:
        m.setattr(hourly_step, "filtered_counts", failing_after_the_writes(hourly_step.filtered_counts))
        run(instance, t, expect_success=None)
    if data.draw(st.booleans(), label="the change undone after the failure"):
        lake.app_ids = before
        lake.use(monkeypatch)
    else:
        resolve_all("base_events@")


def skip_a_day(data, lake: Lake) -> None:
    """`manifest skip daily_aggregates/D` on a day the last run built: it keeps that build's rows."""
    from incremental_assets.operator.operations import skip_item
    from incremental_assets.settings import Settings

    filtered = lake.filtered()
    days = sorted({r["event_date"] for r in filtered} - set(lake.skipped_days))
    if not lake.ran or not days:
        return
    day = data.draw(st.sampled_from(days), label="skipped day")
    skip_item(Settings.load(), f"daily_aggregates/{day.isoformat()}", note="a bad day")
    lake.skipped_days[day] = [r for r in filtered if r["event_date"] == day]


def apply_after_a_commit(spark, data, *, instance, lake: Lake, t: dt.datetime) -> None:
    """A plan made and recorded, a source commit, then the plan applied: run as planned, or
    refused when the commit moved what it planned."""
    from incremental_assets import runner
    from incremental_assets.operator import plans
    from incremental_assets.settings import Settings

    settings = Settings.load()
    plan = plans.make_plan(settings, t)
    plans.record_plan(settings, plan, t)
    ids = sorted({r["event_id"] for r in lake.rows if r.get("event_id")})
    if ids and data.draw(st.booleans(), label="the commit deletes an event (else compacts)"):
        delete_event(spark, lake, data.draw(st.sampled_from(ids), label="deleted event"))
    else:
        compact(spark, lake)
    try:
        report = runner.apply_plan(settings, plan.plan_id, instance=instance, echo=quiet)
    except plans.PlanRefused:
        event("plan: refused")
        return
    event("plan: applied")
    assert report.success, (report.refused, report.runs)


def move_start(data, *, monkeypatch, lake: Lake) -> None:
    later = [d for d in (hostile.at(0), hostile.at(1), hostile.at(2)) if d > lake.start_date]
    if later:
        lake.start_date = data.draw(st.sampled_from(later), label="start moved to")
        lake.use(monkeypatch)


def narrow_filter(monkeypatch, lake: Lake) -> None:
    lake.event_names = NARROWED
    lake.use(monkeypatch)


def erase(data, *, spark, instance, lake: Lake, t: dt.datetime) -> None:
    from incremental_assets.operator import forget
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    user = data.draw(st.sampled_from(("r-u1", "r-u2")), label="erased user")
    settings = Settings.load()
    tables = table_store(spark, settings.warehouse_root, settings.table_engine)
    forget.request_erasure(settings, tables, forget.erased([("domain_userid", user)]), instance=instance, now=t)
    lake.erased_users.add(user)



def concurrent_runs(data, *, monkeypatch, instance, lake: Lake, loaded, t: dt.datetime) -> None:
    """Two runs at once: while the first run's hourly step holds its hours and the hourly turn,
    another process backfills a load day by hand. The second's hourly run is refused when the
    first holds some of that day's hours, else it waits for the turn and runs; then the runs
    until `t` succeed."""
    from dagster import DagsterInstance

    from incremental_assets import runner
    from incremental_assets.names import HOURLY_JOB, HOURLY_TURN
    from incremental_assets.steps import hourly as hourly_step
    from resources import manifest_io_manager
    from resources.manifest import ItemLockedError, ManifestStore

    day = data.draw(st.sampled_from(sorted({h.date() for h in loaded})), label="day backfilled meanwhile")
    met, second, reports = [], [], []
    real_claim, real_compute = ManifestStore.claim, hourly_step.compute

    def claim(self, items, **kwargs):
        try:
            return real_claim(self, items, **kwargs)
        except ItemLockedError as exc:
            if threading.current_thread() is not threading.main_thread():
                met.append(exc.item)  # the second run met the first's locked hours or its turn
            raise

    def backfill_meanwhile():
        # Another process: a Dagster instance of its own, which does not know the first run.
        reports.append(runner.backfill(day, day, instance=DagsterInstance.ephemeral(), echo=quiet, now=t))

    def compute(*args, **kwargs):
        if not second:
            second.append(threading.Thread(target=backfill_meanwhile, name="second run"))
            second[0].start()
            while second[0].is_alive() and not met:
                second[0].join(0.2)
        return real_compute(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(ManifestStore, "claim", claim)
        m.setattr(hourly_step, "compute", compute)
        m.setattr(manifest_io_manager, "TURN_WAIT_SECONDS", 5)  # 20 tries: the first's step ends well within
        run(instance, t, expect_success=None)
        if second:
            second[0].join()
    if not second:
        return  # the first run computed no window
    hourly = [r.success for r in reports[0].runs if r.job == HOURLY_JOB]
    locked_hours = set(met[:1]) - {HOURLY_TURN}
    event(f"concurrent run: the second {'refused' if locked_hours else 'waited for its turn' if met else 'ran'}")
    # Refused at its claim, writing nothing, when the first holds its hours; else it runs.
    assert hourly == ([False] if locked_hours else [True]), (met, reports[0].refused, reports[0].runs)


def widen_a_column(spark, data, *, monkeypatch, instance, lake: Lake, staging, t: dt.datetime) -> None:
    """A rewritten source gives the extra column a type the tables' cannot hold (int to double,
    5 to 5.7): the runs stop naming the column and write nothing. The operator recovers as
    docs/troubleshooting.md says: gives the column its old type in the source (and resolves the
    failed items), or rebuilds the tables with the new type (drops them, keeping the operator's
    records, and runs their load hours again)."""
    held = _column_type(f"{lake.warehouse}/base_events", EXTRA)
    lake.extra_type = "double"
    lake.write(spark, lake.rows, staging, mode="overwrite")
    report = run(instance, t, expect_success=None)
    if held is None or not pa.types.is_integer(held):
        return  # no table holds the column yet (or holds it as a double already): nothing to refuse
    failures = " ".join(line for r in report.runs for line in r.failures)
    assert not report.success and f"column {EXTRA} is int in the table but double in the rows" in failures, (
        report.refused, report.runs)
    if data.draw(st.booleans(), label="the column's old type given back (else the tables rebuilt)"):
        event("column type: given back in the source")
        lake.extra_type = "int"
        lake.write(spark, lake.rows, staging, mode="overwrite")
        resolve_all()
        resolve_all("base_events@")
    else:
        event("column type: tables rebuilt")
        drop_derived_tables(lake.warehouse)
        lake.skipped_days.clear()  # the manifest that held the skipped days went with the tables
    lake.use(monkeypatch)


def _column_type(table: str, column: str) -> pa.DataType | None:
    if not DeltaTable.is_deltatable(table):
        return None
    schema = pa.schema(DeltaTable(table).schema().to_arrow())
    return schema.field(column).type if column in schema.names else None


def drop_derived_tables(warehouse: str) -> None:
    """Every table of the warehouse but the operator's records (erasures, skipped hours)."""
    from pathlib import Path

    for table in Path(warehouse).iterdir():
        if table.is_dir() and table.name not in OPERATOR_RECORDS:
            shutil.rmtree(table)
