"""What the benchmark measures with: figures, the generated sources, one incremental hour
at a time with what each step read, and sensor ticks. `bench/__main__.py` runs the phases."""

from __future__ import annotations

import json
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
START = date(2026, 1, 5)
SEED = 42


@dataclass
class Figure:
    """Repeated measurements of one thing, reported as median [min .. max]."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def as_dict(self) -> dict:
        return {"median": self.median, "min": min(self.values), "max": max(self.values), "runs": self.values}


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def set_env(**values: str) -> None:
    os.environ.update({f"INCREMENTAL_{k.upper()}": str(v) for k, v in values.items()})


def at_hour(day: date, hours: int = 0) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=hours)


# -- sources -------------------------------------------------------------------------------

def generated(spark, out: Path, *, events: int, days: int, start: date, seed: int) -> Path:
    """Generated events over `days` days from `start`, reused while the same ones are asked for."""
    from incremental_assets.sources.generator import generate_events

    marker = out.with_name(out.name + ".json")
    wanted = {"events": events, "days": days, "start": start.isoformat(), "seed": seed}
    if out.exists() and marker.exists() and json.loads(marker.read_text()).get("wanted") == wanted:
        say(f"reusing the generated events at {out}")
        return out
    summary = generate_events(spark, events=events, days=days, start=start, out=str(out), seed=seed,
                              mode="overwrite", progress=say)
    marker.write_text(json.dumps({"wanted": wanted, "summary": summary}, default=str))
    return out


def make_pool(spark, work: Path, *, events: int, days: int) -> Path:
    """Generated events over days + 1 (the extra day is what arrives after each history): the same
    events per day as `events` over `days`."""
    return generated(spark, work / "pool", events=round(events * (days + 1) / days), days=days + 1,
                     start=START, seed=SEED)


def make_source(tables, pool: Path, target: Path, history_days: int) -> int:
    """The source as it stood after `history_days` days of loads: every row loaded before then."""
    from incremental_assets.sources.reader import read_source
    from incremental_assets.sources.writer import write_source_table

    history = read_source(tables, str(pool), at_hour(START), at_hour(START + timedelta(days=history_days)))
    written = write_source_table(history, str(target), mode="overwrite")
    return written["rows"]


def append_hour(tables, pool: Path, source: Path, hour_start: datetime) -> int:
    """One more load hour arrives: the pool's rows loaded in it, appended in one commit."""
    from incremental_assets.sources.reader import read_source
    from incremental_assets.sources.writer import write_source_table

    return write_source_table(read_source(tables, str(pool), hour_start, hour_start + timedelta(hours=1)),
                              str(source), mode="append")["rows"]


# -- what a run read, per step ------------------------------------------------------------------

def step_windows(instance, run_ids: list[str]) -> list[tuple[str, float, float]]:
    """(step key, start, end) of every step of the runs, from the Dagster event log."""
    return [window for run_id in run_ids for window in windows_in(instance.all_logs(run_id))]


def windows_in(logs) -> list[tuple[str, float, float]]:
    """(step key, start, end) of every step in one run's event log entries."""
    starts: dict[str, float] = {}
    windows = []
    for entry in logs:
        event = entry.dagster_event
        if event is None or not event.step_key:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = entry.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in starts:
            windows.append((event.step_key, starts[event.step_key], entry.timestamp))
    return windows


def step_of(windows, at: float) -> str:
    for key, start, end in windows:
        if start <= at <= end:
            return key
    return "(outside steps)"


def _spark_rest(spark, what: str) -> list[dict]:
    """A list from Spark's REST API on the local UI (empty without a UI)."""
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return []
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/{what}", timeout=10) as r:
        return json.load(r)


def _submitted_at(item: dict) -> float | None:
    submitted = item.get("submissionTime")
    if not submitted:
        return None
    return datetime.strptime(submitted.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def spark_stages(spark) -> list[dict]:
    """Completed stages, every job and every SQL execution from Spark's REST API (local UI), each
    with its submission time: a stage's input bytes, a job's tasks (less those it skipped, whose
    output it reused), an execution's seconds.
    The UI keeps the last 1,000 jobs and stages (spark.ui.retainedJobs/Stages): enough for an
    hour's runs, not for a whole rebuild's."""
    result = []
    for stage in _spark_rest(spark, "stages?status=complete"):
        at = _submitted_at(stage)
        if at is not None:
            result.append({"kind": "stage", "at": at, "input_bytes": stage.get("inputBytes", 0)})
    for job in _spark_rest(spark, "jobs"):
        at = _submitted_at(job)
        if at is not None:
            result.append({"kind": "job", "at": at, "input_bytes": 0,
                           "tasks": job.get("numTasks", 0) - job.get("numSkippedTasks", 0)})
    # The UI keeps the last 1,000 SQL executions (spark.sql.ui.retainedExecutions); the API
    # returns 20 unless asked for more.
    for query in _spark_rest(spark, "sql?details=false&length=1000"):
        at = _submitted_at(query)
        if at is not None:
            result.append({"kind": "query", "at": at, "input_bytes": 0, "seconds": query.get("duration", 0) / 1000})
    return result


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the intervals, overlaps counted once."""
    covered, reached = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reached:
            covered += end - max(start, reached)
            reached = end
    return covered


def per_step(windows, scans, stages, since: float) -> dict[str, dict]:
    """Seconds, Delta files/bytes planned, Spark input bytes, Spark's jobs, stages and tasks, and
    its SQL executions (queries) with the seconds they cover, per step. A query's seconds run
    from its submission to its end: planning, jobs and the transfer of its result; the rest of
    a step is the driver's own work (building plans, Delta logs and commits, Dagster's events)."""
    steps: dict[str, dict] = {}
    query_spans: dict[str, list[tuple[float, float]]] = {}

    def entry(key: str) -> dict:
        return steps.setdefault(key, {"seconds": 0.0, "files": 0, "file_bytes": 0, "spark_input_bytes": 0,
                                      "spark_jobs": 0, "spark_stages": 0, "spark_tasks": 0,
                                      "spark_queries": 0, "spark_query_seconds": 0.0})

    for key, start, end in windows:
        entry(key)["seconds"] += end - start
    for scan in scans:
        item = entry(step_of(windows, scan.at))
        item["files"] += scan.files
        item["file_bytes"] += scan.bytes
    for item in stages:
        if item["at"] < since:
            continue
        key = step_of(windows, item["at"])
        counts = entry(key)
        kind = item.get("kind", "stage")
        if kind == "stage":
            counts["spark_input_bytes"] += item["input_bytes"]
            counts["spark_stages"] += 1
        elif kind == "query":
            counts["spark_queries"] += 1
            query_spans.setdefault(key, []).append((item["at"], item["at"] + item["seconds"]))
        else:
            counts["spark_jobs"] += 1
            counts["spark_tasks"] += item["tasks"]
    for key, spans in query_spans.items():
        steps[key]["spark_query_seconds"] = _covered(spans)
    return steps


# -- Dagster's own time -----------------------------------------------------------------------

@contextmanager
def timing_event_writes(instance):
    """Yields {"events", "seconds"}: how many events the instance's event log stored inside the
    block and the seconds its storage took to write them (one at a time or in batches)."""
    storage = instance.event_log_storage
    spent = {"events": 0, "seconds": 0.0}

    def timed(write, count):
        def wrapper(events):
            started = time.perf_counter()
            try:
                return write(events)
            finally:
                spent["seconds"] += time.perf_counter() - started
                spent["events"] += count(events)
        return wrapper

    names = ("store_event", "store_event_batch")
    own = {name: vars(storage)[name] for name in names if name in vars(storage)}  # wrapped already
    storage.store_event = timed(storage.store_event, lambda _: 1)
    storage.store_event_batch = timed(storage.store_event_batch, len)
    try:
        yield spent
    finally:
        for name in names:  # as they were: the class's methods, or what wrapped them before
            if name in own:
                setattr(storage, name, own[name])
            else:
                delattr(storage, name)


def dagster_time(instance, runs, writes: dict) -> dict:
    """Where a run's seconds went outside its steps, summed over `runs` (runner.JobRun):
    `launch`: before the run's first event (the run created, its plan built) and after its last
    (the result gathered); `run_start`: from its first event to its first step (resources, the
    executor); `between_steps`: from its first step's start to its last step's end, less the
    steps' own seconds; `run_end`: from its last step's end to its last event; `steps`: the
    steps; `event_writes`: the seconds the event log's storage took over the whole of it (inside
    steps too), for `events` events."""
    figures = dict.fromkeys(("runs", "launch", "run_start", "between_steps", "run_end", "steps"), 0.0)
    for run in runs:
        logs = instance.all_logs(run.run_id)
        if not logs:
            continue
        first, last = logs[0].timestamp, logs[-1].timestamp
        windows = windows_in(logs)  # the logs in hand, not read again
        steps = sum(end - start for _, start, end in windows)
        first_step = min((start for _, start, _ in windows), default=last)
        last_step = max((end for _, _, end in windows), default=last)
        figures["runs"] += run.seconds
        figures["launch"] += run.seconds - (last - first)
        figures["run_start"] += first_step - first
        figures["between_steps"] += (last_step - first_step) - steps
        figures["run_end"] += last - last_step
        figures["steps"] += steps
    return {**figures, "event_writes": writes["seconds"], "events": writes["events"]}


# -- incremental hours and sensor ticks ----------------------------------------------------

def maintained(spark, warehouse: Path, now: datetime) -> dict:
    """The product's table maintenance of `warehouse` at `now`, as its daily schedule runs it
    between a rebuild and the hours after it: what it rewrote and how long it took."""
    from incremental_assets.operator.maintenance import maintain_tables
    from incremental_assets.settings import Settings
    from resources.tables.stores import table_store

    settings = Settings.load()
    started = time.perf_counter()
    results = maintain_tables(settings, table_store(spark, str(warehouse), settings.table_engine), now)
    return {"seconds": time.perf_counter() - started, "files": sum(r.files_compacted for r in results),
            "files_before": sum(r.files_before for r in results), "files_after": sum(r.files_after for r in results)}


def incremental_hours(spark, tables, pool: Path, source: Path, warehouse: Path, instance, history_days: int,
                      repeats: int) -> dict:
    """Maintain the warehouse as the night after its history would, then append one load hour at
    a time and time the run processing it; beside it, the plan's estimate of its hourly runs
    (`incremental-assets plan` just before)."""
    from incremental_assets.operator.plans import make_plan
    from incremental_assets.runner import run_until
    from incremental_assets.settings import Settings
    from resources.tables import recording_scans

    set_env(warehouse=warehouse, source_path=source)
    cut = at_hour(START + timedelta(days=history_days))
    maintenance = maintained(spark, warehouse, cut)
    say(f"  history {history_days} d: maintenance rewrote {maintenance['files']:,} files in "
        f"{maintenance['seconds']:.1f} s ({maintenance['files_before']:,} -> {maintenance['files_after']:,} files)")
    seconds, rows, steps_by_run, estimates, hourly, dagster = Figure(), [], [], [], [], []
    for k in range(repeats):
        rows.append(append_hour(tables, pool, source, cut + timedelta(hours=k)))
        estimates.append(make_plan(Settings.load(), cut + timedelta(hours=k + 1), instance=instance).estimate_seconds)
        since = time.time()
        with recording_scans() as scans, timing_event_writes(instance) as writes:
            started = time.perf_counter()
            report = run_until(cut + timedelta(hours=k + 1), instance=instance, echo=lambda _: None)
            seconds.add(time.perf_counter() - started)
        if not report.success or report.hours is None:
            raise SystemExit(f"incremental run after {history_days} days failed or did nothing: {report}")
        windows = step_windows(instance, [run.run_id for run in report.runs])
        steps_by_run.append(per_step(windows, scans, spark_stages(spark), since))
        hourly.append(sum(run.seconds for run in report.runs if run.job == "hourly_job"))
        dagster.append({**dagster_time(instance, report.runs, writes), "hour": seconds.values[-1]})
        say(f"  history {history_days} d, hour {k + 1}: {seconds.values[-1]:.1f} s, "
               f"{rows[-1]:,} new rows, runs: {', '.join(run.job for run in report.runs)}; hourly runs "
               f"{hourly[-1]:.1f} s, planned {estimates[-1] if estimates[-1] is None else round(estimates[-1], 1)} s")
    return {"seconds": seconds, "rows": rows, "steps": steps_by_run, "plan_estimates": estimates,
            "hourly_seconds": hourly, "dagster": dagster, "maintenance": maintenance}


def sensor_ticks(pool: Path, tables, source: Path, instance, after: datetime, repeats: int) -> dict:
    from incremental_assets.automation.hourly_sensor import hourly_run_request
    from incremental_assets.definitions import spark
    from resources.warehouse import WarehouseResource

    warehouse = WarehouseResource(pyspark=spark)  # settings (warehouse, source) as the environment has them now

    def tick(now: datetime) -> tuple[float, str]:
        started = time.perf_counter()
        result = hourly_run_request(warehouse, now=now, instance=instance)
        seconds = time.perf_counter() - started
        outcome = "run requested" if result.run_requests else f"skipped: {result.skip_reason.skip_message}"
        return seconds, outcome

    idle, busy = Figure(), Figure()
    for _ in range(repeats):
        seconds, idle_outcome = tick(after + timedelta(minutes=5))
        idle.add(seconds)
    append_hour(tables, pool, source, after)
    for _ in range(repeats):
        seconds, busy_outcome = tick(after + timedelta(hours=1, minutes=5))
        busy.add(seconds)
    return {"idle": idle, "idle_outcome": idle_outcome, "new_hour": busy, "new_hour_outcome": busy_outcome}


