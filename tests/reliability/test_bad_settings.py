"""Every setting with a bad value stops the CLI before anything is written: one line
"settings error: ..." naming the setting, exit 2, no traceback, no warehouse on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from incremental_assets import cli

UNTIL = "2026-01-05T03:00:00Z"

BAD_VALUES = [
    ("backfill_limit_days", "0"),
    ("backfill_limit_days", "-3"),
    ("backfill_limit_days", "ten"),
    ("lookback_window_hours", "-1"),
    ("lookback_window_hours", "nan"),
    ("max_session_days", "0"),
    ("days_late_allowed", "-1"),
    ("session_lookback_days", "0"),
    ("reprocess_days", "-1"),
    ("min_rows_to_process", "0"),
    ("start_date", "2026-13-01"),
    ("start_date", "yesterday"),
    ("attributes_as_of", "someday"),
    ("grace_period", "1 hour"),
    ("grace_period", "P1M"),
    ("grace_period", "-PT1H"),
    ("abstinent_period", "forever"),
    ("run_type", "weekly"),
    ("table_engine", "duckdb"),
    ("auto_resolve_failures", "maybe"),
    ("sensor_interval_seconds", "0"),
    ("max_lock_age_hours", "-1"),
    ("app_ids", "web,mob\nile"),
    ("event_names", "page_view,page\rping"),
    ("warehouse", "<a file>"),
]


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Where a run would write: none of these may exist after a refused command."""
    paths = {"warehouse": tmp_path / "warehouse", "dagster_home": tmp_path / "dagster_home"}
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(paths["warehouse"]))
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "lake"))
    monkeypatch.setenv("DAGSTER_HOME", str(paths["dagster_home"]))
    return paths


def set_bad_value(monkeypatch, tmp_path: Path, name: str, value: str) -> None:
    if value == "<a file>":
        value = str(tmp_path / "not_a_directory")
        Path(value).write_text("a file where the warehouse should be")
    monkeypatch.setenv(f"INCREMENTAL_{name.upper()}", value)


@pytest.mark.parametrize("command", ["limits", "run"])
@pytest.mark.parametrize("name,value", BAD_VALUES, ids=[f"{n}={v!r}" for n, v in BAD_VALUES])
def test_a_bad_setting_fails_the_cli_with_one_line_naming_it_and_writes_nothing(
        command, name, value, places, tmp_path, monkeypatch, capsys):
    set_bad_value(monkeypatch, tmp_path, name, value)
    argv = ["limits", "--now", UNTIL] if command == "limits" else ["run", "--until", UNTIL]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("incremental-assets: settings error: "), err
    assert name in err
    for path in places.values():
        assert not path.exists(), f"{path} was created by a refused command"


def test_the_installed_command_prints_one_line_and_exits_2(tmp_path):
    """The same through the real entry point, in its own process: no traceback anywhere."""
    command = Path(sys.executable).with_name("incremental-assets")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INCREMENTAL_")}
    env.update(INCREMENTAL_WAREHOUSE=str(tmp_path / "warehouse"), DAGSTER_HOME=str(tmp_path / "home"),
               INCREMENTAL_BACKFILL_LIMIT_DAYS="0")
    for argv in (["limits"], ["run", "--until", UNTIL]):
        done = subprocess.run([str(command), *argv], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done
        assert done.stdout == ""
        assert done.stderr == ("incremental-assets: settings error: backfill_limit_days=0 is not accepted; "
                               "it must be >= 1\n"), done.stderr
    assert not (tmp_path / "warehouse").exists() and not (tmp_path / "home").exists()


def test_a_bad_setting_in_dagster_run_config_fails_the_run_before_any_step(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from incremental_assets.definitions import defs

    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "lake"))
    job = defs.resolve_job_def("hourly_job")
    result = job.execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False, partition_key="2026-01-05-00:00",
        run_config={"resources": {"warehouse": {"config": {"max_session_days": 0}}}})
    assert not result.success
    messages = [e.message or "" for e in result.all_events]
    errors = [str(e.event_specific_data.error) for e in result.all_events
              if getattr(e.event_specific_data, "error", None) is not None]
    assert any("max_session_days=0 is not accepted" in text for text in messages + errors), messages
    assert not result.get_step_success_events()
    assert not (tmp_path / "warehouse").exists()
