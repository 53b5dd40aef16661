"""bench/RESULTS.md from the measurements: machine, versions, settings, figures, targets, and
each figure beside the previous run's (the raw figures of a run are kept beside its report,
bench/RESULTS.json, and are the next run's baseline).

    python -m bench.report RESULTS_JSON [--baseline EARLIER_JSON] [--out RESULTS.md]

renders a report again from a run's raw figures (e.g. with another baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from bench.targets import targets_section


def _command_line(args: dict[str, str]) -> str:
    """The options a run was started with that change what it measures, as typed."""
    shown = ("events", "days", "repeats", "rebuild_repeats", "small", "skip_cold", "dagster_storage", "engine",
             "connect_warmup_hours")
    return " ".join(f"--{k.replace('_', '-')}" if v == "True" else f"--{k.replace('_', '-')} {v}"
                    for k, v in args.items() if k in shown and v not in ("False", "None"))


def _span(figure, unit: str = "s", digits: int = 1) -> str:
    return (f"{figure.median:.{digits}f} {unit} [{min(figure.values):.{digits}f} .. "
            f"{max(figure.values):.{digits}f}]")


def _figures(value):
    """A results JSON value with its figures ({"median", "runs", ...}) as Figure objects again
    and the histories' day counts as integers."""
    from bench.measure import Figure

    if isinstance(value, list):
        return [_figures(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "runs" in value and "median" in value:
        return Figure(list(value["runs"]))
    return {int(k) if isinstance(k, str) and k.isdigit() else k: _figures(v) for k, v in value.items()}


def load_results(path: Path) -> dict:
    """The raw figures a run wrote (write_report's json_path)."""
    return _figures(json.loads(Path(path).read_text()))


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _machine() -> list[str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return [f"- cores: {os.cpu_count()} ({cpu}); memory: {mem_kb / 2**20:.0f} GiB; {platform.platform()}",
            f"- Python {platform.python_version()}; {java[0] if java else 'java: unknown'}",
            "- " + ", ".join(f"{p} {version(p)}" for p in
                             ("pyspark", "dagster", "deltalake", "pyarrow", "duckdb"))]


# Steps that replaced several steps of earlier code (its asset or check steps made one): a
# baseline's seconds for them are the sum of the steps they replaced.
MERGED_STEPS = {
    "hourly_assets": ("base_events", "sessions_lifecycle_manifest", "quarantined_sessions", "filtered_events"),
    "event_id_unique": ("base_events_event_id_unique", "filtered_events_event_id_unique"),
}


def _merged(steps: dict) -> dict:
    """One run's steps with the steps each MERGED_STEPS entry replaced summed into it (a run
    that already has the merged step is left as it is)."""
    steps = dict(steps)
    for merged, parts in MERGED_STEPS.items():
        if merged in steps:
            continue
        found = [steps.pop(part) for part in parts if part in steps]
        if found:
            steps[merged] = {m: sum(f.get(m, 0) for f in found) for m in found[0]}
    return steps


def _step_seconds(runs: list[dict], key: str) -> float:
    return statistics.median(steps.get(key, {}).get("seconds", 0) for steps in runs)


def _steps_table(runs: list[dict], before: list[dict] | None = None) -> list[str]:
    """Per step: median over the runs of seconds, files, bytes planned, Spark input bytes, Spark's
    jobs, stages and tasks, its queries and the seconds they cover; with
    `before` (the baseline's runs of the same figure), its seconds too ("-": no such step then;
    a step that replaced several: their sum, MERGED_STEPS)."""
    if before is not None:
        before = [_merged(steps) for steps in before]
    keys = sorted({k for steps in runs for k in steps} | {k for steps in before or [] for k in steps})
    lines = ["| step | seconds | Delta files | bytes in those files | Spark input bytes | Spark jobs | stages "
             "| tasks | Spark queries | seconds in them |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    if before is not None:
        lines = [lines[0].replace("| seconds |", "| seconds before | seconds |"), lines[1] + "---:|"]
    # Each group "-" where a run did not measure it (runs from before it was counted).
    counted_groups = (("spark_jobs", "spark_stages", "spark_tasks"), ("spark_queries", "spark_query_seconds"))
    counts = tuple(m for group in counted_groups for m in group)

    def counted(values: dict, step_figures: list[dict]) -> str:
        """The groups' values; "-" for a group some of `step_figures` lack."""
        return " | ".join((f"{values[m]:.2f}" if m.endswith("seconds") else f"{values[m]:.0f}")
                          if all(group[0] in figures for figures in step_figures) else "-"
                          for group in counted_groups for m in group)

    totals = {"files": [], "file_bytes": [], "spark_input_bytes": [], **{m: [] for m in counts}}
    for key in keys:
        ran = any(key in steps for steps in runs)
        values = {m: statistics.median(steps.get(key, {}).get(m, 0) for steps in runs)
                  for m in ("seconds", "files", "file_bytes", "spark_input_bytes", *counts)}
        earlier = "" if before is None else (
            f"{_step_seconds(before, key):.2f} | " if any(key in steps for steps in before) else "- | ")
        lines.append(f"| {key} | {earlier}{values['seconds']:.2f} | {values['files']:.0f} | "
                     f"{_mb(values['file_bytes'])} | {_mb(values['spark_input_bytes'])} | "
                     f"{counted(values, [steps[key] for steps in runs if key in steps])} |"
                     if ran else f"| {key} | {earlier}- | | | | | | | | |")
    for metric in totals:
        totals[metric] = [sum(s.get(metric, 0) for s in steps.values()) for steps in runs]
    every_step = [figures for steps in runs for figures in steps.values()]
    lines.append(f"| **all** | {'| ' if before is not None else ''}| {statistics.median(totals['files']):.0f} | "
                 f"{_mb(statistics.median(totals['file_bytes']))} | "
                 f"{_mb(statistics.median(totals['spark_input_bytes']))} | "
                 f"{counted({m: statistics.median(totals[m]) for m in counts}, every_step)} |")
    return lines


def _plan_estimates(incremental: dict) -> list[str]:
    """The plan's estimate of each hour's hourly runs beside their measured seconds."""
    if not incremental.get("plan_estimates"):
        return []
    pairs = ", ".join(f"{'none' if e is None else f'{e:.1f}'} vs {s:.1f} s"
                      for e, s in zip(incremental["plan_estimates"], incremental["hourly_seconds"]))
    return [f"- hourly runs, the plan's estimate vs measured (`incremental-assets plan` just before): {pairs}"]


def _dagster_time(incremental: dict) -> list[str]:
    """Where an hour's seconds went besides its steps: Dagster's own time per run phase, the
    planning between runs, and the event log's writes (medians over the hours)."""
    hours = incremental.get("dagster")
    if not hours:
        return []  # a report from before this was measured

    def median(key: str) -> float:
        return statistics.median(hour[key] for hour in hours)

    rows = [("the hour (`run --until`)", median("hour")),
            ("its runs' steps (the table above)", median("steps")),
            ("Dagster: before a run's first event and after its last (run created, result gathered)",
             median("launch")),
            ("Dagster: from a run's first event to its first step (resources, executor)", median("run_start")),
            ("Dagster: between steps", median("between_steps")),
            ("Dagster: from the last step to the run's end", median("run_end")),
            ("planning and Dagster queries outside the runs", statistics.median(h["hour"] - h["runs"] for h in hours)),
            (f"of all the above, writing events to Dagster's event log ({median('events'):.0f} events)",
             median("event_writes"))]
    return ["Dagster's own time in the hour (medians; the runs' phases summed over the hour's runs):", "",
            "| where | seconds |", "|---|---:|", *(f"| {where} | {seconds:.2f} |" for where, seconds in rows), ""]


def _maintenance(incremental: dict) -> list[str]:
    """The product's table maintenance run before a history's hours (absent from older reports)."""
    done = incremental.get("maintenance")
    if not done:
        return []
    return [f"- before the hours, the daily table maintenance (as its schedule runs it the night after the history): "
            f"{done['files']:,} files compacted in {done['seconds']:.1f} s ({done['files_before']:,} -> "
            f"{done['files_after']:,} files in all)"]


def _sparse_history_section(history: dict, steps_before: list[dict] | None) -> list[str]:
    """A sparse history's backfill, its new hours by step, and its sensor ticks."""
    return [f"### {history['days']} days of sparse history",
            f"{history['source_rows']:,} rows loaded over {history['days']} days, backfilled in "
            f"{history['backfill_seconds']:.0f} s ({history['manifest_records']:,} processing-manifest records "
            f"after the hours below); then load hours of the same volume as above arrive.", "",
            *_maintenance(history["incremental"]),
            f"- run: {_span(history['incremental']['seconds'])}; new rows per hour: "
            f"{', '.join(f'{r:,}' for r in history['incremental']['rows'])}", "",
            *_steps_table(history["incremental"]["steps"], steps_before), "",
            *_dagster_time(history["incremental"]),
            f"- sensor tick: a new closed hour {_span(history['sensor']['new_hour'], digits=2)}; nothing new "
            f"{_span(history['sensor']['idle'], digits=2)}", ""]


def written_now() -> str:
    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"


def _headline(results: dict) -> dict[str, object]:
    """The figures a run is summed up by (name -> Figure), those it measured."""
    figures: dict[str, object] = {"warm full rebuild": results.get("full_warm")}
    for history, incremental in sorted(results.get("incremental", {}).items()):
        figures[f"warm incremental hour, {history} days of history"] = incremental["seconds"]
    for sparse in (results.get("short_sparse_history"), results.get("long_history")):
        if sparse is not None:
            history = f"{sparse['days']} days of sparse history"
            figures[f"warm incremental hour, {history}"] = sparse["incremental"]["seconds"]
            figures[f"sensor tick (new hour), {history}"] = sparse["sensor"]["new_hour"]
    figures["cold CLI hour"] = results.get("cold_hour")
    figures["cold hour through Spark Connect"] = results.get("cold_hour_connect")
    figures["sensor tick (new hour)"] = results.get("sensor", {}).get("new_hour")
    figures["cold full rebuild"] = results.get("full_cold")
    figures["DuckDB writing the same tables"] = results.get("duckdb", {}).get("same_tables", {}).get("seconds")
    return {name: figure for name, figure in figures.items() if figure is not None}


def before_and_after(results: dict, baseline: dict) -> list[str]:
    """The headline figures of both runs side by side (a figure only one run has shows "-")."""
    after, before = _headline(results), _headline(baseline)
    size = [(run.get("args", {}).get("events"), run.get("args", {}).get("days")) for run in (results, baseline)]
    lines = ["## Before and after",
             *(["**The baseline measured another size: its figures are not comparable with these.**"]
               if size[0] != size[1] else []),
             f"Before: the run of {baseline.get('written', 'an earlier date')} "
             f"({baseline.get('args', {}).get('events', '?')} events over {baseline.get('args', {}).get('days', '?')} "
             f"days{'' if 'commit' not in baseline else ', commit ' + baseline['commit']}); medians.",
             *[f"Its {line[2:]}" for line in baseline.get("machine", []) if line.startswith("- pipeline settings")],
             "",
             "| figure | before | after | after / before |", "|---|---:|---:|---:|"]
    for name in [*after, *(n for n in before if n not in after)]:
        old, new = before.get(name), after.get(name)
        digits = 2 if "tick" in name else 1
        ratio = f"{new.median / old.median:.2f}x" if old is not None and new is not None and old.median else ""
        lines.append(f"| {name} | {f'{old.median:.{digits}f} s' if old is not None else '-'} | "
                     f"{f'{new.median:.{digits}f} s' if new is not None else '-'} | {ratio} |")
    if "seconds_total" in baseline:
        lines.append(f"| whole benchmark | {baseline['seconds_total'] / 60:.0f} min | "
                     f"{results['seconds_total'] / 60:.0f} min | |")
    timed_after_warmup = ["cold_hour_connect_warmup" in run for run in (results, baseline)]
    if "cold_hour_connect" in results and "cold_hour_connect" in baseline and not all(timed_after_warmup):
        lines += ["", "The cold hour through Spark Connect is not the same measure in both runs: "
                  + ("this run's" if timed_after_warmup[0] else "the baseline's") + " is timed after the server's "
                  "first hours, the other's includes a new server's first hours (its JVM compiling)."]
    merged = "; ".join(f"{step}: {' + '.join(parts)}" for step, parts in MERGED_STEPS.items())
    return lines + ["", "Each step table below gives the baseline's seconds per step beside this run's. Where one "
                    f"step replaced several of the baseline's, its seconds before are their sum ({merged}).", ""]


def write_report(results: dict, out: Path, json_path: Path | None = None, baseline: dict | None = None,
                 full_run: dict | None = None) -> None:
    """RESULTS.md from `results` (and its raw figures at `json_path`); with `baseline`, an
    earlier run's results, each figure and step beside the earlier one; with `full_run`, the
    last full-size run's results, its targets beside those this run leaves out."""
    from incremental_assets.settings import Settings
    from resources.spark import spark_config_from_env

    args = results["args"]
    days, repeats = int(args["days"]), int(args["repeats"])
    rebuild_repeats = int(args.get("rebuild_repeats", repeats))
    rebuilds = ("" if rebuild_repeats == repeats
                else f"; the full rebuilds: {rebuild_repeats} run{'s' * (rebuild_repeats > 1)}")
    results.setdefault("written", written_now())
    events = results["source_rows"]
    if "machine" not in results:  # kept with the figures: a report rendered again shows the run's own
        spark_conf, settings = spark_config_from_env(), Settings.load()
        results["machine"] = [
            *_machine(),
            f"- Spark: master {spark_conf.get('spark.master')}, driver memory {spark_conf.get('spark.driver.memory')}, "
            f"shuffle partitions {spark_conf.get('spark.sql.shuffle.partitions')}, AQE "
            f"{spark_conf.get('spark.sql.adaptive.enabled')}; table engine {settings.table_engine}",
            f"- Dagster's runs and events: {args.get('dagster_storage', 'sqlite')}",
            f"- pipeline settings: days_late_allowed {settings.days_late_allowed}, max_session_days "
            f"{settings.max_session_days}, session_lookback_days {settings.session_lookback_days}, reprocess_days "
            f"{settings.reprocess_days}, min_rows_to_process {settings.min_rows_to_process}, lookback_window_hours "
            f"{settings.lookback_window_hours}, run_type {settings.run_type}"]

    def before(*path):
        """The baseline's value at `path` (None without a baseline or without that figure)."""
        value = baseline
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    lines = [
        "# Benchmark results",
        "",
        f"Written by `python -m bench` ({_command_line(args)}) "
        f"on {results['written']}{' at commit ' + results['commit'] if results.get('commit') else ''}; "
        f"the whole benchmark took "
        f"{results['seconds_total'] / 60:.0f} min{'' if results.get('complete') else ' (so far: not finished)'}. "
        f"Every figure: median [min .. max] of {repeats} runs{rebuilds}.",
        "",
        "## Machine, versions, settings",
        *results["machine"],
        f"- source: {events:,} rows loaded over {days} days (sample generator, seed 42), "
        f"then one load hour at a time appended",
        "",
        *targets_section(results, full_run),
        *(before_and_after(results, baseline) if baseline else []),
        "## Full rebuild (backfill of every asset into an empty warehouse)",
        f"- warm (Spark session up, in-process runs): {_span(results['full_warm'])}, "
        f"{events / results['full_warm'].median:,.0f} events/s",
    ]
    warm_steps = ["", "Warm rebuild by step (Dagster's step times; the rest is planning and run start-up):", "",
                  *_steps_table(results["full_warm_steps"], before("full_warm_steps"))]
    if "full_cold" in results:
        lines.append(f"- cold (a new `incremental-assets backfill` process): {_span(results['full_cold'])}, "
                     f"{events / results['full_cold'].median:,.0f} events/s")
    lines += warm_steps
    lines += ["", "## Incremental run for one new load hour",
              "`run --until` at the end of the new hour: the hourly run, the late-day plan, daily_aggregates "
              "for the days it picks, attributes. Bytes: the sizes of the Delta files each read was planned "
              "over after partition and statistics pruning (Spark reads fewer: only the needed columns); "
              "Spark input bytes: the `inputBytes` of Spark's stages in the step.", ""]
    for history, incremental in sorted(results.get("incremental", {}).items()):
        lines += [f"### {history} days of history",
                  f"- run: {_span(incremental['seconds'])}; new rows per hour: "
                  f"{', '.join(f'{r:,}' for r in incremental['rows'])}",
                  *_maintenance(incremental), *_plan_estimates(incremental), "",
                  *_steps_table(incremental["steps"], before("incremental", history, "steps")), "",
                  *_dagster_time(incremental)]
    if "cold_hour" in results:
        lines += [f"- cold: a new `incremental-assets run --until` process for one more new hour at {days} days "
                  f"(what a daemon-launched run pays, Spark start included): {_span(results['cold_hour'])}", ""]
    if "cold_hour_connect" in results:
        lines += [f"- cold through Spark Connect: the same, each process a client of one long-lived Spark Connect "
                  f"server (local mode, same settings; no JVM start in the run): {_span(results['cold_hour_connect'])}"]
        if "cold_hour_connect_warmup" in results:
            first = results["cold_hour_connect_warmup"].values
            lines += [f"  - after the server's first {len(first)} hours, not in the figure (its JVM compiling what the "
                      f"hours run; what the hours after a restart of the server cost): "
                      f"{', '.join(f'{v:.1f}' for v in first)} s"]
        lines += [""]
    for key in ("short_sparse_history", "long_history"):  # shorter history first, as in the headline table
        if key in results:
            lines += _sparse_history_section(results[key], before(key, "incremental", "steps"))
    maintenance = results.get("maintenance")
    if maintenance:
        lines += ["## Table maintenance after many hourly writes",
                  f"A table written by {maintenance['hours']} hourly `replace_range` commits (one load hour of "
                  f"base_events rows each), read before and after `maintenance` (compaction and vacuum):", "",
                  "| | files | full read | read of the last day |", "|---|---:|---:|---:|",
                  f"| before | {maintenance['files_before']} | {_span(maintenance['read_before'], digits=2)} | "
                  f"{_span(maintenance['day_before'], digits=2)} |",
                  f"| after | {maintenance['files_after']} | {_span(maintenance['read_after'], digits=2)} | "
                  f"{_span(maintenance['day_after'], digits=2)} |",
                  "", f"Maintenance itself: {maintenance['seconds']:.1f} s.", ""]
    sensor = results.get("sensor")
    lines += [] if sensor is None else ["## Sensor tick (hourly_load_sensor, at the end of the history)",
              f"- a new closed hour in the source: {_span(sensor['new_hour'], digits=2)} "
              f"({sensor['new_hour_outcome']})",
              f"- nothing new: {_span(sensor['idle'], digits=2)} ({sensor['idle_outcome']})", ""]
    lines += _duckdb_section(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    if json_path is not None:
        json_path.write_text(json.dumps(results, default=lambda o: o.as_dict() if hasattr(o, "as_dict") else str(o),
                                        indent=1))


def _duckdb_section(results: dict) -> list[str]:
    """DuckDB's two figures (final tables only; every table written) and how its tables compare."""
    duck = results.get("duckdb")
    if duck is None:
        return []
    warm = results["full_warm"].median
    same = not any(duck["differences"].values())
    lines = ["## DuckDB from the same source files",
             f"- DuckDB {version('duckdb')}, daily_aggregates and attributes only, in memory: "
             f"{_span(duck['seconds'])}; our warm full rebuild / DuckDB = {warm / duck['seconds'].median:.1f}x",
             f"  - rows: daily_aggregates {duck['rows']['daily_aggregates']:,}, attributes "
             f"{duck['rows']['attributes']:,}; same rows as ours: {'yes' if same else '**no**'}"]
    for table, differences in duck["differences"].items():
        lines += [f"    - {table}: {d}" for d in differences[:10]]
    written = duck.get("same_tables")
    if written is None:
        return lines
    tables = written["tables"]
    same = not any(t["differences"] for t in tables.values())
    lines += [f"- DuckDB producing the same tables as a full rebuild, written as Parquet: {_span(written['seconds'])}; "
              f"our warm full rebuild / DuckDB = {warm / written['seconds'].median:.1f}x "
              f"(final tables only: {warm / duck['seconds'].median:.1f}x); same tables as ours: "
              f"{'yes' if same else '**no**'}", "",
              "| table | rows (ours) | rows (DuckDB) | compared | differences |", "|---|---:|---:|---|---|"]
    for table, result in tables.items():
        rows = result["rows"]
        lines.append(f"| {table} | {rows.get('ours', 0):,} | {written['rows'].get(table, 0):,} | {result['compared']} "
                     f"| {len(result['differences']) or 'none'} |")
    for table, result in tables.items():
        lines += [f"- {table}: {d}" for d in result["differences"][:10]]
    return lines + ["", "DuckDB has no xxhash64, Spark's hash of a row: event_copies.copy_hash and "
                    "filtered_events.row_digest hold DuckDB's own hash (not compared), and of two copies of an "
                    "event loaded at the same instant with the same collector_tstamp but different contents, "
                    "DuckDB may keep the other one (such a case would show above as a difference in "
                    "base_events).", ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Render a benchmark report from a run's raw figures.")
    parser.add_argument("results", type=Path, help="a run's raw figures (bench/RESULTS.json)")
    parser.add_argument("--baseline", type=Path, help="an earlier run's raw figures, shown beside these")
    parser.add_argument("--out", type=Path, help="where to write the report (default: RESULTS.md beside results)")
    parser.add_argument("--full-run", type=Path, help="the last full-size run's raw figures (bench/RESULTS.json): "
                                                      "their targets beside those a smaller run leaves out")
    args = parser.parse_args(argv)
    results = load_results(args.results)
    write_report(results, args.out or args.results.with_suffix(".md"),
                 baseline=load_results(args.baseline) if args.baseline else None,
                 full_run=load_results(args.full_run) if args.full_run else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
