"""Dagster's storage as deploy/dagster.yaml configures it (resources/postgres_storage.py): a
process keeps its PostgreSQL connections instead of opening one per statement, and survives a
server restart and concurrent threads."""

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, AssetMaterialization, DagsterInstance
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from deploy.stack import Stack, deployed_storage

WRITES = 60


@pytest.fixture(scope="module")
def server():
    directory = Path(tempfile.mkdtemp(prefix="pg-storage-"))
    directory.chmod(0o755)  # PostgreSQL runs as `postgres` when the tests run as root
    stack = Stack(directory=directory)
    try:
        stack.start_postgres()
        yield stack
    finally:
        stack.down()
        shutil.rmtree(directory, ignore_errors=True)


def instance_of(home: Path, storage: dict) -> DagsterInstance:
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump({**storage, "telemetry": {"enabled": False}}))
    return DagsterInstance.from_config(str(home))


def sessions_opened(server: Stack, database: str) -> int:
    """Connections the server has accepted to `database` so far (PostgreSQL 14 and later)."""
    return int(server.query(f"SELECT sessions FROM pg_stat_database WHERE datname = '{database}'"))


def write_and_read(instance: DagsterInstance, count: int, asset: str = "events") -> None:
    for k in range(count):
        # Tagged with a data version, as a run's materializations are: Dagster indexes that tag,
        # after asking whether its table exists.
        instance.report_runless_asset_event(AssetMaterialization(asset, partition=str(k),
                                                                 tags={DATA_VERSION_TAG: str(k)}))
        instance.get_latest_materialization_event(AssetKey(asset))


def test_the_deployed_storage_keeps_its_connections(server, tmp_path):
    pooled = instance_of(tmp_path / "pooled", deployed_storage(server.fresh_database("pooled")))
    storage = pooled.get_ref().storage_data  # by name: this module is collected without dagster-postgres too
    assert (storage.module_name, storage.class_name) == ("resources.postgres_storage", "PooledPostgresStorage")
    stock = instance_of(tmp_path / "stock", {"storage": {"postgres": {"postgres_url": server.fresh_database("stock")}}})

    opened = {}
    for name, instance in (("pooled", pooled), ("stock", stock)):
        before = sessions_opened(server, name)
        write_and_read(instance, WRITES)
        opened[name] = sessions_opened(server, name) - before
        assert instance.get_latest_materialization_event(AssetKey("events")).asset_materialization.partition == \
            str(WRITES - 1)
    print(f"connections opened for {WRITES} event writes and reads: {opened}")
    assert opened["stock"] >= 2 * WRITES  # the stock storage: at least one per statement
    assert opened["pooled"] <= 3  # one per storage (run, event log, schedule), kept


def test_a_server_restart_costs_a_reconnect_not_an_error(server, tmp_path):
    instance = instance_of(tmp_path / "home", deployed_storage(server.fresh_database("restarted")))
    write_and_read(instance, 3)
    server.restart_postgres()
    write_and_read(instance, 3, asset="after_restart")  # the kept connections died with the server
    assert instance.get_latest_materialization_event(AssetKey("after_restart")) is not None


def test_threads_of_one_process_share_the_storage(server, tmp_path):
    instance = instance_of(tmp_path / "home", deployed_storage(server.fresh_database("threads")))
    with ThreadPoolExecutor(max_workers=8) as pool:  # a thread's error is raised here
        list(pool.map(lambda n: write_and_read(instance, 10, asset=f"thread_{n}"), range(8)))
    for n in range(8):
        assert instance.get_latest_materialization_event(AssetKey(f"thread_{n}")).asset_materialization.partition == "9"
