"""Fixtures shared by the integration tests."""
import pytest
from dagster import instance_for_test

from incremental_assets.settings import Settings


@pytest.fixture
def empty_warehouse_settings(tmp_path, monkeypatch) -> Settings:
    """Settings of a warehouse and source under tmp_path (neither exists yet), from 2026-01-05."""
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "source"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", "2026-01-05")
    return Settings.load()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A source path (not written yet) and a Dagster instance, the warehouse beside them, from
    2026-01-05: the sensors' tests drive the ticks over it."""
    source = tmp_path / "source"
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(source))
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_START_DATE", "2026-01-05")
    with instance_for_test() as instance:
        yield source, instance
