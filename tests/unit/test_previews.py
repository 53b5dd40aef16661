"""Previews of rows in a materialization's metadata. Dagster's event log keeps them for good
and `forget` cannot reach it, so a preview holds no id that names a user or their session: an
erased user's quarantined bot session is shown by its times and size alone."""

from __future__ import annotations

import datetime as dt

import pytest

from incremental_assets.assets.common import preview_metadata

pytestmark = [pytest.mark.spark]

IDS = ("bot-device-1", "bot-session-1", "bot-login-1")


def test_the_quarantined_sessions_preview_holds_no_user_or_session_id(spark):
    start = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    quarantined = spark.createDataFrame(
        [(IDS[1], IDS[0], IDS[2], start, start + dt.timedelta(days=4), 17, start + dt.timedelta(days=3, hours=6))],
        "domain_sessionid string, domain_userid string, user_id string, start_tstamp timestamp, "
        "end_tstamp timestamp, event_count long, quarantined_at timestamp")

    preview = preview_metadata(quarantined.collect(), quarantined.schema)["preview"].value
    shown = [dict(record.data) for record in preview.records]
    assert len(shown) == 1 and shown[0]["event_count"] == 17  # the session is still shown
    held = {str(value) for row in shown for value in row.values()} | {c.name for c in preview.schema.columns}
    assert not set(IDS) & held, shown
    assert not {"domain_sessionid", "domain_userid", "user_id"} & {c.name for c in preview.schema.columns}
