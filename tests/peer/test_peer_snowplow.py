"""The product against Snowplow's published test data (../shared/peer, Apache-2.0).

Each case drives the CLI in a subprocess, as an operator would: partitions start at
`start_date` when the code location loads, and these data sets start years before the
default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from tests.delta_reads import read_pandas

pytestmark = [pytest.mark.slow]

# Several runs share one driver JVM here: 2 GB, like the test session's own driver.
SPARK_CONF = ("spark.master=local[2];spark.ui.enabled=false;spark.sql.shuffle.partitions=2;"
              "spark.driver.memory=2g")


# Runs `incremental-assets` commands one after another in one process (one JVM start), each
# through the CLI's own entry point, and prints a marker line before each command's output.
DRIVER = """
import json, sys
from incremental_assets.cli import main
for argv in json.loads(sys.argv[1]):
    print("@@@ " + " ".join(argv), flush=True)
    code = main(argv)
    if code:
        sys.exit(code)
"""


def cli(*commands: list[str], env: dict[str, str]) -> list[str]:
    """Each command's stdout, in order; fails the test with the output if a command fails.
    Runs go to an instance beside the warehouse (the CLI refuses to run without one)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("INCREMENTAL_") and k != "DAGSTER_HOME"}
    full_env.update(env, INCREMENTAL_SPARK_CONF=SPARK_CONF,
                    DAGSTER_HOME=str(Path(env["INCREMENTAL_WAREHOUSE"]).parent / "dagster_home"))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], env=full_env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"incremental-assets failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout.split("@@@ ")[1:]


def read(path, name) -> pd.DataFrame:
    return read_pandas(f"{path}/{name}")


def parse_csv(path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype=str, keep_default_na=False).replace("", None)
    for column in [c for c in df.columns if c.endswith("_tstamp")]:
        df[column] = pd.to_datetime(df[column], utc=True)
    return df


def test_web_quarantines_every_session_longer_than_max_session_days(peer_dir, tmp_path):
    csv = peer_dir / "snowplow_web" / "snowplow_web_events.csv"
    env = {"INCREMENTAL_WAREHOUSE": str(tmp_path / "wh"), "INCREMENTAL_SOURCE_PATH": str(tmp_path / "src"),
           "INCREMENTAL_START_DATE": "2020-07-03", "INCREMENTAL_MAX_SESSION_DAYS": "3",
           "INCREMENTAL_DAYS_LATE_ALLOWED": "3"}
    # Two separate backfills: the long session's 2021 event must find its 2020 event, which
    # the lifecycle manifest remembers (Snowplow's batching misses exactly this one).
    cli(["load-csv", str(csv), "--out", env["INCREMENTAL_SOURCE_PATH"], "--load-tstamp-fallback", "collector_tstamp"],
        ["backfill", "--start", "2020-07-03", "--end", "2020-07-04"],
        ["backfill", "--start", "2021-02-26", "--end", "2021-03-15"], env=env)

    quarantined = set(read(tmp_path / "wh", "quarantined_sessions").domain_sessionid)
    expected_by_snowplow = set(pd.read_csv(
        peer_dir / "snowplow_web" / "snowplow_web_base_quarantined_sessions_expected.csv").session_identifier)
    assert expected_by_snowplow <= quarantined
    assert {s[:8] for s in quarantined} == {"2bfc2c76", "d21c000a"}

    # Every session's start and end are the min and max event time of its kept events.
    base = read(tmp_path / "wh", "base_events")
    lifecycle = read(tmp_path / "wh", "sessions_lifecycle_manifest").set_index("domain_sessionid")
    assert set(lifecycle.index) == set(base.domain_sessionid)
    for session, events in base.groupby("domain_sessionid"):
        start = events.derived_tstamp.min()
        kept = events[events.derived_tstamp <= start + timedelta(days=3)]
        row = lifecycle.loc[session]
        assert (row.start_tstamp, row.end_tstamp, row.event_count) == (
            start, kept.derived_tstamp.max(), len(kept)), session
    # The event sent more than 3 days after creation never reaches base_events.
    rejected = read(tmp_path / "wh", "rejected_events")
    assert "sent_too_late" in set(rejected.reject_reason)
    assert base.event_id.is_unique


def test_batch_engine_late_loads_reach_daily_aggregates_and_duplicates_count_once(peer_dir, tmp_path):
    csv = peer_dir / "snowplow_batch_engine" / "snowplow_batch_engine_events.csv"
    env = {"INCREMENTAL_WAREHOUSE": str(tmp_path / "wh"), "INCREMENTAL_SOURCE_PATH": str(tmp_path / "src"),
           "INCREMENTAL_START_DATE": "2025-01-01", "INCREMENTAL_BACKFILL_LIMIT_DAYS": "3",
           "INCREMENTAL_REPROCESS_DAYS": "1", "INCREMENTAL_MIN_ROWS_TO_PROCESS": "1",
           "INCREMENTAL_LOOKBACK_WINDOW_HOURS": "0", "INCREMENTAL_MAX_SESSION_DAYS": "30",
           "INCREMENTAL_ATTRIBUTES_AS_OF": "2025-01-06"}
    _, first, second, third = cli(["load-csv", str(csv), "--out", env["INCREMENTAL_SOURCE_PATH"]],
                                  ["run", "--until", "2025-01-04T00:00:00Z"],
                                  ["run", "--until", "2025-01-07T00:00:00Z"],
                                  ["run", "--until", "2025-01-08T00:00:00Z"], env=env)
    assert "First run" in first and "Standard run" in second and "Standard run" in third

    # The expected daily rows, computed here from the CSV by the rules, independently of Spark.
    events = parse_csv(csv)
    valid = events.dropna(subset=["event_id", "domain_userid", "domain_sessionid", "derived_tstamp",
                                  "load_tstamp"])
    valid = valid[valid.dvce_sent_tstamp <= valid.dvce_created_tstamp + timedelta(days=3)]
    first_copies = valid.sort_values(["load_tstamp", "collector_tstamp"]).drop_duplicates("event_id")
    kept = first_copies[first_copies.derived_tstamp >= pd.Timestamp("2025-01-01", tz="UTC")]
    expected = (kept.assign(event_date=kept.derived_tstamp.dt.date)
                .groupby(["event_date", "domain_userid"]).size().rename("events").reset_index())

    daily = read(tmp_path / "wh", "daily_aggregates")
    got = daily[["event_date", "domain_userid", "events"]].sort_values(["event_date", "domain_userid"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                  expected.sort_values(["event_date", "domain_userid"]).reset_index(drop=True),
                                  check_dtype=False)
    late = kept[kept.load_tstamp.dt.date > kept.derived_tstamp.dt.date]
    assert len(late) > 0, "the data set has events loaded a day or more late"
    assert (events.event_id == "event_8392").sum() == 2
    assert (read(tmp_path / "wh", "base_events").event_id == "event_8392").sum() == 1
    manifest = read(tmp_path / "wh", "daily_aggregation_manifest")
    assert manifest.rows_pending.sum() == 0 and manifest.rows_aggregated.sum() == len(kept)
