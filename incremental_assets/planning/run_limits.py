"""Which load timestamps a run processes, from the incremental manifest (Snowplow's run limits).

`last_success` maps a model to the greatest load timestamp it has processed successfully;
models that never succeeded are absent. Limits are half-open: `[lower_limit, upper_limit)`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from incremental_assets.planning._time import finite_number, utc, whole_number


class RunState(enum.Enum):
    FIRST_RUN = "first_run"
    NEW_MODEL = "new_model"
    OUT_OF_SYNC = "out_of_sync"
    STANDARD = "standard"


_STATE_WORDS = {
    RunState.FIRST_RUN: "First run",
    RunState.NEW_MODEL: "New model introduced",
    RunState.OUT_OF_SYNC: "Models out of sync",
    RunState.STANDARD: "Standard run",
}


@dataclass(frozen=True)
class RunLimits:
    """The load-timestamp window `[lower_limit, upper_limit)` one run processes, and why."""

    state: RunState
    lower_limit: datetime
    upper_limit: datetime

    @property
    def is_empty(self) -> bool:
        """True when the window is zero-width or inverted, so there is nothing to process."""
        return self.lower_limit >= self.upper_limit

    def describe(self) -> str:
        """One line for logs and the CLI: the state in words and the limits in UTC."""
        text = (f"{_STATE_WORDS[self.state]}: processing loads between "
                f"{self.lower_limit:%Y-%m-%d %H:%M:%S} and {self.upper_limit:%Y-%m-%d %H:%M:%S}")
        if self.is_empty:
            text += " (empty window: nothing to process)"
        return text


def validate_backfill_limit_days(backfill_limit_days: int) -> int:
    """A backfill limit must be a whole number of days >= 1 (0 would give an upper limit at or
    below the lower one)."""
    return whole_number("backfill_limit_days", backfill_limit_days, 1)


def _validated(last_success: Mapping[str, datetime], models: Sequence[str], start_date: datetime,
               backfill_limit_days: int, lookback_window_hours: float, now: datetime):
    if isinstance(models, str):
        raise ValueError(f"models={models!r} is not accepted; give a sequence of model names")
    model_names = list(dict.fromkeys(models))  # unique, in the caller's order
    if not model_names:
        raise ValueError("models=[] is not accepted; give at least one model name")
    backfill = timedelta(days=validate_backfill_limit_days(backfill_limit_days))
    lookback = timedelta(
        hours=finite_number("lookback_window_hours", lookback_window_hours, 0))
    history = {model: utc(f"last_success[{model!r}]", last_success[model])
               for model in model_names if model in last_success}
    return model_names, history, utc("start_date", start_date), backfill, lookback, utc("now", now)


def get_run_limits(last_success: Mapping[str, datetime], models: Sequence[str], *,
                   start_date: datetime, backfill_limit_days: int,
                   lookback_window_hours: float, now: datetime) -> RunLimits:
    """Pick the first matching state of first run, new model, models out of sync, standard run, and
    apply its limits (Snowplow's incremental logic), never letting the upper limit pass `now`."""
    model_names, history, start_date, backfill, lookback, now = _validated(
        last_success, models, start_date, backfill_limit_days, lookback_window_hours, now)
    if not history:
        return RunLimits(RunState.FIRST_RUN, start_date, min(now, start_date + backfill))
    min_last, max_last = min(history.values()), max(history.values())
    if len(history) < len(model_names):
        # Replay everything processed so far, so the new model catches up with the others.
        return RunLimits(RunState.NEW_MODEL, start_date,
                         min(now, max_last, start_date + backfill))
    if min_last < max_last:
        return RunLimits(RunState.OUT_OF_SYNC, min_last - lookback,
                         min(now, max_last, min_last + backfill))
    return RunLimits(RunState.STANDARD, max_last - lookback, min(now, max_last + backfill))


def get_model_run_limits(last_success: Mapping[str, datetime], models: Sequence[str], *,
                         start_date: datetime, backfill_limit_days: int,
                         lookback_window_hours: float, now: datetime) -> dict[str, RunLimits]:
    """Give each model its own limits: first-run limits from start_date when it has no last
    success, standard limits from its own last success otherwise, so no model waits for another."""
    model_names, history, start_date, backfill, lookback, now = _validated(
        last_success, models, start_date, backfill_limit_days, lookback_window_hours, now)
    limits = {}
    for model in model_names:
        if model not in history:
            limits[model] = RunLimits(RunState.FIRST_RUN, start_date,
                                      min(now, start_date + backfill))
        else:
            last = history[model]
            limits[model] = RunLimits(RunState.STANDARD, last - lookback,
                                      min(now, last + backfill))
    return limits
