"""How long due work should take, from what the hourly step cost before.

A step's cost is fitted as a fixed part per run (start, claims, commits), a part per load hour
(each hour's bookkeeping: claims, events, ledger rows; an empty hour costs it too) and a part
per source row, by least squares over the recent steps' (hours, rows, seconds), every part
non-negative. Steps of one size cannot tell the fixed part from the part per hour: an estimate
for runs of another size then says so, with its upper bound. Pure: the samples come from the
manifest (`progress.hourly_step_samples`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

FIXED, PER_HOUR, PER_ROW = 0, 1, 2
# The parts a fit may use, simplest first: a richer fit is kept only when it fits the samples
# better (one size of step puts every second on its hours, as no fixed part can be told apart).
_PARTS = [parts for size in (1, 2, 3) for parts in combinations((PER_HOUR, PER_ROW, FIXED), size)]


@dataclass(frozen=True)
class StepSample:
    """One successful hourly step: its load hours, the source rows it read, its seconds."""

    hours: int
    rows: int | None  # None: recorded before steps kept their rows
    seconds: float


@dataclass(frozen=True)
class StepCost:
    fixed_seconds: float  # what a run costs whatever its hours
    seconds_per_hour: float
    seconds_per_row: float
    rows_per_hour: float  # the samples' average: the rows of work whose rows are unknown
    steps: int  # how many recorded steps the fit is from
    step_hours: tuple[int, ...] = ()  # the sizes (load hours) of the recorded steps
    longest_step_seconds: float = 0.0

    def describe(self) -> str:
        return (f"{self.fixed_seconds:.0f} s a run + {self.seconds_per_hour:.2f} s a load hour + "
                f"{self.seconds_per_row * 1e6:.0f} s a million rows, from the last {self.steps} hourly step(s)")


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """x with matrix x = vector (Gaussian elimination, partial pivoting); None when singular."""
    n = len(vector)
    a = [row[:] + [value] for row, value in zip(matrix, vector)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-9:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def _least_squares(columns: list[list[float]], seconds: list[float]) -> tuple[list[float], float] | None:
    """The coefficients of `columns` that fit `seconds` best, and the squared residual; None
    when the columns cannot be told apart. Each column is scaled to a largest value of 1 first:
    rows run to millions where hours run to hundreds."""
    scales = [max(abs(v) for v in column) or 1.0 for column in columns]
    scaled = [[v / s for v in column] for column, s in zip(columns, scales)]
    normal = [[sum(x * y for x, y in zip(c1, c2)) for c2 in scaled] for c1 in scaled]
    solution = _solve(normal, [sum(x * y for x, y in zip(c, seconds)) for c in scaled])
    if solution is None:
        return None
    coefficients = [b / s for b, s in zip(solution, scales)]
    fitted = [sum(b * column[i] for b, column in zip(coefficients, columns)) for i in range(len(seconds))]
    return coefficients, sum((f - s) ** 2 for f, s in zip(fitted, seconds))


def fit_step_cost(samples: Sequence[StepSample]) -> StepCost | None:
    """The non-negative cost that fits the recorded steps best; None without any. Rows take part
    only when every sample has them."""
    samples = [s for s in samples if s.hours > 0 and s.seconds >= 0]
    if not samples:
        return None
    with_rows = all(s.rows is not None for s in samples)
    values = {FIXED: [1.0] * len(samples), PER_HOUR: [float(s.hours) for s in samples],
              PER_ROW: [float(s.rows or 0) for s in samples]}
    seconds = [s.seconds for s in samples]
    best: tuple[float, dict[int, float]] | None = None
    for parts in _PARTS:
        if PER_ROW in parts and not with_rows:
            continue
        fit = _least_squares([values[p] for p in parts], seconds)
        if fit is None or any(b < 0 for b in fit[0]):
            continue
        if best is None or fit[1] < best[0] * (1 - 1e-9) - 1e-12:
            best = (fit[1], dict(zip(parts, fit[0])))
    coefficients = best[1] if best else {}  # (a per-hour fit alone is never negative: always found)
    rows = sum(s.rows or 0 for s in samples)
    return StepCost(fixed_seconds=coefficients.get(FIXED, 0.0), seconds_per_hour=coefficients.get(PER_HOUR, 0.0),
                    seconds_per_row=coefficients.get(PER_ROW, 0.0),
                    rows_per_hour=rows / sum(s.hours for s in samples) if with_rows else 0.0, steps=len(samples),
                    step_hours=tuple(sorted({s.hours for s in samples})),
                    longest_step_seconds=max(s.seconds for s in samples))


def estimated_seconds(cost: StepCost, *, hours: int, rows: int | None, runs: int) -> float:
    """Seconds for `hours` load hours holding `rows` source rows (None: unknown, the recorded
    average per hour), in `runs` runs."""
    if hours <= 0:
        return 0.0
    rows = hours * cost.rows_per_hour if rows is None else rows
    return runs * cost.fixed_seconds + hours * cost.seconds_per_hour + rows * cost.seconds_per_row


def unknown_fixed_part(cost: StepCost, *, hours: int, runs: int) -> str | None:
    """Why the estimate may be low, or None: steps of one size only were recorded (a fixed part
    per run cannot be told from a part per hour), and the work runs in steps of another size."""
    if len(cost.step_hours) != 1 or runs <= 0 or math.isclose(hours / runs, cost.step_hours[0]):
        return None
    return (f"only steps of {cost.step_hours[0]} load hour(s) recorded, so the fixed part of a run is not known "
            f"yet: up to {describe_duration(runs * cost.longest_step_seconds).removeprefix('about ')}")


def runs_for(hours: int, max_hours_per_run: int) -> int:
    """Runs for `hours` contiguous load hours, at most `max_hours_per_run` a run."""
    return math.ceil(hours / max_hours_per_run) if hours > 0 else 0


def describe_duration(seconds: float) -> str:
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"
