"""The pipeline through Spark Connect (`make stack-up` runs the same server):
a Connect server started from the installed pyspark, its driver on a standalone master with two
workers, all on loopback. The CLI, pointed at it with SPARK_REMOTE, processes the source in
two runs (new and late hours). The server killed, its supervisor starts it again on the same
port and the next run goes through it; the tables equal a local-mode run over the same source.
With the server gone for good (its supervisor too), a run fails in seconds with one line that
names it, and holds no lock.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from dagster import AssetKey, DagsterInstance

from deploy.stack import HOST, Stack, wait_for_port
from resources.manifest import ManifestStore
from tests.live import assert_tables_equal_a_local_run, moved_in_time, write_loads

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = datetime(2026, 1, 7, 2, tzinfo=timezone.utc)
SAMPLE_START, SAMPLE_HOUR_0 = date(2026, 1, 4), datetime(2026, 1, 6, tzinfo=timezone.utc)
# The CLI's two runs: after the first six load hours, then after three more; then one more
# hour after the server was started again.
FIRST_UNTIL, SECOND_UNTIL = T0 + timedelta(hours=6, minutes=5), T0 + timedelta(hours=9, minutes=5)
AFTER_RESTART_UNTIL = SECOND_UNTIL + timedelta(hours=1)
CLI_TIMEOUT_SECONDS = 900


def connect_client_packages_missing() -> str | None:
    missing = [name for name in ("grpc_status", "google.rpc", "zstandard") if importlib.util.find_spec(name) is None]
    return (f"PySpark's Connect client packages are missing ({', '.join(missing)}); `make test-deployment` "
            "installs them") if missing else None


@pytest.fixture(scope="module")
def events(spark):
    from incremental_assets.sources.generator import generate_events_df

    sample = generate_events_df(spark, events=700, days=3, start=SAMPLE_START, seed=11)
    return moved_in_time(sample, T0 - SAMPLE_HOUR_0).cache()


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def cli_run(env: dict[str, str], until: datetime) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "incremental_assets.cli", "run", "--until", until.isoformat()],
                          env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS)


def test_the_pipeline_through_spark_connect_on_the_cluster_equals_local_mode(
        spark, events, tmp_path, monkeypatch, request):
    if (missing := connect_client_packages_missing()) is not None:
        pytest.skip(missing)
    source, connect_warehouse = tmp_path / "source", tmp_path / "connect_warehouse"
    # Attributes count the days before their as-of day: the day after the data.
    settings_env = {"INCREMENTAL_SOURCE_PATH": str(source), "INCREMENTAL_START_DATE": T0.date().isoformat(),
                    "INCREMENTAL_ATTRIBUTES_AS_OF": (SECOND_UNTIL.date() + timedelta(days=1)).isoformat()}
    stack_dir = Path(tempfile.mkdtemp(prefix="incremental-connect-"))
    request.addfinalizer(lambda: shutil.rmtree(stack_dir, ignore_errors=True))
    stack = Stack(directory=stack_dir)
    try:
        stack.start_spark()
        stack.start_connect()
        (tmp_path / "dagster_home").mkdir()
        env = {**os.environ, **settings_env, **stack.spark_client_env(),
               "INCREMENTAL_WAREHOUSE": str(connect_warehouse), "DAGSTER_HOME": str(tmp_path / "dagster_home"),
               "NO_PROXY": HOST, "no_proxy": HOST}
        env.pop("INCREMENTAL_SPARK_MASTER", None)

        # Hour by hour: the first six load hours, then three more (late events among them). The
        # first run holds its wide sets as files, as a big window's are (checkpoint_values_max
        # 0): the server's executors write them, this process removes them.
        as_files = {"INCREMENTAL_CHECKPOINT_VALUES_MAX": "0"}
        for until, (first, last), extra in ((FIRST_UNTIL, (0, 6), as_files), (SECOND_UNTIL, (6, 9), {})):
            assert write_loads(events, source, T0 + timedelta(hours=first), T0 + timedelta(hours=last)) > 0
            done = cli_run({**env, **extra}, until)
            assert done.returncode == 0, f"run --until {until}:\n{done.stdout}\n{done.stderr}"
            assert "failed" not in done.stdout, done.stdout
            assert not list((connect_warehouse / "_staging").glob("*")), "staged sets left behind"
        with DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
            records = instance.fetch_materializations(AssetKey("sessions_lifecycle_manifest"), limit=100).records
        held_as = {r.asset_materialization.metadata["wide_rows_held_as"].value for r in records
                   if "wide_rows_held_as" in r.asset_materialization.metadata}
        assert held_as == {"files", "checkpoints"}, held_as  # the first run's, the second's

        # Every run went through the Connect server: the master lists only its application,
        # still running, and no run started a driver of its own.
        master = requests.get(f"http://{HOST}:{stack.spark_ui_port}/json/", timeout=30,
                              proxies={"http": None}).json()
        assert master["aliveworkers"] == 2
        assert [app["name"] for app in master["activeapps"]] == ["incremental-assets-connect"]
        assert master["completedapps"] == []

        # The server dies, its supervisor does not: the server is started again on the same
        # port, and the next run goes through it.
        [server] = children(stack.pids["spark-connect"])
        os.kill(server, 9)
        assert write_loads(events, source, T0 + timedelta(hours=9), T0 + timedelta(hours=10)) > 0
        deadline = time.monotonic() + 60
        while server in children(stack.pids["spark-connect"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert wait_for_port(stack.connect_port, timeout=240), "the Connect server was not started again"
        assert children(stack.pids["spark-connect"]) != [server]
        done = cli_run(env, AFTER_RESTART_UNTIL)
        assert done.returncode == 0, (f"run --until {AFTER_RESTART_UNTIL} after the restart:\n"
                                      f"{done.stdout}\n{done.stderr}")

        # The server gone for good (its supervisor too): the next run fails within seconds,
        # says which server, and leaves no manifest item locked.
        os.killpg(stack.pids.pop("spark-connect"), 9)
        hour = next(h for h in range(10, 24)  # the next load hour that holds rows (some hold none)
                    if write_loads(events, source, T0 + timedelta(hours=h), T0 + timedelta(hours=h + 1)) > 0)
        started = time.monotonic()
        refused = cli_run(env, T0 + timedelta(hours=hour + 1, minutes=5))
        assert refused.returncode != 0
        assert f"Spark Connect server {stack.spark_remote} is not reachable" in refused.stdout + refused.stderr
        assert time.monotonic() - started < 120
        states = ManifestStore(str(connect_warehouse / "processing_manifest")).states().values()
        assert [s for s in states if s.open_lock is not None] == []
    finally:
        stack.down()
    assert not stack.running()

    # Local mode over the same source (the hours the Connect runs saw) gives the same tables.
    assert_tables_equal_a_local_run(connect_warehouse, AFTER_RESTART_UNTIL, settings_env, monkeypatch,
                                    tmp_path / "local_warehouse")
