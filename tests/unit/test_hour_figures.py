"""The per-hour figures the UI shows on each load-hour partition (`hourly_step.figures_by_hour`),
checked against counts made here in Python from the same rows."""

from collections import Counter
from datetime import date, datetime, timedelta, timezone

from incremental_assets.steps.hourly_compute import HourFigures, figures_by_hour

START = datetime(2026, 1, 5, 10, tzinfo=timezone.utc)
END = START + timedelta(hours=3)


def _at(hours: float) -> datetime:
    return (START + timedelta(hours=hours)).replace(tzinfo=None)  # the session runs in UTC


def test_each_hour_gets_its_own_read_kept_rejected_and_filtered_counts(spark):
    # Read rows count in the hour of their load time: collector_tstamp where load_tstamp is null.
    read = [(f"r{i}", _at(h), _at(h)) for i, h in enumerate([0.1, 0.2, 0.3, 0.9, 2.5])] + [("r5", None, _at(2.6))]
    kept = [(f"k{i}", _at(h)) for i, h in enumerate([0.1, 0.2, 0.9, 2.5])]
    rejected = [(_at(h).replace(minute=0), reason) for h, reason in
                [(0, "late_sent"), (0, "late_sent"), (0, "null_event_id"), (2, "late_sent")]]
    filtered = [(_at(h), day) for h, day in [(0.1, date(2026, 1, 5)), (0.2, date(2026, 1, 4)),
                                             (0.9, date(2026, 1, 5)), (2.5, date(2026, 1, 5)),
                                             (-30, date(2026, 1, 3))]]  # an earlier hour's row brought back
    figures = figures_by_hour(
        START, END,
        read=spark.createDataFrame(read, "event_id string, load_tstamp timestamp, collector_tstamp timestamp"),
        kept=spark.createDataFrame(kept, "event_id string, load_tstamp timestamp"),
        rejected=spark.createDataFrame(rejected, "load_hour_tstamp timestamp, reject_reason string"),
        filtered=spark.createDataFrame(filtered, "load_tstamp timestamp, event_date date"))

    hour = [START + timedelta(hours=h) for h in range(3)]
    assert set(figures) == set(hour)  # the earlier hour's filtered row is not the window's
    expected = {h: HourFigures() for h in hour}
    for _, loaded in kept:
        expected[loaded.replace(minute=0, tzinfo=timezone.utc)].kept += 1
    for _, loaded, collected in read:
        expected[(loaded or collected).replace(minute=0, tzinfo=timezone.utc)].read += 1
    for loaded, reason in rejected:
        counts = expected[loaded.replace(tzinfo=timezone.utc)].rejected
        counts[reason] = counts.get(reason, 0) + 1
    for loaded, day in filtered:
        in_hour = loaded.replace(minute=0, tzinfo=timezone.utc)
        if in_hour in expected:
            expected[in_hour].filtered = dict(Counter(expected[in_hour].filtered) + Counter({day: 1}))
    assert figures == expected
    assert figures[hour[1]] == HourFigures()  # an hour with no rows still has its (zero) figures
