"""Staged-write directories a crashed process left behind are swept; live ones are kept."""

import os
import time

from resources.tables.staging import STALE_STAGING_SECONDS, sweep_stale_staging


def _staged_dir(root, name: str, age_seconds: float):
    path = root / "_staging" / name
    (path / "_temporary").mkdir(parents=True)
    (path / "part-0.parquet").write_bytes(b"x")
    then = time.time() - age_seconds
    os.utime(path, (then, then))
    return path


def test_sweep_removes_only_directories_older_than_the_limit(tmp_path):
    crashed = _staged_dir(tmp_path, "crashed", STALE_STAGING_SECONDS + 60)
    in_progress = _staged_dir(tmp_path, "in_progress", 5)

    removed = sweep_stale_staging(str(tmp_path))

    assert removed == ["crashed"]
    assert not crashed.exists()
    assert (in_progress / "part-0.parquet").exists()


def test_sweep_of_a_warehouse_without_staging_is_a_no_op(tmp_path):
    assert sweep_stale_staging(str(tmp_path)) == []
    assert not (tmp_path / "_staging").exists()


def test_sweep_age_limit_is_configurable(tmp_path):
    _staged_dir(tmp_path, "ten_minutes_old", 600)
    assert sweep_stale_staging(str(tmp_path), older_than=3600) == []
    assert sweep_stale_staging(str(tmp_path), older_than=60) == ["ten_minutes_old"]
