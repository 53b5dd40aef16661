"""How long due work should take, from what the hourly step cost before.

A step's cost is fitted as a fixed part (start, claims, commits) plus a part per load hour, by
least squares over the recent steps' (hours, seconds). Pure: the samples come from the manifest
(`progress.hourly_step_samples`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class StepCost:
    fixed_seconds: float  # what a step costs whatever its hours
    seconds_per_hour: float
    steps: int  # how many recorded steps the fit is from

    def describe(self) -> str:
        return (f"{self.fixed_seconds:.0f} s a run + {self.seconds_per_hour:.1f} s a load hour, "
                f"from the last {self.steps} hourly step(s)")


def fit_step_cost(samples: Sequence[tuple[int, float]]) -> StepCost | None:
    """The cost line through the (hours, seconds) of recorded steps; None without any. With one
    size of step only, every second is put on its hours (no fixed part can be told apart)."""
    samples = [(hours, seconds) for hours, seconds in samples if hours > 0 and seconds >= 0]
    if not samples:
        return None
    n = len(samples)
    mean_h = sum(h for h, _ in samples) / n
    mean_s = sum(s for _, s in samples) / n
    spread = sum((h - mean_h) ** 2 for h, _ in samples)
    if spread == 0:
        return StepCost(0.0, mean_s / mean_h, n)
    slope = sum((h - mean_h) * (s - mean_s) for h, s in samples) / spread
    fixed = mean_s - slope * mean_h
    if slope < 0 or fixed < 0:  # noise on a few steps: fall back to the average rate
        return StepCost(0.0, sum(s for _, s in samples) / sum(h for h, _ in samples), n)
    return StepCost(fixed, slope, n)


def estimated_seconds(cost: StepCost, hours: int, max_hours_per_run: int) -> float:
    """Seconds for `hours` load hours run `max_hours_per_run` at a time."""
    if hours <= 0:
        return 0.0
    return math.ceil(hours / max_hours_per_run) * cost.fixed_seconds + hours * cost.seconds_per_hour


def describe_duration(seconds: float) -> str:
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"
