"""What each Delta engine asks of Spark: a small lake rebuilt, maintained as the nightly job
does, then warm incremental hours, each with its Spark SQL executions (queries) and jobs, and
one more hour with them attributed to the table store's methods that issued them.

    python -m bench.engine_queries --engine delta-spark [--events 30000] [--days 3] [--hours 3]
                                   [--work bench/out/engine_queries]

Run it once per engine (a process holds one engine's code location). The counts do not depend
on the machine's load; the seconds do (other processes on the same cores move them).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import shutil
import statistics
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from bench.dagster_storage import DagsterStorage
from bench.engines import BENCH_ENGINES
from bench.measure import START, append_hour, at_hour, make_pool, make_source, say, set_env


class SparkWork:
    """Spark's SQL executions and jobs so far, read from the driver's status stores once
    Spark's listener bus has delivered every event (it is asynchronous)."""

    def __init__(self, spark):
        self.spark = spark
        self._context = spark.sparkContext._jsc.sc()

    def _drain(self) -> None:
        self._context.listenerBus().waitUntilEmpty()

    def now(self) -> tuple[int, int]:
        """(queries, jobs) since the session started: one past the last id of each. The stores
        keep only the last 1,000 of each, so their lengths stop growing; the ids do not."""
        self._drain()
        store = self.spark._jsparkSession.sharedState().statusStore()
        kept = store.executionsCount()
        queries = store.executionsList(int(kept) - 1, 1).head().executionId() + 1 if kept else 0
        jobs = max(self.spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1
        return int(queries), int(jobs)


class ByStoreMethod:
    """Spark queries and jobs per table store method, each counted once: in the innermost
    method of the store running when it was issued (a method's own, not its callees')."""

    def __init__(self, work: SparkWork, store_class: type):
        self.work, self.store_class = work, store_class
        self.queries: Counter = Counter()
        self.jobs: Counter = Counter()
        self.calls: Counter = Counter()
        self._saved: dict[str, object] = {}
        self._stack: list[list[int]] = []  # per running method: queries and jobs of its callees

    def _wrap(self, name: str, method):
        @functools.wraps(method)
        def counted(*args, **kwargs):
            queries, jobs = self.work.now()
            self._stack.append([0, 0])
            try:
                return method(*args, **kwargs)
            finally:
                inner_queries, inner_jobs = self._stack.pop()
                after_queries, after_jobs = self.work.now()
                total_queries, total_jobs = after_queries - queries, after_jobs - jobs
                self.calls[name] += 1
                self.queries[name] += total_queries - inner_queries
                self.jobs[name] += total_jobs - inner_jobs
                if self._stack:
                    self._stack[-1][0] += total_queries
                    self._stack[-1][1] += total_jobs
        return counted

    def __enter__(self) -> "ByStoreMethod":
        for klass in reversed(self.store_class.__mro__):
            for name, member in vars(klass).items():
                if inspect.isfunction(member) and not name.startswith("__"):
                    self._saved[name] = getattr(self.store_class, name)
        self._own = {name: vars(self.store_class)[name] for name in self._saved if name in vars(self.store_class)}
        for name, method in self._saved.items():
            setattr(self.store_class, name, self._wrap(name, method))
        return self

    def __exit__(self, *exc) -> None:
        for name in self._saved:
            delattr(self.store_class, name)
        for name, method in self._own.items():
            setattr(self.store_class, name, method)

    def table(self) -> list[dict]:
        names = sorted(self.calls, key=lambda n: (-self.queries[n], -self.jobs[n], n))
        return [{"method": n, "calls": self.calls[n], "queries": self.queries[n], "jobs": self.jobs[n]}
                for n in names if self.queries[n] or self.jobs[n]]


def _store_class(engine: str) -> type:
    from resources.tables.delta_rs import DeltaRsTableStore
    from resources.tables.delta_spark import DeltaSparkTableStore

    return {"delta-rs": DeltaRsTableStore, "delta-spark": DeltaSparkTableStore}[engine]


def measure(args: argparse.Namespace) -> dict:
    from incremental_assets.runner import backfill, run_until
    from incremental_assets.settings import Settings
    from resources.spark import get_spark
    from resources.tables.stores import table_store

    work_dir = Path(args.work).resolve()
    lake = work_dir / args.engine
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    spark = get_spark()
    work = SparkWork(spark)
    helper = table_store(spark, str(work_dir), "delta-rs")  # the source's reads and writes
    pool = make_pool(spark, work_dir, events=args.events, days=args.days)
    source = lake / "source"
    make_source(helper, pool, source, args.days)
    set_env(warehouse=lake / "warehouse", source_path=source)

    with DagsterStorage("sqlite", lake / "dagster") as storage:
        instance = storage.instance(lake / "dagster_home")
        started = time.perf_counter()
        report = backfill(START, START + timedelta(days=args.days - 1), instance=instance, echo=lambda _: None)
        say(f"{args.engine}: rebuild of {args.days} days in {time.perf_counter() - started:.1f} s")
        if not report.success:
            raise SystemExit(f"rebuild failed: {report.runs}")
        cut = at_hour(START + timedelta(days=args.days))
        maintenance = maintain(spark, work, args.engine, cut)
        hours = []
        for k in range(args.hours + 1):
            append_hour(helper, pool, source, cut + timedelta(hours=k))
            attributed = k == args.hours  # the last hour, after the timed ones
            before, started = work.now(), time.perf_counter()
            with ByStoreMethod(work, _store_class(args.engine)) if attributed else _nothing() as methods:
                report = run_until(cut + timedelta(hours=k + 1), instance=instance, echo=lambda _: None)
            seconds = time.perf_counter() - started
            after = work.now()
            if not report.success or report.hours is None:
                raise SystemExit(f"hour {k + 1} failed or did nothing: {report}")
            hour = {"seconds": seconds, "queries": after[0] - before[0], "jobs": after[1] - before[1],
                    "runs": [run.job for run in report.runs]}
            if attributed:
                hour["by_method"] = methods.table()
            say(f"{args.engine}: hour {k + 1}{' (attributed)' if attributed else ''}: {seconds:.1f} s, "
                f"{hour['queries']} queries, {hour['jobs']} jobs, runs {', '.join(hour['runs'])}")
            hours.append(hour)
        settings = Settings.load()
        assert settings.table_engine == args.engine, settings.table_engine
    timed = hours[:-1]
    return {"engine": args.engine, "events": args.events, "days": args.days, "maintenance": maintenance,
            "hours": hours,
            "median_seconds": statistics.median(h["seconds"] for h in timed),
            "median_queries": statistics.median(h["queries"] for h in timed),
            "median_jobs": statistics.median(h["jobs"] for h in timed)}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def maintain(spark, work: SparkWork, engine: str, now) -> dict:
    """The nightly maintenance of the lake, with its queries per store method."""
    from incremental_assets.maintenance import maintain_tables
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    settings = Settings.load()
    tables = table_store(spark, settings.warehouse, settings.table_engine)
    before, started = work.now(), time.perf_counter()
    maintain_tables(settings, tables, now)
    seconds = time.perf_counter() - started
    after = work.now()
    with ByStoreMethod(work, _store_class(engine)) as methods:  # again, attributed: little left to do
        maintain_tables(settings, tables, now + timedelta(minutes=1))
    say(f"{engine}: maintenance {seconds:.1f} s, {after[0] - before[0]} queries, {after[1] - before[1]} jobs")
    return {"seconds": seconds, "queries": after[0] - before[0], "jobs": after[1] - before[1],
            "again_by_method": methods.table()}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=BENCH_ENGINES, required=True)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--hours", type=int, default=3, help="timed warm hours (one more is attributed)")
    parser.add_argument("--work", default=str(Path(__file__).resolve().parent / "out" / "engine_queries"))
    parser.add_argument("--out", help="write the figures as JSON here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    set_env(start_date=START.isoformat(), table_engine=args.engine,
            attributes_as_of=(START + timedelta(days=args.days)).isoformat())
    os.environ.setdefault("INCREMENTAL_LOG_LEVEL", "CRITICAL")
    results = measure(args)
    text = json.dumps(results, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
