"""sources.load_hours: which load hours a source's files hold, from its Delta log only."""

import datetime as dt
import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from incremental_assets.sources.load_hours import source_snapshot

UTC = dt.timezone.utc


@pytest.fixture
def berlin_host(monkeypatch):
    """The process runs in Europe/Berlin (UTC+1 in January), as a sensor on such a host would."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timestamp_ntz_load_times_are_utc_hours_whatever_the_host_time_zone(tmp_path, berlin_host):
    # Issue 41, item 8b: a TIMESTAMP_NTZ load_tstamp is a UTC wall time to the runs (Spark's
    # session time zone is UTC); the sensor placed it in the host's zone, an hour off here.
    loads = [dt.datetime(2026, 1, 5, 10, 30), dt.datetime(2026, 1, 5, 11, 59)]
    table = pa.table({"event_id": ["a", "b"], "load_tstamp": pa.array(loads, pa.timestamp("us")),
                      "collector_tstamp": pa.array(loads, pa.timestamp("us"))})
    write_deltalake(str(tmp_path / "src"), table)
    snapshot = source_snapshot(str(tmp_path / "src"), dt.datetime(2026, 1, 5, tzinfo=UTC),
                               dt.datetime(2026, 1, 6, tzinfo=UTC))
    assert sorted(snapshot.fingerprints) == [dt.datetime(2026, 1, 5, 10, tzinfo=UTC),
                                             dt.datetime(2026, 1, 5, 11, tzinfo=UTC)]
