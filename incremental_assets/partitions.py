"""Every PartitionsDefinition and PartitionMapping of the project, in one place.

Two time axes: hourly partitions are *load* hours (a closed load hour never changes);
daily partitions are *event* days (they keep receiving late events). Partition starts come
from the `start_date` setting as the environment gives it when the code location loads.
"""

from __future__ import annotations

from dagster import (
    BackfillPolicy,
    DailyPartitionsDefinition,
    HourlyPartitionsDefinition,
    TimeWindowPartitionMapping,
)

from incremental_assets.settings import Settings

LOAD_SETTINGS = Settings.load()
_START = LOAD_SETTINGS.start_date.replace(minute=0, second=0, microsecond=0)

# Closed load hours only (end_offset=0): an hour is processed once it can no longer grow.
hourly_partitions = HourlyPartitionsDefinition(start_date=_START.strftime("%Y-%m-%d-%H:%M"))
# Today's event day is included (end_offset=1): its events are aggregated as they arrive.
daily_partitions = DailyPartitionsDefinition(start_date=_START.strftime("%Y-%m-%d"), end_offset=1)

# Every partitioned asset handles a range in one run (one Spark job per backfill).
single_run = BackfillPolicy.single_run()


def filtered_hours_of_day(reprocess_days: int) -> TimeWindowPartitionMapping:
    """Event day D reads the filtered load hours of D through D + reprocess_days.

    Offsets count downstream (daily) partitions. Hours that do not exist yet (the future)
    are allowed: a day is aggregated from what has been loaded so far.
    """
    return TimeWindowPartitionMapping(start_offset=0, end_offset=reprocess_days,
                                      allow_nonexistent_upstream_partitions=True)
