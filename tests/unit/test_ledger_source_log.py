"""The hour ledger knows which Delta log each hour was processed from: a source table deleted
and written again at its path (its log restarts at version 0), or the source setting pointed at
another table, changes the hours whose files differ, however the new log's commits look."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from incremental_assets.names import HOUR_LEDGER
from incremental_assets.settings import Settings
from incremental_assets.sources.load_hours import source_snapshot
from incremental_assets.state.progress import plan_next_run
from resources.manifest import ManifestStore
from tests.differential import hostile
from tests.differential.hostile import at

HOUR = at(1, 9)
NOW = at(3)


def _rows(tag: str, count: int, hour=HOUR) -> list[dict]:
    return [hostile.event(hour + timedelta(minutes=5 * i), event_id=f"{tag}-{i}", session=f"{tag}-s",
                          load=hour + timedelta(minutes=30 + i)) for i in range(count)]


def _settings(monkeypatch, source: str, warehouse) -> Settings:
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", source)
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(warehouse))
    monkeypatch.setenv("INCREMENTAL_START_DATE", at(0).date().isoformat())
    monkeypatch.delenv("INCREMENTAL_APP_IDS", raising=False)
    return Settings.load()


def _record_processed(settings: Settings, source: str) -> None:
    """The ledger row the hourly step writes for HOUR processed from the source as it is now."""
    snapshot = source_snapshot(source, HOUR, HOUR + timedelta(hours=1))
    write_deltalake(settings.table_path(HOUR_LEDGER), pa.table({
        "load_hour_tstamp": pa.array([HOUR], pa.timestamp("us", "UTC")),
        "source_fingerprint": [snapshot.fingerprints[HOUR]],
        "rules_digest": [settings.rules_digest()],
        "processed_at": pa.array([at(2)], pa.timestamp("us", "UTC")),
        "run_id": ["r1"],
        "source_version": pa.array([snapshot.version], pa.int64()),
        "app_ids": pa.array([None], pa.string()),
        "source_table_id": [DeltaTable(source).metadata().id],
    }))


def _plan(settings: Settings):
    return plan_next_run(settings, NOW, ManifestStore.of(settings).snapshot())


def test_a_source_deleted_and_written_again_at_its_path_makes_its_hours_changed(tmp_path, monkeypatch):
    source = str(tmp_path / "events")
    settings = _settings(monkeypatch, source, tmp_path / "warehouse")
    for tag in ("a", "b", "c"):  # versions 0 to 2
        hostile.write_source(source, _rows(tag, 2))
    _record_processed(settings, source)
    assert _plan(settings).ranges == []

    shutil.rmtree(source)
    hostile.write_source(source, _rows("new", 1))  # other rows in the same hour, at version 0
    plan = _plan(settings)
    assert plan.hours.changed == [HOUR], plan.describe()


def test_a_source_pointed_at_another_table_makes_its_hours_changed(tmp_path, monkeypatch):
    """The other table's commits after the recorded version only compact its files: read as the
    same log, they would say the hour's rows are the ones processed."""
    first, other = str(tmp_path / "events"), str(tmp_path / "other_events")
    settings = _settings(monkeypatch, first, tmp_path / "warehouse")
    for tag in ("a", "b", "c"):  # versions 0 to 2
        hostile.write_source(first, _rows(tag, 2))
    _record_processed(settings, first)

    hostile.write_source(other, _rows("x", 1))  # other rows in the same hour
    hostile.write_source(other, _rows("y", 1))
    hostile.write_source(other, _rows("z", 1, hour=at(1, 11)))  # version 2: another hour
    assert DeltaTable(other).optimize.compact()["numFilesRemoved"] > 1  # version 3: no data change
    settings = _settings(monkeypatch, other, tmp_path / "warehouse")
    plan = _plan(settings)
    assert plan.hours.changed == [HOUR], plan.describe()
