"""`make bench`: what a full rebuild, an incremental hour and a sensor tick cost, and DuckDB's time.

    python -m bench [--events 10000000] [--days 30] [--repeats 3] [--rebuild-repeats N] [--small]
                    [--maintenance-hours 300]
                    [--long-history-days 300] [--long-history-events 30000] [--out bench/RESULTS.md]
                    [--connect-warmup-hours 5]
                    [--dagster-storage postgres|sqlite]

Dagster's runs and events go to SQLite files, the embedded default; `--dagster-storage postgres`
keeps them in a PostgreSQL server as production does (bench/dagster_storage.py; the server
binaries must be on PATH).

Steps (each figure is the median of --repeats runs, with min and max; the full rebuilds, of
--rebuild-repeats runs, --repeats by default: at 10M events one takes about 16 minutes):
1. generate a pool of events over days + 1 with the sample generator; the source holds the
   loads of the first `days` days, the last day is what later "arrives";
2. full backfill of all assets into an empty warehouse: warm (this process, Spark already
   up) and cold (a new `incremental-assets backfill` process each time, at the end); events
   per second; DuckDB (step 6) right after the warm ones, whose first warehouse it compares
   with before new hours change it;
3. for histories of 3, 10 and `days` days: backfill that history, then append one load
   hour at a time to the source and time the incremental run (`run --until`) that
   processes it, with the Delta files and bytes each asset's reads were planned over and
   the bytes Spark's stages read; then the same after a long, sparse history
   (bench/long_history.py: --long-history-events loaded over --long-history-days days, 300 by
   default, none with --small), with its own sensor ticks, and after 10 days at the same density
   (the same new hours: the ratio of the two is what the history's length costs);
4. a sensor tick at `days` days of history (one that finds a new hour, one that finds none);
   then the cold hour: a new `incremental-assets run` process for each of `repeats` new hours,
   first with Spark in the process, then as clients of one Spark Connect server, after its
   first --connect-warmup-hours hours (5; timed apart: production's server is long-lived);
5. table maintenance: a table written by --maintenance-hours hourly commits, its reads timed
   before and after compaction and vacuum;
6. DuckDB from the same source files (bench/duckdb_reference.py): daily_aggregates and
   attributes in memory; then every table a full rebuild writes (base_events with all its
   columns, event_copies, rejected_events, the session tables, filtered_events, the daily
   tables) written as Parquet under --work/duckdb_tables. For each: time, our warm rebuild
   divided by it, and whether its tables equal ours (bench/table_diff.py).
Writes RESULTS.md and its raw figures (RESULTS.json, the next run's baseline: each figure
and step is shown beside the previous run's). Work files go to --work (bench/out/ by default).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.dagster_storage import KINDS, DagsterStorage
from bench.engines import BENCH_ENGINES
from bench.long_history import long_history
from bench.measure import (
    BENCH_DIR,
    START,
    Figure,
    append_hour,
    at_hour,
    incremental_hours,
    make_pool,
    make_source,
    per_step,
    say,
    sensor_ticks,
    set_env,
    spark_stages,
    step_windows,
)

# The sparse history the long one is compared with: its days (at the long one's density).
SHORT_SPARSE_DAYS = 10

# -- phases ----------------------------------------------------------------------------------

def full_backfill_warm(spark, work: Path, storage: DagsterStorage, source: Path, days: int,
                       run: int) -> tuple[float, dict, Path, object]:
    from incremental_assets.runner import backfill
    from resources.tables import recording_scans

    warehouse = work / f"full_warm_{run}"
    shutil.rmtree(warehouse, ignore_errors=True)
    set_env(warehouse=warehouse, source_path=source)
    instance = storage.instance(work / f"full_warm_{run}_dagster")
    since = time.time()
    with recording_scans() as scans:
        started = time.perf_counter()
        report = backfill(START, START + timedelta(days=days - 1), instance=instance, echo=lambda _: None)
        seconds = time.perf_counter() - started
    if not report.success:
        raise SystemExit(f"full backfill failed: {report.runs}")
    windows = step_windows(instance, [run.run_id for run in report.runs])
    return seconds, per_step(windows, scans, spark_stages(spark), since), warehouse, instance


def full_backfill_cold(work: Path, storage: DagsterStorage, source: Path, days: int, run: int) -> float:
    warehouse = work / f"full_cold_{run}"
    shutil.rmtree(warehouse, ignore_errors=True)
    home = storage.home(work / f"full_cold_{run}_dagster")
    env = {**os.environ, "INCREMENTAL_WAREHOUSE": str(warehouse), "INCREMENTAL_SOURCE_PATH": str(source),
           "DAGSTER_HOME": str(home)}
    command = [sys.executable, "-m", "incremental_assets.cli", "backfill", "--start", START.isoformat(),
               "--end", (START + timedelta(days=days - 1)).isoformat()]
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    shutil.rmtree(warehouse, ignore_errors=True)
    return seconds


def cold_hours(tables, pool: Path, source: Path, warehouse: Path, home: Path, first_hour: datetime,
               repeats: int, extra_env: dict[str, str] | None = None) -> Figure:
    """A new `incremental-assets run` process per new hour (the first hour is already in the
    source): what each run the daemon launches pays, Spark's start included."""
    seconds = Figure()
    env = {**os.environ, "INCREMENTAL_WAREHOUSE": str(warehouse), "INCREMENTAL_SOURCE_PATH": str(source),
           "DAGSTER_HOME": str(home), **(extra_env or {})}
    for k in range(repeats):
        hour = first_hour + timedelta(hours=k)
        if k:
            append_hour(tables, pool, source, hour)
        command = [sys.executable, "-m", "incremental_assets.cli", "run", "--until",
                   (hour + timedelta(hours=1)).isoformat()]
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        seconds.add(time.perf_counter() - started)
        say(f"  cold hour {k + 1}: {seconds.values[-1]:.1f} s")
    return seconds


# A new Spark Connect server's JVM compiles as it works: at 10M events its first hours took 62 to
# 77, 47 to 51, 39 to 45 s, its fifth to seventh 30 to 42 s (warm in-process hours: 24 to 33 s).
# Production's server is long-lived, so the figure is of hours after this many of its own.
CONNECT_WARMUP_HOURS = 5


def cold_hours_through_connect(tables, pool: Path, source: Path, warehouse: Path, home: Path,
                               first_hour: datetime, repeats: int, warmup_hours: int) -> tuple[Figure | None, Figure]:
    """cold_hours, each new process a Spark Connect client of one long-lived server (local
    mode, the same settings as this process's Spark): a run pays its Python start and its
    work, not a JVM's start. The server's own start is not counted (it outlives the runs), nor
    its first `warmup_hours` hours (returned apart, in order: what a restarted server's hours
    cost; None without any): (those hours, the measured hours after them)."""
    from deploy.stack import HOST, connect_server_command, free_port, spark_home, wait_for_port
    from resources.spark import LOCAL_DEFAULTS

    port = free_port()
    log = open(Path(warehouse).parent / "connect-server.log", "ab")
    server_env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST}
    server = subprocess.Popen(connect_server_command(LOCAL_DEFAULTS["spark.master"], port), env=server_env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not wait_for_port(port, 180, alive=lambda: server.poll() is None):
            raise RuntimeError(f"the Spark Connect server did not start; see {log.name}")
        append_hour(tables, pool, source, first_hour)
        env = {"SPARK_REMOTE": f"sc://{HOST}:{port}"}
        say(f"  the server's first {warmup_hours} hours, then {repeats} timed")
        hours = cold_hours(tables, pool, source, warehouse, home, first_hour, warmup_hours + repeats, extra_env=env)
        return (Figure(hours.values[:warmup_hours]) if warmup_hours else None), Figure(hours.values[warmup_hours:])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def maintenance_effect(spark, tables, pool: Path, work: Path, hours: int, repeats: int) -> dict:
    """A table written by `hours` hourly replace_range commits, as the hourly step writes
    base_events; its reads timed before and after compaction and vacuum."""
    from pyspark.sql import functions as F

    from incremental_assets.sources.reader import read_source
    from resources.tables.stores import table_store

    root = work / "maintenance"
    shutil.rmtree(root, ignore_errors=True)
    store = table_store(spark, str(root), "delta-rs")
    first = at_hour(START)
    rows = read_source(tables, str(pool), first, first + timedelta(hours=hours)).cache()
    for k in range(hours):
        start, end = first + timedelta(hours=k), first + timedelta(hours=k + 1)
        hour_rows = rows.where((F.col("load_tstamp") >= F.lit(start)) & (F.col("load_tstamp") < F.lit(end)))
        store.replace_range("hourly_writes", hour_rows, column="load_tstamp", start=start, end=end,
                            partition_by=["load_date"])
    rows.unpersist()
    last_day = first + timedelta(hours=hours) - timedelta(days=1)

    def timed_reads() -> tuple[Figure, Figure]:
        whole, day = Figure(), Figure()
        for figure, read in ((whole, lambda: store.read("hourly_writes")),
                             (day, lambda: store.read_range("hourly_writes", "load_tstamp", last_day, None))):
            for _ in range(repeats):
                started = time.perf_counter()
                read().agg(F.sum(F.length("event_id"))).first()  # reads a column, not just footers
                figure.add(time.perf_counter() - started)
        return whole, day

    files_before = store.describe("hourly_writes")["num_files"]
    read_before, day_before = timed_reads()
    started = time.perf_counter()
    store.compact("hourly_writes")
    store.vacuum("hourly_writes", retention_hours=0)
    seconds = time.perf_counter() - started
    read_after, day_after = timed_reads()
    result = {"hours": hours, "files_before": files_before, "files_after": store.describe("hourly_writes")["num_files"],
              "read_before": read_before, "day_before": day_before, "read_after": read_after,
              "day_after": day_after, "seconds": seconds}
    say(f"  {hours} hourly writes: {files_before} files, full read {read_before.median:.2f} s; after "
           f"maintenance ({seconds:.1f} s): {result['files_after']} files, {read_after.median:.2f} s")
    return result


def duckdb_comparison(source: Path, warehouse: Path, work: Path, repeats: int) -> dict:
    """DuckDB on the same source: the two final tables in memory, then every table a full
    rebuild writes, written as Parquet under work/duckdb_tables (anew each time); each compared
    with the pipeline's table of the same name in `warehouse`."""
    from bench.duckdb_reference import duckdb_tables, duckdb_write_tables
    from bench.table_diff import compare, compare_written
    from incremental_assets.settings import Settings
    from resources.tables import read_delta_arrow

    set_env(warehouse=warehouse, source_path=source)
    settings = Settings.load()
    as_of = settings.as_of_date(datetime.now(timezone.utc))
    seconds = Figure()
    for _ in range(repeats):
        started = time.perf_counter()
        daily, attributes = duckdb_tables(str(source), settings, as_of)
        seconds.add(time.perf_counter() - started)
    ours_daily = read_delta_arrow(str(warehouse / "daily_aggregates"))
    ours_attributes = read_delta_arrow(str(warehouse / "attributes"))
    differences = {
        "daily_aggregates": compare(ours_daily, daily, ["event_date", "domain_userid"]),
        "attributes": compare(ours_attributes, attributes, ["domain_userid"]),
    }

    written_dir = work / "duckdb_tables"
    # DuckDB's default limit, 80% of the machine's memory, beside this process's Spark (a 6 GB
    # heap) could exhaust it at 10M events (base_events alone is about 10 GB in DuckDB): half
    # of it, spilling beyond.
    memory_limit = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**21}MB"
    same_tables = Figure()
    for _ in range(repeats):
        shutil.rmtree(written_dir, ignore_errors=True)  # not timed: each run writes into nothing
        written = duckdb_write_tables(str(source), settings, as_of, str(written_dir), memory_limit=memory_limit)
        same_tables.add(written["seconds"])
    say(f"  DuckDB, the same tables written: {same_tables.median:.1f} s; comparing them with ours")
    return {"seconds": seconds, "rows": {"daily_aggregates": daily.num_rows, "attributes": attributes.num_rows},
            "differences": differences,
            "same_tables": {"seconds": same_tables, "rows": written["rows"],
                            "tables": compare_written(written_dir, warehouse)}}


# -- main -----------------------------------------------------------------------------------

def _commit() -> str:
    """The checked-out commit (and whether the work tree differs), for the report."""
    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=BENCH_DIR, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--histories", default="3,10,30", help="days of history before the new hour")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true",
                        help="a quick look: 300k events over 10 days, histories 3 and 10")
    parser.add_argument("--long-history-days", type=int, default=None,
                        help="days of a sparse history whose new hours are timed too (0: leave it out); "
                             "300 by default, 0 with --small (its backfill alone takes longer than the rest)")
    parser.add_argument("--long-history-events", type=int, default=30_000,
                        help="events loaded over the long history")
    parser.add_argument("--rebuild-repeats", type=int, default=None,
                        help="full rebuilds of each kind, warm and cold (default: --repeats; at least 1)")
    parser.add_argument("--skip-cold", action="store_true", help="leave out the cold (new process) rebuilds")
    parser.add_argument("--connect-warmup-hours", type=int, default=CONNECT_WARMUP_HOURS,
                        help="hours a new Spark Connect server runs before its hours are timed (default: "
                             f"{CONNECT_WARMUP_HOURS}, as production's long-lived server; "
                             "0: a new server's first hours)")
    parser.add_argument("--maintenance-hours", type=int, default=300,
                        help="hourly writes before the table-maintenance measurement")
    parser.add_argument("--work", default=str(BENCH_DIR / "out"))
    parser.add_argument("--engine", choices=BENCH_ENGINES, default="delta-rs",
                        help="the Delta engine the pipeline writes with (INCREMENTAL_TABLE_ENGINE); the report "
                             "of another than delta-rs goes to RESULTS[-small]-<engine>.md by default")
    parser.add_argument("--dagster-storage", choices=KINDS, default="sqlite",
                        help="where Dagster keeps runs and events: SQLite files, the embedded default, or a "
                             "PostgreSQL server, as in production")
    parser.add_argument("--out", default=None, help="report path (default: bench/RESULTS.md, "
                                                    "bench/RESULTS-small.md with --small); the run's raw "
                                                    "figures go beside it (.json)")
    parser.add_argument("--baseline", default=None,
                        help="an earlier run's raw figures to show beside this run's (default: those of the "
                             "last run written to --out, if any; 'none': no comparison)")
    args = parser.parse_args(argv)
    if args.long_history_days is None:
        args.long_history_days = 0 if args.small else 300
    if args.small:
        args.events, args.days, args.histories = 300_000, 10, "3,10"
        args.maintenance_hours = min(args.maintenance_hours, 48)
        args.skip_cold = True  # the cold figure of the small run is the cold hour
    args.histories = sorted({int(d) for d in args.histories.split(",") if int(d) <= args.days} | {args.days})
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (every figure is a median of at least 3 runs)")
    if args.rebuild_repeats is None:
        args.rebuild_repeats = args.repeats
    if args.connect_warmup_hours < 0:
        parser.error(f"--connect-warmup-hours must be 0 or more, not {args.connect_warmup_hours}")
    if args.rebuild_repeats < 1:
        parser.error(f"--rebuild-repeats must be at least 1, not {args.rebuild_repeats}")
    engine_suffix = "" if args.engine == "delta-rs" else f"-{args.engine}"
    args.out = Path(args.out or BENCH_DIR / (("RESULTS-small" if args.small else "RESULTS") + engine_suffix + ".md"))
    if args.baseline is None and args.out.with_suffix(".json").exists():
        args.baseline = str(args.out.with_suffix(".json"))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    with DagsterStorage(args.dagster_storage, work / "dagster_postgres") as storage:
        say(f"Dagster's runs and events: {storage.describe()}")
        return run_benchmark(args, work, storage, began)


def run_benchmark(args: argparse.Namespace, work: Path, storage: DagsterStorage, began: float) -> int:
    # Partitions start at start_date when the code location is imported: set it first.
    set_env(start_date=START.isoformat(), table_engine=args.engine)
    # Attributes as of the day after the history (not today): their last-N-day windows hold data.
    set_env(attributes_as_of=(START + timedelta(days=args.days)).isoformat())
    os.environ.setdefault("INCREMENTAL_LOG_LEVEL", "CRITICAL")
    os.environ["DAGSTER_HOME"] = str(work / "dagster_home")

    from resources.spark import get_spark
    from resources.tables.stores import table_store

    spark = get_spark()
    tables = table_store(spark, str(work), "delta-rs")
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "commit": _commit()}
    from bench.report import load_results, write_report, written_now
    from bench.targets import targets_section

    # Read before this run's report replaces it (the default baseline is the last run's figures).
    baseline = load_results(Path(args.baseline)) if args.baseline not in (None, "none") else None
    # A smaller run's report also shows the targets of the last full-size run (bench/RESULTS.json).
    full_json = BENCH_DIR / "RESULTS.json"
    is_full_run = args.out.with_suffix(".json").resolve() == full_json.resolve()
    full_run = load_results(full_json) if full_json.exists() and not is_full_run else None

    def report(results: dict) -> None:
        """Write what is measured so far: a long run that is stopped still leaves its figures."""
        results["seconds_total"] = time.perf_counter() - began
        results["written"] = written_now()
        write_report(results, args.out, args.out.with_suffix(".json"), baseline, full_run)

    pool = make_pool(spark, work, events=args.events, days=args.days)
    sources, source_rows = {}, {}
    for days in args.histories:
        sources[days] = work / f"source_{days}d"
        source_rows[days] = make_source(tables, pool, sources[days], days)
        say(f"source with {days} days of loads: {source_rows[days]:,} rows")
    full_source = sources[args.days]
    source_rows = results["source_rows"] = source_rows[args.days]

    say(f"full backfill, warm, {args.rebuild_repeats} runs")
    warm, warm_steps = Figure(), []
    for run in range(args.rebuild_repeats):
        seconds, steps, warehouse, instance = full_backfill_warm(spark, work, storage, full_source, args.days, run)
        warm.add(seconds)
        warm_steps.append(steps)
        if 0 < run < args.rebuild_repeats - 1:  # keep the first (DuckDB's reference) and the last (history)
            shutil.rmtree(warehouse, ignore_errors=True)
        say(f"  warm run {run + 1}: {seconds:.1f} s ({source_rows / seconds:,.0f} events/s)")
    reference_warehouse = work / "full_warm_0"
    results["full_warm"], results["full_warm_steps"] = warm, warm_steps
    results["files_written"] = files_per_table(spark, reference_warehouse)
    report(results)
    # DuckDB's tables are compared with the first warm rebuild's now, before the new hours below
    # change it (with one rebuild, it is also the warehouse of the longest history).
    say("DuckDB")
    results["duckdb"] = duckdb_comparison(full_source, reference_warehouse, work, args.repeats)
    report(results)
    # New hours go to a copy: the rebuilds' source stays as it was, for DuckDB to read.
    growing = work / f"source_{args.days}d_growing"
    shutil.rmtree(growing, ignore_errors=True)
    shutil.copytree(full_source, growing)
    sources[args.days] = growing
    results["incremental"] = {}
    for days in args.histories:
        if days == args.days:
            history_warehouse, history_instance = warehouse, instance  # the last warm rebuild
        else:
            history_warehouse = work / f"history_{days}d"
            shutil.rmtree(history_warehouse, ignore_errors=True)
            set_env(warehouse=history_warehouse, source_path=sources[days])
            history_instance = storage.instance(work / f"history_{days}d_dagster")
            from incremental_assets.runner import backfill

            say(f"history of {days} days: backfill")
            backfill(START, START + timedelta(days=days - 1), instance=history_instance, echo=lambda _: None)
        say(f"history of {days} days: incremental hours")
        results["incremental"][days] = incremental_hours(spark, tables, pool, sources[days], history_warehouse,
                                                         history_instance, days, args.repeats)

    report(results)
    if args.long_history_days:
        say(f"long history: {args.long_history_days} days at low density")
        results["long_history"] = long_history(spark, tables, work, storage, days=args.long_history_days,
                                               events=args.long_history_events,
                                               events_per_day=round(args.events / args.days), repeats=args.repeats)
        report(results)
        # The same density over SHORT_SPARSE_DAYS and the same new hours: the ratio of the two
        # hours is what the history's length costs.
        short_days = min(SHORT_SPARSE_DAYS, args.long_history_days)
        say(f"short history: {short_days} days at the same density")
        results["short_sparse_history"] = long_history(
            spark, tables, work, storage, days=short_days,
            events=round(args.long_history_events * short_days / args.long_history_days),
            events_per_day=round(args.events / args.days), repeats=args.repeats)
        report(results)
    set_env(warehouse=warehouse, source_path=growing)
    say("sensor ticks")
    after = at_hour(START + timedelta(days=args.days), args.repeats)
    results["sensor"] = sensor_ticks(pool, tables, growing, instance, after, args.repeats)

    say("cold hours (a new process each)")
    home = work / f"full_warm_{args.rebuild_repeats - 1}_dagster"
    results["cold_hour"] = cold_hours(tables, pool, growing, warehouse, home, after, args.repeats)
    report(results)
    if args.engine == "delta-rs":
        say("cold hours through a Spark Connect server (a new client process each)")
        warmup, results["cold_hour_connect"] = cold_hours_through_connect(
            tables, pool, growing, warehouse, home, after + timedelta(hours=args.repeats), args.repeats,
            args.connect_warmup_hours)
        if warmup is not None:
            results["cold_hour_connect_warmup"] = warmup
        report(results)
    else:
        say(f"cold hours through Spark Connect: not measured with {args.engine} (the Connect server started "
            "here does not load Delta)")
    say(f"table maintenance after {args.maintenance_hours} hourly writes")
    results["maintenance"] = maintenance_effect(spark, tables, pool, work, args.maintenance_hours, args.repeats)
    report(results)

    if not args.skip_cold:
        say(f"full backfill, cold (new process), {args.rebuild_repeats} runs")
        cold = Figure()
        for run in range(args.rebuild_repeats):
            cold.add(full_backfill_cold(work, storage, full_source, args.days, run))
            say(f"  cold run {run + 1}: {cold.values[-1]:.1f} s")
        results["full_cold"] = cold
    results["complete"] = True
    report(results)

    print("\n".join(targets_section(results, full_run)))
    say(f"done in {results['seconds_total'] / 60:.1f} min: {args.out}")
    return 0


def files_per_table(spark, warehouse: Path) -> dict[str, int]:
    """How many data files each table of a warehouse holds (what one rebuild wrote)."""
    from incremental_assets.names import ALL_TABLES
    from resources.tables.stores import table_store

    tables = table_store(spark, str(warehouse), "delta-rs")  # reads any Delta table's log
    return {name: int(tables.describe(name)["num_files"]) for name in ALL_TABLES if tables.exists(name)}


if __name__ == "__main__":
    sys.exit(main())
