"""The settings as the code location loads them (LOAD_SETTINGS: the one read of the settings at
import) and the bounds they fix for the partitions, without Dagster: planning needs the bounds,
not the definitions (`partitions.py` builds those from these), and a command that only plans
(`incremental-assets plan`, `limits`) then starts without importing Dagster.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

from incremental_assets.settings import Settings

LOAD_SETTINGS = Settings.load()
# The first load hour of the hourly partitions: start_date's hour.
PARTITIONS_START = LOAD_SETTINGS.start_date.replace(minute=0, second=0, microsecond=0)
# Where the partitions end: the day after end_date when it is set (a finished history, the demo:
# the UI then shows the hours that can hold data, not every hour until today), else None (now).
PARTITIONS_END = LOAD_SETTINGS.end_hour
# Where the event days end (excluded): the day after end_date's, whose events the last load
# hours may hold (a derived time up to 24 h after the load is valid); None (today) without it.
EVENT_DAYS_END = PARTITIONS_END + timedelta(days=1) if PARTITIONS_END else None


def end_load_hour(settings: Settings) -> datetime | None:
    """The end (excluded) of the load hours processed: the midnight after end_date, never after
    the hourly partitions end (fixed when the code location loads); None: no end."""
    ends = [end for end in (settings.end_hour, PARTITIONS_END) if end is not None]
    return min(ends) if ends else None


def last_event_day(settings: Settings, now: datetime) -> date:
    """The last event day a daily partition exists for: today, or the day after the last load
    day (its last hours may hold events derived up to 24 h after their load)."""
    end = end_load_hour(settings)
    today = now.astimezone(timezone.utc).date()
    return min(today, end.date()) if end else today
