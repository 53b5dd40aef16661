"""The benchmark's Dagster storage: each instance starts empty, a process started on its home
uses the same storage, and an unknown kind is refused by name. (The PostgreSQL kind starts a
server; `make bench` runs it, and tests/deployment covers that server.)"""

import pytest
import yaml

from bench.dagster_storage import DagsterStorage


def test_sqlite_homes_start_empty_and_keep_runs_under_the_home(tmp_path):
    with DagsterStorage("sqlite", tmp_path / "unused") as storage:
        home = tmp_path / "history_3d_dagster"
        home.mkdir()
        (home / "left_by_an_earlier_run").write_text("x")

        instance = storage.instance(home)

        assert not (home / "left_by_an_earlier_run").exists()
        config = yaml.safe_load((home / "dagster.yaml").read_text())
        assert config["telemetry"] == {"enabled": False}
        assert config["storage"]["custom"]["config"] == {"base_dir": str(home.resolve())}
        assert instance.root_directory == str(home)
        # The local instance's storage: Dagster's SQLite files, connections kept.
        assert type(instance.event_log_storage).__name__ == "KeptConnectionsEventLogStorage"
        assert (home / "history" / "runs.db").exists()
        assert not (tmp_path / "unused").exists()  # no server for SQLite


def test_an_unknown_storage_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="'mysql'"):
        DagsterStorage("mysql", tmp_path)
