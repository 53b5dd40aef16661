"""Every Delta table the product creates checkpoints its log every 10 commits, and compaction
checkpoints (and sets that interval on) a table created without it: each load of a table then
reads a checkpoint and a few commits, not every commit since the table began (delta-rs writes a
checkpoint every 100 commits by default)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from resources.manifest import ManifestStore
from resources.tables import append_arrow
from resources.tables.stores import table_store
from tests.delta_reads import read_table

pytestmark = pytest.mark.spark

ROWS = pa.table({"n": pa.array([1, 2], pa.int64())})


def checkpoints(path: Path) -> list[int]:
    """The versions the table's log holds a checkpoint of."""
    return sorted(int(p.name.split(".")[0]) for p in (path / "_delta_log").glob("*.checkpoint.parquet"))


def interval(path: Path) -> str | None:
    return DeltaTable(str(path)).metadata().configuration.get("delta.checkpointInterval")


def test_a_table_the_store_creates_checkpoints_every_ten_commits(spark, tmp_path):
    store = table_store(spark, str(tmp_path), engine="delta-rs")
    store.append("t", spark.createDataFrame([(1,)], "n long"))  # version 0, created by the store
    for _ in range(11):
        write_deltalake(str(tmp_path / "t"), ROWS, mode="append")  # any writer keeps the table's interval

    assert interval(tmp_path / "t") == "10"
    assert checkpoints(tmp_path / "t") == [9]  # at the tenth commit (versions 0 to 11)
    assert store.read("t").count() == 1 + 11 * 2


def test_small_tables_and_the_manifest_are_created_with_the_interval(tmp_path):
    append_arrow(str(tmp_path / "ledger"), ROWS)
    append_arrow(str(tmp_path / "ledger"), ROWS)
    ManifestStore(str(tmp_path / "manifest")).skip(["base_events/2026-01-05-00:00"], note="created")

    assert interval(tmp_path / "ledger") == "10"
    assert read_table(tmp_path / "ledger").num_rows == 4
    assert interval(tmp_path / "manifest") == "10"


def test_compaction_checkpoints_an_older_table_and_gives_it_the_interval(spark, tmp_path):
    path = tmp_path / "old"
    for _ in range(5):
        write_deltalake(str(path), ROWS, mode="append")  # delta-rs's defaults: no interval, no checkpoint
    assert interval(path) is None and checkpoints(path) == []
    store = table_store(spark, str(tmp_path), engine="delta-rs")

    assert store.compact("old") == 5
    latest = DeltaTable(str(path)).version()
    assert interval(path) == "10"
    assert checkpoints(path) == [latest]
    assert sorted(read_table(path).column("n").to_pylist()) == [1] * 5 + [2] * 5
    # Loading from the checkpoint sees the same table as replaying every commit would.
    assert DeltaTable(str(path)).file_uris() == DeltaTable(str(path), version=latest).file_uris()
    assert store.read("old").count() == 10
