"""A long, sparse history: does an hour cost more after a year of loads than after ten days?

`days` days of low-density loads (the sample generator, `events` in all) are backfilled into
their own warehouse and maintained by the product's daily maintenance, as a history that long
is kept (the backfill's commits would otherwise leave a file each in the small ledger the sensor
reads at every tick; `incremental_hours` runs it); then load hours of ordinary volume arrive (a
one-day pool with the main benchmark's events per day) and each is timed as in the short histories, with what each step
read; then the sensor's ticks. The hours' rows are like the short histories' hours, so the
difference is the history: more partitions, more Delta files and log, more manifest records.
"""

from __future__ import annotations

import shutil
import time
from datetime import timedelta
from pathlib import Path

from bench.dagster_storage import DagsterStorage
from bench.measure import (
    SEED,
    START,
    at_hour,
    generated,
    incremental_hours,
    make_source,
    say,
    sensor_ticks,
    set_env,
)


def long_history(spark, tables, work: Path, storage: DagsterStorage, *, days: int, events: int,
                 events_per_day: int, repeats: int) -> dict:
    from incremental_assets.runner import backfill
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    sparse = generated(spark, work / f"pool_{days}d_sparse", events=events, days=days, start=START, seed=SEED + 1)
    arriving = generated(spark, work / f"pool_{days}d_arriving", events=events_per_day, days=1,
                         start=START + timedelta(days=days), seed=SEED + 2)
    source = work / f"source_{days}d_sparse"
    rows = make_source(tables, sparse, source, days)
    warehouse = work / f"history_{days}d_sparse"
    shutil.rmtree(warehouse, ignore_errors=True)
    as_of_before = Settings.load().attributes_as_of
    set_env(warehouse=warehouse, source_path=source, attributes_as_of=(START + timedelta(days=days)).isoformat())
    try:
        instance = storage.instance(work / f"history_{days}d_sparse_dagster")
        say(f"long history: {rows:,} rows loaded over {days} days; backfill")
        started = time.perf_counter()
        report = backfill(START, START + timedelta(days=days - 1), instance=instance, echo=lambda _: None)
        backfill_seconds = time.perf_counter() - started
        if not report.success:
            raise SystemExit(f"the backfill of the {days}-day history failed: {report}")
        say(f"  backfill of {days} days: {backfill_seconds:.1f} s; maintenance and incremental hours")
        history = table_store(spark, str(warehouse), "delta-rs")
        hours = incremental_hours(spark, tables, arriving, source, warehouse, instance, days, repeats)
        say("  sensor ticks")
        sensor = sensor_ticks(arriving, tables, source, instance, at_hour(START + timedelta(days=days), repeats),
                              repeats)
        manifest_records = history.describe("processing_manifest")["num_rows"]
    finally:
        set_env(attributes_as_of=as_of_before.isoformat() if as_of_before else "")
    return {"days": days, "source_rows": rows, "backfill_seconds": backfill_seconds,
            "incremental": hours, "sensor": sensor, "manifest_records": manifest_records}
