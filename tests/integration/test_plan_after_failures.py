"""The plan after a failed run: an hour whose last run failed may hold part
of that run's output, so once resolved it runs again, even where the ledger (written by the run
before, which succeeded) still matches the source. Delta tables through delta-rs; no Spark."""
import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from incremental_assets.names import HOUR_LEDGER
from incremental_assets.planning.processing_manifest import State
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import SourceSnapshot
from incremental_assets.state.progress import plan_load_hours
from resources.manifest import ManifestStore
from resources.manifest_items import item_id

UTC = dt.timezone.utc
HOUR = dt.datetime(2026, 1, 5, 10, tzinfo=UTC)
NOW = dt.datetime(2026, 1, 5, 14, tzinfo=UTC)
KEY = "2026-01-05-10:00"
ITEMS = [item_id(asset, KEY) for asset in ("base_events", "sessions_lifecycle_manifest",
                                            "quarantined_sessions", "filtered_events")]


def never_released(_lock):
    return None


@pytest.fixture
def settings(empty_warehouse_settings):
    return empty_warehouse_settings


def processed_before(settings: Settings, fingerprint: str) -> None:
    """The ledger says the hour was processed from `fingerprint` (by a run that succeeded)."""
    ledger = pa.table({"load_hour_tstamp": pa.array([HOUR], pa.timestamp("us", "UTC")),
                       "source_fingerprint": [fingerprint], "rules_digest": [settings.rules_digest()],
                       "processed_at": pa.array([HOUR + dt.timedelta(hours=1)], pa.timestamp("us", "UTC")),
                       "run_id": ["run-1"], "source_version": pa.array([0], pa.int64())})
    write_deltalake(settings.table_path(HOUR_LEDGER), ledger)


def plan(settings: Settings, manifest: ManifestStore):
    snapshot = SourceSnapshot(settings.source, 0, {HOUR: "f1"})
    return plan_load_hours(settings, now=NOW, manifest=manifest, snapshot=snapshot, lock_released=never_released)


def run(manifest: ManifestStore, run_id: str, state: State) -> None:
    manifest.claim(ITEMS, application="hourly", run_id=run_id, run_finished=never_released)
    manifest.close(ITEMS, run_id=run_id, state=state, application="hourly", payload={"reason": "boom"})


def test_a_processed_hour_is_not_due(settings):
    manifest = ManifestStore(settings.table_path("processing_manifest"))
    processed_before(settings, "f1")
    run(manifest, "run-1", State.PROCESSED)
    assert plan(settings, manifest).hours.due == []


def test_a_failed_rerun_once_resolved_runs_again_although_the_ledger_matches(settings):
    manifest = ManifestStore(settings.table_path("processing_manifest"))
    processed_before(settings, "f1")
    run(manifest, "run-1", State.PROCESSED)
    run(manifest, "run-2", State.FAILED)  # a re-run (a backfill) failed after writing part of its output

    failed = plan(settings, manifest)
    assert failed.hours.due == [] and HOUR in failed.blocked  # fail-locked: waits for the operator
    manifest.resolve(ITEMS, note="fixed")
    assert plan(settings, manifest).hours.changed == [HOUR]

    run(manifest, "run-3", State.PROCESSED)  # the run that takes it (its ledger row follows)
    assert plan(settings, manifest).hours.changed == []


def test_with_auto_resolve_a_failed_rerun_runs_again(settings, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_AUTO_RESOLVE_FAILURES", "true")
    settings = Settings.load()
    manifest = ManifestStore(settings.table_path("processing_manifest"))
    processed_before(settings, "f1")
    run(manifest, "run-1", State.PROCESSED)
    run(manifest, "run-2", State.FAILED)
    assert plan(settings, manifest).hours.changed == [HOUR]
