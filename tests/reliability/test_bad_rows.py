"""Bad rows in the source: the run succeeds, each bad row lands in rejected_events with a
reason (and is counted in the base_events materialization), every valid row is unaffected.

The source is a Snowplow CSV export loaded with `load_csv`: it lacks most optional columns,
carries an unknown context column, and has cells of the wrong type. Each row says which case
it is in `se_label`.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone

import pandas as pd
import pytest

from tests.delta_reads import read_pandas
from tests.reliability.helpers import run_in_process

pytestmark = [pytest.mark.spark, pytest.mark.slow]

UNTIL = datetime(2026, 1, 5, 11, tzinfo=timezone.utc)  # load hours 00:00 .. 10:00
HOUR = "2026-01-05 10:"
HUGE_USERAGENT = "Mozilla/5.0 " + "x" * (1024 * 1024)
CONTEXT = '[{"schema": "iglu:com.acme/widget/jsonschema/1-0-0", "data": {"a": "x,y", "q": "say \\"hi\\"\nthere"}}]'
HOSTILE_EVENT = "x'); DROP TABLE events; --"
HOSTILE_APP = "web' OR '1'='1"
COLUMNS = ["app_id", "platform", "collector_tstamp", "dvce_created_tstamp", "dvce_sent_tstamp", "event",
           "event_id", "domain_userid", "domain_sessionid", "domain_sessionidx", "geo_latitude", "br_viewwidth",
           "dvce_ismobile", "tr_total", "useragent", "se_label", "page_title", "derived_tstamp", "event_name",
           "load_tstamp", "contexts_com_acme_widget_1"]


def event(label: str, n: int, **cells: str) -> dict:
    row = {"app_id": "web", "platform": "web", "collector_tstamp": f"{HOUR}{n:02d}:00",
           "dvce_created_tstamp": f"{HOUR}{n:02d}:00", "dvce_sent_tstamp": f"{HOUR}{n:02d}:01",
           "event": "page_view", "event_id": f"e-{label}", "domain_userid": f"u-{n % 3}",
           "domain_sessionid": f"s-{n % 3}", "domain_sessionidx": "1", "geo_latitude": "52.5",
           "br_viewwidth": "1280", "dvce_ismobile": "false", "tr_total": "", "useragent": "Mozilla/5.0",
           "se_label": label, "page_title": f"Page {n}", "derived_tstamp": f"{HOUR}{n:02d}:00",
           "event_name": "page_view", "load_tstamp": f"{HOUR}{n:02d}:30", "contexts_com_acme_widget_1": ""}
    row.update(cells)
    return row


ROWS = [
    event("ok-1", 1), event("ok-2", 2), event("ok-3", 3, contexts_com_acme_widget_1=CONTEXT),
    event("duplicate", 4, event_id="e-ok-1"),  # a later copy of ok-1: dropped, not rejected
    event("null-event_id", 5, event_id=""),
    event("null-domain_userid", 6, domain_userid=""),
    event("null-domain_sessionid", 7, domain_sessionid=""),
    event("unparseable-derived", 8, derived_tstamp="not a time"),
    event("unparseable-load", 9, load_tstamp="2026-01-05 25:61:00"),  # placed by collector_tstamp
    event("future-derived", 10, derived_tstamp="2999-01-01 00:00:00"),
    event("sent-too-late", 11, dvce_created_tstamp="2025-12-20 10:00:00"),
    event("future-created", 12, dvce_created_tstamp="9999-12-31 23:59:59"),
    # In a session of its own: with others it would make theirs span days (and be quarantined).
    event("before-start-date", 13, derived_tstamp="2025-12-31 23:00:00", domain_sessionid="s-early"),
    event("huge-useragent", 14, useragent=HUGE_USERAGENT),
    event("unknown-event", 15, event_name=HOSTILE_EVENT, event="unstruct"),
    event("hostile-app", 16, app_id=HOSTILE_APP),
    event("wrong-types", 17, br_viewwidth="wide", geo_latitude="north", tr_total="lots",
          dvce_ismobile="perhaps", domain_sessionidx="1.5x"),
]
REJECTED = {
    "null-event_id": "null event_id",
    "null-domain_userid": "null domain_userid",
    "null-domain_sessionid": "null domain_sessionid",
    "unparseable-derived": "null derived_tstamp",
    "unparseable-load": "null load_tstamp",
    "future-derived": "derived_tstamp after load_tstamp",
    "sent-too-late": "sent_too_late",
}
VALID = {"ok-1", "ok-2", "ok-3", "future-created", "before-start-date", "huge-useragent", "unknown-event",
         "hostile-app", "wrong-types"}


@pytest.fixture(scope="module")
def bad_source(spark, tmp_path_factory):
    from incremental_assets.sources.csv_loader import load_csv

    folder = tmp_path_factory.mktemp("bad_rows")
    export = folder / "events.csv"
    with open(export, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(ROWS)
    load_csv(spark, [export], folder / "events")
    return str(folder / "events")


@pytest.fixture(scope="module")
def run(bad_source, tmp_path_factory):
    from dagster import AssetKey, DagsterInstance

    warehouse = tmp_path_factory.mktemp("bad_rows_warehouse") / "warehouse"
    instance = DagsterInstance.ephemeral()
    lines: list[str] = []
    report = run_in_process(UNTIL, bad_source, warehouse, instance=instance, echo=lines.append)
    materialization = instance.get_latest_materialization_event(AssetKey("base_events")).asset_materialization
    return report, lines, warehouse, materialization.metadata


def read(warehouse, name: str) -> pd.DataFrame:
    return read_pandas(f"{warehouse}/{name}")


def test_the_run_succeeds(run):
    report, lines, _, _ = run
    assert report.success, lines


def test_every_bad_row_is_rejected_with_its_reason_and_counted(run):
    _, _, warehouse, metadata = run
    rejected = read(warehouse, "rejected_events")
    assert dict(zip(rejected.se_label, rejected.reject_reason)) == REJECTED
    assert len(rejected) == len(REJECTED)
    assert metadata["rejected_events_rows_written"].value == len(REJECTED)
    assert (rejected.load_hour_tstamp == pd.Timestamp("2026-01-05 10:00", tz="UTC")).all()


def test_valid_rows_are_kept_as_they_were(run):
    _, _, warehouse, _ = run
    base = read(warehouse, "base_events").set_index("se_label")
    assert set(base.index) == VALID
    assert base.loc["ok-1", "event_id"] == "e-ok-1" and base.loc["ok-1", "page_title"] == "Page 1"
    assert base.loc["ok-1", "derived_tstamp"] == pd.Timestamp("2026-01-05 10:01", tz="UTC")
    assert base.loc["ok-2", "br_viewwidth"] == 1280 and base.loc["ok-2", "geo_latitude"] == 52.5
    assert base.loc["huge-useragent", "useragent"] == HUGE_USERAGENT
    assert base.loc["unknown-event", "event_name"] == HOSTILE_EVENT
    assert base.loc["hostile-app", "app_id"] == HOSTILE_APP
    # Cells of the wrong type are empty; the rest of the row is kept.
    wrong = base.loc["wrong-types"]
    assert wrong[["br_viewwidth", "geo_latitude", "tr_total", "dvce_ismobile", "domain_sessionidx"]].isna().all()
    assert wrong["page_title"] == "Page 17"
    # An unknown column passes through verbatim; missing optional columns are empty.
    assert base.loc["ok-3", "contexts_com_acme_widget_1"] == CONTEXT
    assert base["page_url"].isna().all() and base["tr_orderid"].isna().all()


def test_filtered_events_and_aggregates_see_only_usable_events(run):
    _, _, warehouse, _ = run
    filtered = read(warehouse, "filtered_events")
    assert set(filtered.se_label) == VALID - {"before-start-date"}
    daily = read(warehouse, "daily_aggregates")
    assert set(daily.event_date.astype(str)) == {"2026-01-05"}
    assert daily.events.sum() == len(filtered)
