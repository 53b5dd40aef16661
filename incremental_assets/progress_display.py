"""What a long command (`run`, `backfill`, `apply`, `forget`) shows while it runs: per step
(hourly, daily, attributes) the load hours or event days done of those planned, the runs, the
rows written, the time elapsed and an estimate of what is left, and the plan it applies.

On a terminal, a live bar per step (rich), the runner's lines printed above the bars; anywhere
else (a CI log, a cron job's mail), plain lines: the runner's, and one per finished run with
the same figures. It observes the runner (`run_events.RunObserver`) and reads nothing itself:
the hourly step's recorded cost and the clock are given (tests give a fake clock)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TaskID, TextColumn
from rich.text import Text

from incremental_assets.planning.estimates import (
    StepCost,
    StepSample,
    describe_duration,
    estimated_seconds,
    fit_step_cost,
)
from incremental_assets.run_events import ATTRIBUTES_STEP, DAILY_STEP, HOURLY_STEP, JobRun

Clock = Callable[[], float]
# What a step's work is counted in (attributes: in runs alone).
UNITS = {HOURLY_STEP: "load hours", DAILY_STEP: "event days", ATTRIBUTES_STEP: None}


@dataclass
class StepTally:
    """One step's work: planned and done (load hours or event days, and runs), its rows and seconds."""

    units: int = 0
    runs: int = 0
    units_done: int = 0
    runs_done: int = 0
    submitted: int = 0
    failed: int = 0
    rows: int | None = None
    seconds: float = 0.0
    ended_at: float | None = None  # when its work planned so far was done: its elapsed time stops there
    samples: list[StepSample] = field(default_factory=list)  # its finished runs, for the cost model


def clock_text(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class RunTally:
    """The figures of a command's steps, from its observer's events and the clock."""

    def __init__(self, *, cost: StepCost | None, clock: Clock):
        self.cost, self.clock = cost, clock
        self.started_at = clock()
        self.plan_id: str | None = None
        self.steps: dict[str, StepTally] = {}

    def planned(self, step: str, units: int, runs: int) -> None:
        tally = self.steps.setdefault(step, StepTally())
        tally.units += units
        tally.runs += runs
        tally.ended_at = None

    def finished(self, step: str, units: int, run: JobRun) -> None:
        tally = self.steps.setdefault(step, StepTally())
        if run.submitted:
            tally.submitted += 1
            return
        tally.runs_done += 1
        tally.failed += not run.success
        if not run.success:
            return
        tally.units_done += units
        tally.seconds += run.seconds
        tally.samples.append(StepSample(units, None, run.seconds))
        if run.rows is not None:
            tally.rows = (tally.rows or 0) + run.rows
        if tally.units_done >= tally.units:
            tally.ended_at = self.clock()

    def seconds_left(self, step: str) -> float | None:
        """The hourly step's: its recorded cost (without one, the fit of this command's runs)
        for the hours and runs left; another step's: its runs so far, on average. None: no
        run yet to estimate from."""
        tally = self.steps[step]
        units_left, runs_left = tally.units - tally.units_done, max(0, tally.runs - tally.runs_done)
        if units_left <= 0:
            return 0.0
        if step == HOURLY_STEP:
            cost = self.cost or fit_step_cost(tally.samples)
            return None if cost is None else estimated_seconds(cost, hours=units_left, rows=None, runs=runs_left)
        return tally.seconds / tally.runs_done * runs_left if tally.runs_done else None

    def figures(self, step: str) -> str:
        """One step's figures in a line: done of planned, runs, rows, elapsed, what is left."""
        tally = self.steps[step]
        left = self.seconds_left(step)
        unit = UNITS.get(step)
        parts = [*([f"{tally.units_done}/{tally.units} {unit}"] if unit else []),
                 f"{tally.runs_done}/{tally.runs} runs" + (f" ({tally.failed} failed)" if tally.failed else ""),
                 *([f"{tally.submitted} submitted to the queue"] if tally.submitted else []),
                 *([f"{tally.rows:,} rows written"] if tally.rows is not None else []),
                 f"{clock_text(self.elapsed(tally))} elapsed",
                 "done" if left == 0 else "estimate after the first run" if left is None
                 else f"{describe_duration(left)} left"]
        return ", ".join(parts)

    def elapsed(self, tally: StepTally) -> float:
        """Seconds since the command started, until the step's planned work was done."""
        return (self.clock() if tally.ended_at is None else tally.ended_at) - self.started_at

    def line(self, step: str) -> str:
        plan = f" (plan {self.plan_id})" if self.plan_id else ""
        return f"progress{plan}: {step}: {self.figures(step)}"


class PlainDisplay:
    """Plain lines: the runner's, and a line of figures per finished run."""

    def __init__(self, tally: RunTally, write: Callable[[str], None]):
        self.tally, self.write = tally, write

    def __enter__(self) -> PlainDisplay:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def echo(self, line: str) -> None:
        self.write(line)

    def applying(self, plan_id: str) -> None:
        self.tally.plan_id = plan_id

    def planned(self, step: str, units: int, runs: int) -> None:
        self.tally.planned(step, units, runs)

    def started(self, step: str, span: tuple[str, str] | None) -> None:
        pass

    def finished(self, step: str, units: int, run: JobRun) -> None:
        self.tally.finished(step, units, run)
        self.write(self.tally.line(step))


class FiguresColumn(ProgressColumn):
    """A step's figures, rendered afresh at each refresh: the elapsed time moves on its own."""

    def __init__(self, tally: RunTally):
        super().__init__()
        self.tally = tally

    def render(self, task) -> Text:
        return Text(self.tally.figures(task.fields["step"]))


class LiveDisplay:
    """A live bar per step on a terminal; the runner's lines print above the bars."""

    def __init__(self, tally: RunTally, console: Console):
        self.tally = tally
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), FiguresColumn(tally),
                                 console=console, get_time=tally.clock)
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> LiveDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def echo(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def applying(self, plan_id: str) -> None:
        self.tally.plan_id = plan_id
        for step, task in self.tasks.items():
            self.progress.update(task, description=self._title(step))

    def planned(self, step: str, units: int, runs: int) -> None:
        self.tally.planned(step, units, runs)
        if step not in self.tasks:
            self.tasks[step] = self.progress.add_task(self._title(step), total=units, step=step)
        self.progress.update(self.tasks[step], total=self.tally.steps[step].units)

    def started(self, step: str, span: tuple[str, str] | None) -> None:
        if step in self.tasks:
            where = f" {span[0]} .. {span[1]}" if span else ""
            self.progress.update(self.tasks[step], description=self._title(step) + where)

    def finished(self, step: str, units: int, run: JobRun) -> None:
        self.tally.finished(step, units, run)
        if step in self.tasks:
            self.progress.update(self.tasks[step], completed=self.tally.steps[step].units_done,
                                 description=self._title(step))

    def _title(self, step: str) -> str:
        return f"plan {self.tally.plan_id}: {step}" if self.tally.plan_id else step


def progress_display(*, cost: StepCost | None, clock: Clock = time.monotonic,
                     console: Console | None = None) -> PlainDisplay | LiveDisplay:
    """The display for `console` (stdout's by default): live on a terminal, plain lines elsewhere."""
    console = console or Console()
    tally = RunTally(cost=cost, clock=clock)
    if console.is_terminal:
        return LiveDisplay(tally, console)
    return PlainDisplay(tally, lambda line: print(line, file=console.file or sys.stdout, flush=True))
