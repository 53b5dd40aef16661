"""The settings as the code location loads them (LOAD_SETTINGS: the one read of the settings at
import) and the bounds they fix for the partitions, without Dagster: planning needs the bounds,
not the definitions (`partitions.py` builds those from these), and a command that only plans
(`incremental-assets plan`, `limits`) then starts without importing Dagster.
"""

from __future__ import annotations

from datetime import timedelta

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
