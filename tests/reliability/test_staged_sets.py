"""A step whose wide sets are held as Parquet files (a big window's; here every window's, with
checkpoint_values_max 0) leaves none of them behind, whether it succeeds or fails while it
computes them, and writes the tables a step holding checkpoints writes."""

from __future__ import annotations

import pytest

from resources import materialized as materialized_module
from resources.tables import direct_write
from resources.tables import interface as table_interface
from tests.reliability.helpers import SECOND_RUN, assert_same_tables, copy_warehouse, run_in_process, snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AS_FILES = {"INCREMENTAL_CHECKPOINT_VALUES_MAX": "0"}


@pytest.fixture
def sets_as_files(monkeypatch) -> list[str]:
    """The warehouse roots each set was written under (one entry a set held as files)."""
    made: list[str] = []
    original = materialized_module.materialized

    def recording(df, *, files_under=None, partition_by=()):
        if files_under is not None:
            made.append(files_under)
        return original(df, files_under=files_under, partition_by=partition_by)

    monkeypatch.setattr(materialized_module, "materialized", recording)
    return made


def staged(warehouse) -> list[str]:
    return sorted(p.name for p in (warehouse / "_staging").glob("*"))


def test_sets_held_as_files_give_the_same_tables_and_are_removed(lake, after_first_run, second_run_tables,
                                                                  tmp_path, sets_as_files, monkeypatch):
    linked: list[bool] = []  # one entry a write that took a set's files
    original = direct_write._linked
    monkeypatch.setattr(direct_write, "_linked", lambda *args: linked.append(original(*args)) or linked[-1])
    # A window big enough for files is too big to collect: its writes go through Spark's files.
    monkeypatch.setattr(table_interface, "COLLECTED_VALUES_MAX", 0)
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    report = run_in_process(SECOND_RUN, lake, warehouse, **AS_FILES)
    assert report.success, report.runs
    assert len(sets_as_files) >= 3  # source rows, kept copies, filtered rows
    # base_events and filtered_events took the kept copies' and the filtered rows' files.
    assert linked.count(True) >= 2, linked
    assert staged(warehouse) == [], (sets_as_files, staged(warehouse))
    assert_same_tables(snapshot(warehouse), second_run_tables)


def test_a_step_failing_after_its_sets_were_written_removes_them(lake, after_first_run, tmp_path, monkeypatch,
                                                                 sets_as_files):
    from incremental_assets.steps import hourly_compute as hourly_step

    def failing(*args, **kwargs):  # runs once the filtered rows are materialized
        raise RuntimeError("the step failed after its sets were written")

    monkeypatch.setattr(hourly_step, "queue_rows", failing)
    warehouse = copy_warehouse(after_first_run, tmp_path / "warehouse")
    lines: list[str] = []
    report = run_in_process(SECOND_RUN, lake, warehouse, echo=lines.append, **AS_FILES)
    assert not report.success
    assert any("the step failed after its sets were written" in line for line in lines), lines
    assert len(sets_as_files) >= 3
    assert staged(warehouse) == [], (sets_as_files, staged(warehouse))
