"""One small generated lake for the crash and race tests, the warehouse after a first run on
it (the starting point each test copies), and the tables an uninterrupted second run gives."""

from __future__ import annotations

import pytest

from tests.reliability.helpers import (
    FIRST_RUN,
    LAKE_START,
    SECOND_RUN,
    copy_warehouse,
    run_in_process,
    snapshot,
)


@pytest.fixture(scope="session")
def lake(spark, tmp_path_factory) -> str:
    from incremental_assets.sources.generator import generate_events

    path = tmp_path_factory.mktemp("reliability_lake") / "events"
    generate_events(spark, events=400, days=1, start=LAKE_START, out=str(path), seed=3,
                    progress=lambda *_: None)
    return str(path)


@pytest.fixture(scope="session")
def after_first_run(lake, tmp_path_factory):
    """A warehouse after `run --until FIRST_RUN`: copy it, never change it."""
    warehouse = tmp_path_factory.mktemp("after_first_run") / "warehouse"
    report = run_in_process(FIRST_RUN, lake, warehouse)
    assert report.success, report.runs
    return warehouse


@pytest.fixture(scope="session")
def second_run_tables(lake, after_first_run, tmp_path_factory):
    """Every table after an uninterrupted `run --until SECOND_RUN` from after_first_run."""
    warehouse = copy_warehouse(after_first_run, tmp_path_factory.mktemp("second_run") / "warehouse")
    report = run_in_process(SECOND_RUN, lake, warehouse)
    assert report.success, report.runs
    return snapshot(warehouse)
