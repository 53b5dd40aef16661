"""The benchmark's report: a run's raw figures are read back as they were written, and an
earlier run's figures (the baseline) are shown beside each figure and step."""

from bench.measure import Figure
from bench.report import before_and_after, load_results, write_report

MACHINE = ["- cores: 2 (test)", "- pipeline settings: lookback_window_hours 0.0"]


def _run(rebuild: float, hour: float, steps: dict[str, float], events: str = "300000") -> dict:
    step_figures = {name: {"seconds": seconds, "files": 1, "file_bytes": 1e6, "spark_input_bytes": 2e6}
                    for name, seconds in steps.items()}
    return {"args": {"events": events, "days": "10", "repeats": "3", "small": "True"}, "machine": MACHINE,
            "written": "2026-11-24 12:00 UTC", "commit": "abc1234", "source_rows": 300_000,
            "seconds_total": 600.0, "full_warm": Figure([rebuild * 0.9, rebuild, rebuild * 1.2]),
            "full_warm_steps": [step_figures] * 3,
            "incremental": {10: {"seconds": Figure([hour, hour, hour]), "rows": [1000, 1000, 1000],
                                 "steps": [step_figures] * 3}}}


def test_raw_figures_read_back_are_the_figures_written(tmp_path):
    results = _run(100.0, 20.0, {"hourly_assets": 9.0})
    write_report(results, tmp_path / "RESULTS.md", tmp_path / "RESULTS.json")

    again = load_results(tmp_path / "RESULTS.json")

    assert again["full_warm"].values == results["full_warm"].values
    assert again["incremental"][10]["seconds"].median == 20.0  # history keys are day counts again
    assert again["incremental"][10]["steps"][0]["hourly_assets"]["seconds"] == 9.0
    assert again["machine"] == MACHINE and again["commit"] == "abc1234"


def test_each_figure_and_step_is_shown_beside_the_baselines(tmp_path):
    before = _run(100.0, 20.0, {"no_stale_locks": 0.5, "attributes": 2.0})
    after = _run(80.0, 15.0, {"hourly_assets": 9.0, "attributes": 1.5})
    out = tmp_path / "RESULTS.md"
    write_report(after, out, baseline=before)
    text = out.read_text()

    assert "| warm full rebuild | 100.0 s | 80.0 s | 0.80x |" in text
    assert "| warm incremental hour, 10 days of history | 20.0 s | 15.0 s | 0.75x |" in text
    assert "| step | seconds before | seconds | Delta files | bytes in those files | Spark input bytes |" in text
    assert "| attributes | 2.00 | 1.50 | 1 | 1.0 MB | 2.0 MB |" in text
    assert "| hourly_assets | - | 9.00 | 1 | 1.0 MB | 2.0 MB |" in text  # a new step
    assert "| no_stale_locks | 0.50 | - | | | |" in text  # a step that no longer runs
    assert "not comparable" not in text


def test_a_step_that_replaced_several_is_shown_beside_their_sum(tmp_path):
    before = _run(100.0, 20.0, {"base_events": 6.0, "filtered_events": 3.5, "sessions_lifecycle_manifest": 1.0,
                                "base_events_event_id_unique": 0.75, "attributes": 2.0})
    after = _run(80.0, 15.0, {"hourly_assets": 9.0, "event_id_unique": 1.25, "attributes": 1.5})
    out = tmp_path / "RESULTS.md"
    write_report(after, out, baseline=before)
    text = out.read_text()

    assert "| hourly_assets | 10.50 | 9.00 | 1 | 1.0 MB | 2.0 MB |" in text
    assert "| event_id_unique | 0.75 | 1.25 | 1 | 1.0 MB | 2.0 MB |" in text
    assert "| base_events |" not in text and "| filtered_events |" not in text
    assert "| attributes | 2.00 | 1.50 |" in text


def test_a_baseline_of_another_size_is_flagged_and_a_figure_only_one_run_has_shows_a_dash():
    before = _run(100.0, 20.0, {}, events="10000000")
    before["cold_hour"] = Figure([50.0, 60.0, 70.0])
    lines = before_and_after(_run(80.0, 15.0, {}), before)

    assert any("another size" in line for line in lines)
    assert "| cold CLI hour | 60.0 s | - |  |" in lines


def _sparse(days: int, hour: float, rows: int) -> dict:
    steps = {"hourly_assets": {"seconds": hour, "files": 1, "file_bytes": 1e6, "spark_input_bytes": 2e6}}
    return {"days": days, "source_rows": rows, "backfill_seconds": 60.0, "manifest_records": 100,
            "incremental": {"seconds": Figure([hour, hour, hour]), "rows": [900, 900, 900], "steps": [steps] * 3},
            "sensor": {"new_hour": Figure([0.2, 0.2, 0.2]), "idle": Figure([0.1, 0.1, 0.1])}}


def test_both_sparse_histories_have_a_section_and_read_back(tmp_path):
    results = {**_run(100.0, 20.0, {}), "long_history": _sparse(300, 12.0, 30_000),
               "short_sparse_history": _sparse(10, 11.0, 1_000)}
    write_report(results, tmp_path / "RESULTS.md", tmp_path / "RESULTS.json")
    text = (tmp_path / "RESULTS.md").read_text()

    assert "### 300 days of sparse history" in text and "### 10 days of sparse history" in text
    assert "| incremental hour at 300 d vs 10 d of the same sparse history: time within 1.1x | 1.09x | yes |" in text
    again = load_results(tmp_path / "RESULTS.json")
    assert again["short_sparse_history"]["incremental"]["seconds"].median == 11.0


def test_the_maintenance_before_a_historys_hours_is_reported_where_it_ran(tmp_path):
    results = {**_run(100.0, 20.0, {}), "long_history": _sparse(300, 12.0, 30_000)}
    results["incremental"][10]["maintenance"] = {"seconds": 14.2, "files": 1_203, "files_before": 1_350,
                                                 "files_after": 190}
    results["long_history"]["incremental"]["maintenance"] = {"seconds": 3.0, "files": 12, "files_before": 900,
                                                             "files_after": 890}
    write_report(results, tmp_path / "RESULTS.md", tmp_path / "RESULTS.json")
    text = (tmp_path / "RESULTS.md").read_text()

    ten_days = text[text.index("### 10 days of history"):text.index("### 300 days of sparse history")]
    assert "1,203 files compacted in 14.2 s (1,350 -> 190 files in all)" in ten_days
    assert "12 files compacted in 3.0 s (900 -> 890 files in all)" in text[text.index("### 300 days of sparse"):]
    assert load_results(tmp_path / "RESULTS.json")["incremental"][10]["maintenance"]["files"] == 1_203


def test_issue_43s_targets_are_reported_with_their_limits(tmp_path):
    small = _run(100.0, 20.0, {"hourly_assets": 15.0, "attributes": 1.5})
    long, short = _sparse(300, 12.0, 30_000), _sparse(10, 10.0, 1_000)
    for steps in long["incremental"]["steps"]:
        steps["attributes"] = {"seconds": 3.0, "files": 300, "file_bytes": 1e6, "spark_input_bytes": 2e6}
    write_report({**small, "long_history": long, "short_sparse_history": short}, tmp_path / "small.md")
    text = (tmp_path / "small.md").read_text()
    assert "| attributes step at most 10% of a warm hour at 10 d of history | 7.5% | yes |" in text
    assert "| attributes step at most 10% of a warm hour at 300 d of sparse history | 25.0% | **no** |" in text
    assert "| incremental hour at 300 d vs 10 d of the same sparse history: time within 1.1x | 1.20x | **no** |" in text
    assert "warm full rebuild at most 450 s |" not in text  # a small run: named among those not measured
    assert "warm full rebuild at most 450 s): `make bench`" in text

    full = {**_run(440.0, 20.0, {"hourly_assets": 15.0}), "source_rows": 10_000_000}
    write_report(full, tmp_path / "full.md")
    text = (tmp_path / "full.md").read_text()
    assert "| warm full rebuild at most 450 s | 440 s | yes |" in text
    assert "| attributes step at most" not in text  # no attributes step measured: no figure made up


def test_spark_jobs_stages_and_tasks_are_counted_per_step_and_shown(tmp_path):
    from bench.measure import per_step

    windows = [("hourly_assets", 10.0, 20.0), ("attributes", 21.0, 23.0)]
    spark_work = [{"kind": "job", "at": 11.0, "input_bytes": 0, "tasks": 4},
                  {"kind": "stage", "at": 11.0, "input_bytes": 1e6},
                  {"kind": "stage", "at": 11.5, "input_bytes": 1e6},
                  {"kind": "job", "at": 12.0, "input_bytes": 0, "tasks": 2},
                  {"kind": "stage", "at": 12.0, "input_bytes": 0},
                  {"kind": "job", "at": 22.0, "input_bytes": 0, "tasks": 1},
                  {"kind": "job", "at": 5.0, "input_bytes": 0, "tasks": 9}]  # before the runs: not theirs
    steps = per_step(windows, [], spark_work, since=9.0)
    assert {k: (v["spark_jobs"], v["spark_stages"], v["spark_tasks"]) for k, v in steps.items()} == {
        "hourly_assets": (2, 3, 6), "attributes": (1, 0, 1)}

    results = _run(100.0, 20.0, {})
    results["incremental"][10]["steps"] = [steps] * 3
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| hourly_assets | 10.00 | 0 | 0.0 MB | 2.0 MB | 2 | 3 | 6 |" in text
    assert "| **all** | | 0 | 0.0 MB | 2.0 MB | 3 | 3 | 7 |" in text


def test_spark_queries_are_counted_per_step_with_the_seconds_they_cover_and_older_runs_show_a_dash(tmp_path):
    from bench.measure import per_step

    windows = [("hourly_assets", 10.0, 20.0), ("attributes", 21.0, 23.0)]
    queries = [{"kind": "query", "at": 11.0, "input_bytes": 0, "seconds": 2.0},
               {"kind": "query", "at": 12.0, "input_bytes": 0, "seconds": 0.5},  # inside the first: counted once
               {"kind": "query", "at": 14.0, "input_bytes": 0, "seconds": 1.5},
               {"kind": "query", "at": 22.0, "input_bytes": 0, "seconds": 0.25},
               {"kind": "query", "at": 5.0, "input_bytes": 0, "seconds": 3.0}]  # before the runs
    steps = per_step(windows, [], queries, since=9.0)
    assert {k: (v["spark_queries"], v["spark_query_seconds"]) for k, v in steps.items()} == {
        "hourly_assets": (3, 3.5), "attributes": (1, 0.25)}

    results = _run(100.0, 20.0, {})
    results["incremental"][10]["steps"] = [steps] * 3
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| hourly_assets | 10.00 | 0 | 0.0 MB | 0.0 MB | 0 | 0 | 0 | 3 | 3.50 |" in text

    older = {k: {m: v for m, v in figures.items() if not m.startswith("spark_quer")} for k, figures in steps.items()}
    results["incremental"][10]["steps"] = [older] * 3
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| hourly_assets | 10.00 | 0 | 0.0 MB | 0.0 MB | 0 | 0 | 0 | - | - |" in text
    assert "| **all** | | 0 | 0.0 MB | 0.0 MB | 0 | 0 | 0 | - | - |" in text


def _entry(at: float, kind: str | None = None, step: str | None = None):
    from types import SimpleNamespace

    event = None if kind is None else SimpleNamespace(event_type_value=kind, step_key=step)
    return SimpleNamespace(timestamp=at, dagster_event=event)


def test_dagster_time_splits_each_run_into_launch_start_steps_gaps_and_end_and_times_event_writes(tmp_path):
    from types import SimpleNamespace

    from bench.measure import dagster_time, timing_event_writes

    class Storage:
        def store_event(self, event):
            return event

        def store_event_batch(self, events):
            return events

    logs = {"r1": [_entry(100.0, "PIPELINE_START"), _entry(100.5, "STEP_START", "hourly_assets"),
                   _entry(104.5, "STEP_SUCCESS", "hourly_assets"), _entry(104.75, "STEP_START", "check"),
                   _entry(105.0, "STEP_SUCCESS", "check"), _entry(105.5, "PIPELINE_SUCCESS")],
            "r2": [_entry(200.0, "PIPELINE_START"), _entry(200.25, "STEP_START", "attributes"),
                   _entry(201.25, "STEP_SUCCESS", "attributes"), _entry(201.5, "PIPELINE_SUCCESS")]}
    instance = SimpleNamespace(event_log_storage=Storage(), all_logs=lambda run_id: logs[run_id])
    runs = [SimpleNamespace(run_id="r1", seconds=6.0), SimpleNamespace(run_id="r2", seconds=2.0)]

    with timing_event_writes(instance) as writes:
        instance.event_log_storage.store_event("one")
        instance.event_log_storage.store_event_batch(["two", "three"])
    figures = dagster_time(instance, runs, writes)

    assert figures["events"] == 3 and figures["event_writes"] >= 0
    assert {k: figures[k] for k in ("runs", "steps", "launch", "run_start", "between_steps", "run_end")} == {
        "runs": 8.0, "steps": 5.25, "launch": 0.5 + 0.5, "run_start": 0.5 + 0.25, "between_steps": 0.25,
        "run_end": 0.5 + 0.25}
    assert "store_event" not in vars(instance.event_log_storage)  # the storage's own methods again

    results = _run(100.0, 20.0, {"hourly_assets": 4.0})
    results["incremental"][10]["dagster"] = [{**figures, "hour": 9.0}] * 3
    write_report(results, tmp_path / "RESULTS.md", tmp_path / "RESULTS.json")
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| Dagster: between steps | 0.25 |" in text
    assert "| planning and Dagster queries outside the runs | 1.00 |" in text
    assert "writing events to Dagster's event log (3 events)" in text
    assert load_results(tmp_path / "RESULTS.json")["incremental"][10]["dagster"][0]["run_end"] == 0.75


def test_the_connect_servers_first_hours_are_shown_apart_from_its_figure(tmp_path):
    run = {**_run(100.0, 20.0, {"hourly_assets": 15.0}), "cold_hour_connect": Figure([30.0, 31.0, 29.0]),
           "cold_hour_connect_warmup": Figure([62.0, 47.0, 39.0, 41.0, 33.0])}
    write_report(run, tmp_path / "r.md", tmp_path / "r.json")
    text = (tmp_path / "r.md").read_text()
    assert "through a long-lived Spark Connect server, at most 20 s | 30.0 s | **no** |" in text
    assert "after the server's first 5 hours, not in the figure" in text
    assert "62.0, 47.0, 39.0, 41.0, 33.0 s" in text  # in the order they ran
    assert load_results(tmp_path / "r.json")["cold_hour_connect_warmup"].values == [62.0, 47.0, 39.0, 41.0, 33.0]
    assert "not the same measure" not in text  # no baseline

    earlier = {**_run(100.0, 20.0, {"hourly_assets": 15.0}), "cold_hour_connect": Figure([45.0, 41.0, 61.0])}
    compared = "\n".join(before_and_after(run, earlier))
    assert "| cold hour through Spark Connect | 45.0 s | 30.0 s | 0.67x |" in compared
    assert "not the same measure in both runs: this run's is timed after the server's first hours" in compared
    warmed_earlier = {**earlier, "cold_hour_connect_warmup": Figure([70.0])}
    assert "not the same measure" not in "\n".join(before_and_after(run, warmed_earlier))
