"""Shared fixtures: one local Spark session for the whole test session."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from resources.spark import LOCAL_DEFAULTS

REPO = Path(__file__).resolve().parent.parent
PEER = REPO.parent / "shared" / "peer"

# Tests must never pick up a developer's own settings.
for _name in list(os.environ):
    if _name.startswith("INCREMENTAL_"):
        del os.environ[_name]

TEST_SPARK_CONF = {
    # Tests run thousands of tiny Spark jobs: the JVM's C1 compiler alone spends far less CPU
    # compiling them (a third less on one test process at the same wall time), which the other
    # test process, on the same 2 cores, gets instead. C1 alone reserves only 48 MB for compiled
    # code, which a test process filled within a minute: the JVM then stops compiling for good
    # ("CodeCache is full. Compiler has been disabled") and runs every later test interpreted.
    "spark.driver.extraJavaOptions": LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]
    + " -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m",
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "4g",  # one JVM for the whole session (the machine has 24 GB)
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(autouse=True)
def release_jvm_references():
    """After each test, collect Python's reference cycles: they hold Py4J references to the
    test's DataFrames, and the one JVM of the session must be able to free them (see
    `incremental_assets.process_memory.release_jvm_references`)."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def spark():
    from resources.spark import get_spark

    session = get_spark(TEST_SPARK_CONF)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def peer_dir() -> Path:
    if not PEER.is_dir():
        pytest.skip(f"peer data not found at {PEER} (it lives in shared/ beside the checkout)")
    return PEER
