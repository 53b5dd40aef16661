"""What a command that runs jobs tells its caller as it goes: each run's outcome (`JobRun`) and,
to an observer such as the CLI's progress display (`progress_display`), the work each step
has planned and each run's start and end. No Dagster, no I/O: the runner fills it in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class JobRun:
    job: str
    run_id: str
    success: bool
    failures: tuple[str, ...] = ()  # one line per failed step
    seconds: float = 0.0
    submitted: bool = False  # handed to the instance's queue; it runs elsewhere, later
    rows: int | None = None  # the rows its partitions hold once written (`runner.rows_written`); None: not counted


# The steps a command runs, as its observer is told of them.
HOURLY_STEP, DAILY_STEP, ATTRIBUTES_STEP = "hourly", "daily", "attributes"


class RunObserver(Protocol):
    """What a command's caller is told as it goes (the CLI's progress display): the work each
    step has planned (load hours or event days, in runs), each run as it starts and ends."""

    def applying(self, plan_id: str) -> None: ...

    def planned(self, step: str, units: int, runs: int) -> None: ...

    def started(self, step: str, span: tuple[str, str] | None) -> None: ...

    def finished(self, step: str, units: int, run: JobRun) -> None: ...


class Unobserved:
    """The observer of a caller that follows the echoed lines alone."""

    def applying(self, plan_id: str) -> None:
        pass

    def planned(self, step: str, units: int, runs: int) -> None:
        pass

    def started(self, step: str, span: tuple[str, str] | None) -> None:
        pass

    def finished(self, step: str, units: int, run: JobRun) -> None:
        pass


UNOBSERVED = Unobserved()
