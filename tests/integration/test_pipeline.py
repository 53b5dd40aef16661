"""The whole graph on generated messy data: incremental equals rebuild, reruns change nothing,
and every filtered row is either aggregated or counted as pending.

One small lake (5,000 events over 2 days, with late loads up to 3 days, duplicates, bot
sessions, invalid rows) is generated once for the module.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pandas as pd
import pytest

from tests.delta_reads import read_pandas

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

START = date(2026, 1, 5)
AS_OF = "2026-01-07"
SETTINGS = {
    "INCREMENTAL_START_DATE": "2026-01-01",
    "INCREMENTAL_MAX_SESSION_DAYS": "1",  # the sample's bots span ~2 days: quarantined
    "INCREMENTAL_LOOKBACK_WINDOW_HOURS": "1",
    "INCREMENTAL_ATTRIBUTES_AS_OF": AS_OF,
    "INCREMENTAL_REPROCESS_DAYS": "4",  # covers the sample's lateness (loads up to 3 days late)
    "INCREMENTAL_MIN_ROWS_TO_PROCESS": "1",
}
# Loads end within 4 days of the last event day.
LAST_LOAD = datetime(2026, 1, 11, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    from incremental_assets.sources.generator import generate_events

    path = tmp_path_factory.mktemp("lake") / "events"
    summary = generate_events(spark, events=5000, days=2, start=START, out=str(path), seed=11,
                              progress=lambda *_: None)
    assert summary["kinds"].get("bot", 0) > 0, summary
    return str(path)


@pytest.fixture(scope="module")
def instance():
    from dagster import DagsterInstance

    return DagsterInstance.ephemeral()


def use_warehouse(monkeypatch, lake, warehouse, **extra):
    for key, value in {**SETTINGS, **extra}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", lake)
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(warehouse))


def table(warehouse, name: str, keys: list[str]) -> pd.DataFrame:
    df = read_pandas(f"{warehouse}/{name}")
    return df.sort_values(keys).reset_index(drop=True)


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def rebuilt(lake, instance, tmp_path_factory):
    from incremental_assets.runner import backfill

    warehouse = tmp_path_factory.mktemp("rebuilt")
    with pytest.MonkeyPatch.context() as mp:
        use_warehouse(mp, lake, warehouse)
        report = backfill(START, LAST_LOAD.date(), instance=instance, echo=quiet,
                          now=LAST_LOAD + timedelta(days=1))
    assert report.success, report.runs
    return warehouse


def run_incrementally(lake, instance, warehouse, times, **extra):
    from incremental_assets.runner import run_until

    with pytest.MonkeyPatch.context() as mp:
        use_warehouse(mp, lake, warehouse, **extra)
        for ts in times:
            report = run_until(ts, instance=instance, echo=quiet)
            assert report.success, (ts, report.runs)


def schedule() -> list[datetime]:
    """Hour by hour through the first busy hours, then daily through the late tail (the
    differential suite covers hour by hour with hostile operations)."""
    first = datetime(2026, 1, 5, 1, tzinfo=timezone.utc)
    hourly = [first + timedelta(hours=h) for h in range(6)]
    tail = [datetime(2026, 1, 6, tzinfo=timezone.utc) + timedelta(days=k) for k in range(6)]
    return hourly + [t for t in tail if t <= LAST_LOAD]


DAILY_KEYS = ["event_date", "domain_userid"]


def test_incremental_runs_equal_one_full_rebuild(lake, instance, rebuilt, tmp_path):
    run_incrementally(lake, instance, tmp_path, schedule())
    for name, keys in (("daily_aggregates", DAILY_KEYS), ("attributes", ["domain_userid"]),
                       ("sessions_lifecycle_manifest", ["domain_sessionid"]),
                       ("quarantined_sessions", ["domain_sessionid"]),
                       ("base_events", ["event_id", "load_tstamp"]), ("filtered_events", ["event_id", "load_tstamp"]),
                       ("rejected_events", ["load_hour_tstamp", "event_id", "reject_reason"]),
                       ("filtered_events_counts", ["load_hour_tstamp", "event_date"])):
        incremental, full = table(tmp_path, name, keys), table(rebuilt, name, keys)
        assert len(full) > 0 or name == "quarantined_sessions"
        pd.testing.assert_frame_equal(incremental[sorted(full.columns)], full[sorted(full.columns)],
                                      check_dtype=False, obj=name)
    assert len(table(rebuilt, "quarantined_sessions", ["domain_sessionid"])) > 0, "the sample's bots"


def test_base_events_has_each_event_once_and_rejects_are_explained(rebuilt):
    base = table(rebuilt, "base_events", ["event_id"])
    assert base.event_id.is_unique and base.event_id.notna().all()
    rejected = table(rebuilt, "rejected_events", ["load_hour_tstamp"])
    assert set(rejected.reject_reason) <= {
        "null event_id", "null domain_userid", "null domain_sessionid", "null derived_tstamp",
        "null load_tstamp", "derived_tstamp after load_tstamp", "sent_too_late"}
    assert "sent_too_late" in set(rejected.reject_reason)


def test_rerunning_a_range_changes_no_output_table(lake, instance, rebuilt):
    from incremental_assets.runner import backfill

    names = {"base_events": ["event_id"], "filtered_events": ["event_id"], "daily_aggregates": DAILY_KEYS,
             "attributes": ["domain_userid"], "daily_aggregation_manifest": ["event_date", "load_date"]}
    before = {n: table(rebuilt, n, k) for n, k in names.items()}
    with pytest.MonkeyPatch.context() as mp:
        use_warehouse(mp, lake, rebuilt)
        report = backfill(date(2026, 1, 6), date(2026, 1, 6), instance=instance, echo=quiet,
                          now=LAST_LOAD + timedelta(days=1))
    assert report.success
    for name, keys in names.items():
        after = table(rebuilt, name, keys)
        volatile = [c for c in ("last_rebuilt_at", "last_rebuilt_run_id") if c in after.columns]
        pd.testing.assert_frame_equal(after.drop(columns=volatile), before[name].drop(columns=volatile),
                                      check_dtype=False, obj=name)


def test_with_small_settings_every_filtered_row_is_aggregated_or_pending(lake, instance, tmp_path):
    times = [datetime(2026, 1, 5, 12, tzinfo=timezone.utc) + timedelta(hours=12 * k) for k in range(12)]
    small = dict(INCREMENTAL_REPROCESS_DAYS="0", INCREMENTAL_MIN_ROWS_TO_PROCESS="50")
    run_incrementally(lake, instance, tmp_path, [t for t in times if t <= LAST_LOAD], **small)
    tables = {"filtered_events": ["event_id"], "daily_aggregates": DAILY_KEYS,
              "daily_aggregation_manifest": ["event_date", "load_date"], "attributes": ["domain_userid"]}
    snapshot = {n: table(tmp_path, n, k) for n, k in tables.items()}
    # The same `run --until` again changes no output table.
    run_incrementally(lake, instance, tmp_path, [max(t for t in times if t <= LAST_LOAD)], **small)
    for name, keys in tables.items():
        after = table(tmp_path, name, keys)
        volatile = [c for c in ("last_rebuilt_at", "last_rebuilt_run_id") if c in after.columns]
        pd.testing.assert_frame_equal(after.drop(columns=volatile), snapshot[name].drop(columns=volatile),
                                      check_dtype=False, obj=name)
    filtered = read_pandas(f"{tmp_path}/filtered_events", ["event_date"])
    total = filtered.groupby("event_date").size()
    manifest = table(tmp_path, "daily_aggregation_manifest", ["event_date", "load_date"]).groupby(
        "event_date")[["rows_aggregated", "rows_pending"]].sum()
    daily = table(tmp_path, "daily_aggregates", DAILY_KEYS).groupby("event_date")["events"].sum()
    assert manifest.rows_pending.sum() > 0, "these settings must leave some late rows pending"
    for day, rows in total.items():
        assert day in manifest.index, day
        assert daily.get(day, 0) == manifest.loc[day, "rows_aggregated"], day
        assert manifest.loc[day, "rows_aggregated"] + manifest.loc[day, "rows_pending"] == rows, day
