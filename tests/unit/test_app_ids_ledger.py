"""The hour ledger's app ids: rows written before they were recorded per hour, under today's
rules and `app_ids`, read as processed for today's app ids (an upgrade reprocesses nothing);
other rows are due again."""

from datetime import datetime, timezone

import pyarrow as pa
from deltalake import write_deltalake

from incremental_assets.names import HOUR_LEDGER
from incremental_assets.settings import Settings
from incremental_assets.state.hour_ledger import processed_hours, recorded_hours

H1, H2 = datetime(2026, 1, 5, 1, tzinfo=timezone.utc), datetime(2026, 1, 5, 2, tzinfo=timezone.utc)


def test_rows_from_before_app_ids_were_kept_count_for_todays_app_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path))
    monkeypatch.setenv("INCREMENTAL_APP_IDS", "web,mobile")
    settings = Settings.load()
    older = Settings(**{**settings.__dict__, "app_ids": ("web",)})  # before mobile was added
    write_deltalake(settings.table_path(HOUR_LEDGER), pa.table({
        "load_hour_tstamp": pa.array([H1, H2], pa.timestamp("us", "UTC")),
        "source_fingerprint": ["f1", "f2"],
        "rules_digest": [settings.rules_digest_with_app_ids(), older.rules_digest_with_app_ids()],
        "processed_at": pa.array([H2, H2], pa.timestamp("us", "UTC")),
        "run_id": ["r", "r"],
    }))
    assert settings.rules_digest() != settings.rules_digest_with_app_ids()
    processed = processed_hours(settings)
    assert processed[H1].fingerprint == f"f1@{settings.rules_digest()}"  # processed for web and mobile
    assert processed[H2].fingerprint != f"f2@{settings.rules_digest()}"  # for web alone: due again, whole
    assert {hour: recorded.app_ids for hour, recorded in recorded_hours(settings).items()} == \
        {H1: frozenset({"web", "mobile"}), H2: None}


def test_without_app_ids_the_digest_is_the_one_rows_always_had(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path))
    monkeypatch.delenv("INCREMENTAL_APP_IDS", raising=False)
    settings = Settings.load()
    assert settings.rules_digest() == settings.rules_digest_with_app_ids()
