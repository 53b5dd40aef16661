"""The progress display of a long command: plain lines with the figures of each finished run
when stdout is not a terminal, a live bar per step on one; the estimate from the hourly step's
recorded cost, or from the command's own runs without one. Driven by the runner's observer
events and a fake clock: no Spark, no wall clock."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from incremental_assets.planning.estimates import StepCost
from incremental_assets.progress_display import LiveDisplay, PlainDisplay, RunTally, progress_display
from incremental_assets.run_events import ATTRIBUTES_STEP, DAILY_STEP, HOURLY_STEP, JobRun

# 10 s a run + 1 s a load hour: 24 hours left in one run are 34 s.
COST = StepCost(fixed_seconds=10.0, seconds_per_hour=1.0, seconds_per_row=0.0, rows_per_hour=0.0, steps=5)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def backfill_of_three_ranges(display, clock: FakeClock) -> None:
    """What the runner tells its observer when it applies a plan: three hourly runs of 24 load
    hours, one daily run of 3 event days, one attributes run; each run's own lines echoed."""
    display.applying("p-1")
    display.planned(HOURLY_STEP, 72, 3)
    for number, rows in enumerate((1_000, 2_500, 500), 1):
        display.started(HOURLY_STEP, (f"2026-01-0{number}-00:00", f"2026-01-0{number}-23:00"))
        clock.now += 40
        display.echo(f"  hourly_job run {number}: ok")
        display.finished(HOURLY_STEP, 24, JobRun("hourly_job", f"r{number}", True, seconds=40.0, rows=rows))
    display.planned(DAILY_STEP, 3, 1)
    display.started(DAILY_STEP, ("2026-01-01", "2026-01-03"))
    clock.now += 20
    display.finished(DAILY_STEP, 3, JobRun("daily_job", "r4", True, seconds=20.0, rows=30))
    display.planned(ATTRIBUTES_STEP, 1, 1)
    display.started(ATTRIBUTES_STEP, None)
    clock.now += 5
    display.finished(ATTRIBUTES_STEP, 1, JobRun("attributes_job", "r5", True, seconds=5.0))


def test_plain_lines_give_each_finished_runs_figures_and_the_plan_it_applies():
    clock, lines = FakeClock(), []
    display = PlainDisplay(RunTally(cost=COST, clock=clock), lines.append)
    backfill_of_three_ranges(display, clock)
    assert lines == [
        "  hourly_job run 1: ok",
        "progress (plan p-1): hourly: 24/72 load hours, 1/3 runs, 1,000 rows written, 0:00:40 elapsed, "
        "about 68 s left",
        "  hourly_job run 2: ok",
        "progress (plan p-1): hourly: 48/72 load hours, 2/3 runs, 3,500 rows written, 0:01:20 elapsed, "
        "about 34 s left",
        "  hourly_job run 3: ok",
        "progress (plan p-1): hourly: 72/72 load hours, 3/3 runs, 4,000 rows written, 0:02:00 elapsed, done",
        "progress (plan p-1): daily: 3/3 event days, 1/1 runs, 30 rows written, 0:02:20 elapsed, done",
        "progress (plan p-1): attributes: 1/1 runs, 0:02:25 elapsed, done",
    ]


def test_plain_display_is_chosen_off_a_terminal_and_prints_to_its_console_file():
    out, clock = StringIO(), FakeClock()
    display = progress_display(cost=COST, clock=clock, console=Console(file=out))
    assert isinstance(display, PlainDisplay)
    with display:
        backfill_of_three_ranges(display, clock)
    assert out.getvalue().splitlines()[1].startswith("progress (plan p-1): hourly: 24/72 load hours")
    assert "\x1b[" not in out.getvalue()  # no terminal codes in a log


def test_without_a_recorded_cost_the_estimate_follows_the_commands_own_runs():
    clock, lines = FakeClock(), []
    display = PlainDisplay(RunTally(cost=None, clock=clock), lines.append)
    display.planned(HOURLY_STEP, 30, 3)
    clock.now += 100
    display.finished(HOURLY_STEP, 10, JobRun("hourly_job", "r1", True, seconds=100.0, rows=7))
    # 10 s a load hour so far: 20 hours left are about 200 s.
    assert lines == ["progress: hourly: 10/30 load hours, 1/3 runs, 7 rows written, 0:01:40 elapsed, "
                     "about 3 min left"]
    display.finished(HOURLY_STEP, 10, JobRun("hourly_job", "r2", False, ("boom",), seconds=3.0))
    assert lines[-1] == ("progress: hourly: 10/30 load hours, 2/3 runs (1 failed), 7 rows written, 0:01:40 elapsed, "
                         "about 3 min left")


def test_a_terminal_gets_a_live_bar_per_step_with_the_runner_lines_above():
    out, clock = StringIO(), FakeClock()
    display = progress_display(cost=COST, clock=clock, console=Console(file=out, force_terminal=True, width=200))
    assert isinstance(display, LiveDisplay)
    with display:
        backfill_of_three_ranges(display, clock)
    shown = out.getvalue()
    assert "  hourly_job run 3: ok" in shown
    for figures in ("plan p-1: hourly", "72/72 load hours, 3/3 runs, 4,000 rows written",
                    "plan p-1: daily", "3/3 event days", "plan p-1: attributes", "0:02:25 elapsed"):
        assert figures in shown, (figures, shown)
