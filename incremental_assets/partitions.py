"""Every PartitionsDefinition and PartitionMapping of the project, from the settings as the code
location loads them (`partition_bounds.LOAD_SETTINGS`, re-exported here). Hour and day
arithmetic (keys, floors, ranges) is in `planning.hours`.

Two time axes: hourly partitions are *load* hours (a closed load hour never changes);
daily partitions are *event* days (they keep receiving late events). Partition starts come
from the `start_date` setting as the environment gives it when the code location loads.
"""

from __future__ import annotations

import warnings

from dagster import (
    BackfillPolicy,
    BetaWarning,
    DailyPartitionsDefinition,
    HourlyPartitionsDefinition,
    PreviewWarning,
    TimeWindowPartitionMapping,
)

from incremental_assets.partition_bounds import EVENT_DAYS_END, LOAD_SETTINGS, PARTITIONS_END, PARTITIONS_START
from incremental_assets.planning.hours import DAY_KEY_FORMAT, HOUR_KEY_FORMAT

# The project relies on a few beta or preview Dagster features on purpose; their warnings would
# repeat on every load. Only those warnings are hidden, by their messages: any other stays shown.
for understood in (r"Parameter `backfill_policy` of function", r"Parameter `allow_nonexistent_upstream_partitions`",
                   r"Specifying a partitions_def on an AssetCheckSpec",  # one check result per load hour
                   # the UI's links from an asset to its source file and line
                   r"Function `with_source_code_references`", r"Class `CodeReferencesMetadataValue`",
                   r"Class `LocalFileCodeReference`"):
    warnings.filterwarnings("ignore", message=understood, category=BetaWarning)
    warnings.filterwarnings("ignore", message=understood, category=PreviewWarning)

_START, _END = PARTITIONS_START, PARTITIONS_END  # see partition_bounds

# Closed load hours only (end_offset=0): an hour is processed once it can no longer grow.
hourly_partitions = HourlyPartitionsDefinition(start_date=_START.strftime(HOUR_KEY_FORMAT),
                                               end_date=_END.strftime(HOUR_KEY_FORMAT) if _END else None)
# Today's event day is included (end_offset=1): its events are aggregated as they arrive. An
# event's day may follow its load day (a derived time up to 24 h after the load is valid), so
# with end_date the days end a day after the hours.
daily_partitions = DailyPartitionsDefinition(
    start_date=_START.strftime(DAY_KEY_FORMAT), end_offset=1,
    end_date=EVENT_DAYS_END.strftime(DAY_KEY_FORMAT) if EVENT_DAYS_END else None)

# A backfill from the UI runs the hourly assets in runs of at most max_hours_per_run load hours,
# as the sensor, `incremental-assets run` and `backfill` cut them: a run holds its hours' rows.
# (Dagster's `asset materialize --partition-range` accepts single-run assets only: use
# `incremental-assets backfill` for a range from the command line.) A run of event days is light
# (one day's rows at a time): the daily assets take any range in one run.
hours_per_run = BackfillPolicy.multi_run(max_partitions_per_run=LOAD_SETTINGS.max_hours_per_run)
single_run = BackfillPolicy.single_run()


def filtered_hours_of_day(reprocess_days: int) -> TimeWindowPartitionMapping:
    """Event day D reads the filtered load hours of D through D + reprocess_days.

    Offsets count downstream (daily) partitions. Hours that do not exist yet (the future)
    are allowed: a day is aggregated from what has been loaded so far.
    """
    return TimeWindowPartitionMapping(start_offset=0, end_offset=reprocess_days,
                                      allow_nonexistent_upstream_partitions=True)
