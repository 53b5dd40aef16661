"""The stack with its warehouse and source on an S3-compatible object store (`deploy/stack.py
--object-store`: a moto server on loopback), as a cluster without a shared disk runs it.

The Spark standalone workers write through S3A (each with a scratch directory of its own),
delta-rs commits through S3's conditional writes, and no file is local: the warehouse is
`s3://lake/warehouse` and the source is named `s3a://lake/source` (Spark's spelling; delta-rs
and pyarrow get `s3://`). The daemon's sensors process the source's hours, table maintenance
compacts and vacuums the tables on the store, a second batch of loads (with late events)
follows, and every table equals a local-mode run over the same source. Separately, two
processes commit to the processing manifest on the object store at once: no commit is lost,
and of two claims of one item exactly one wins.
"""

import os
import re
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from deploy.stack import BUCKET, REPO, Stack
from incremental_assets.planning.processing_manifest import ItemStatus
from resources.manifest import ManifestStore
from resources.object_store import filesystem
from tests.deployment.daemon_runs import NOW, T0, hour, sample_events, stack_directory, succeeded, wait_until
from tests.live import assert_tables_equal_a_local_run, settled, write_loads

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WAREHOUSE, SOURCE = f"s3://{BUCKET}/warehouse", f"s3a://{BUCKET}/source"
MAINTENANCE_TIMEOUT_SECONDS = 600


@pytest.fixture(scope="module")
def events(spark):
    return sample_events(spark, seed=11)


def new_stack(request, env: dict[str, str], monkeypatch) -> Stack:
    # Each run a Spark driver of its own on the master (the stack's other way; test_stack.py
    # covers the Connect server): its executors write through S3A with no shared disk.
    stack = Stack.up(stack_directory(request), env, spark_connect=False, object_store=True)
    request.addfinalizer(stack.down)
    for name, value in stack.object_store_env().items():  # this process reads the store too
        monkeypatch.setenv(name, value)
    return stack


def upload(local: Path, uri: str) -> int:
    """Copy what is new or changed in the local Delta table `local` to `uri`: data files
    first, the log last, so that no reader sees a commit before its files. How many files."""
    store, root = filesystem(uri)
    present = {info.path: info.size for info in store.get_file_info(
        pafs.FileSelector(root, recursive=True, allow_not_found=True)) if info.type == pafs.FileType.File}
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: ("_delta_log" in p.parts, str(p)))
    copied = 0
    for path in files:
        target = f"{root}/{path.relative_to(local).as_posix()}"
        if present.get(target) != path.stat().st_size:
            with store.open_output_stream(target) as out:
                out.write(path.read_bytes())
            copied += 1
    return copied


def objects_under(uri: str) -> list[str]:
    store, root = filesystem(uri)
    return [info.path for info in store.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
            if info.type == pafs.FileType.File]


def test_the_cluster_on_an_object_store_matches_local_mode(spark, events, tmp_path, monkeypatch, request):
    source = tmp_path / "source"
    assert write_loads(events, source, hour(0), hour(6)) > 0
    env = {"INCREMENTAL_WAREHOUSE": WAREHOUSE, "INCREMENTAL_SOURCE_PATH": SOURCE,
           "INCREMENTAL_START_DATE": T0.date().isoformat(), "INCREMENTAL_SENSOR_CLOCK": NOW.isoformat(),
           "INCREMENTAL_SENSOR_INTERVAL_SECONDS": "30",
           "INCREMENTAL_ATTRIBUTES_AS_OF": (NOW.date() + timedelta(days=1)).isoformat(),
           # Every hourly step holds its wide sets as files on the store, as a big window's are.
           "INCREMENTAL_CHECKPOINT_VALUES_MAX": "0"}
    stack = new_stack(request, env, monkeypatch)
    assert upload(source, SOURCE) > 0
    monkeypatch.setenv("DAGSTER_PG_URL", stack.pg_url)
    instance = DagsterInstance.from_config(str(stack.dagster_home))
    request.addfinalizer(instance.dispose)

    wait_until("the sensor's first hourly run", lambda: succeeded(instance, "hourly_job"), stack)
    wait_until("a daily run after the first hours", lambda: succeeded(instance, "daily_job"), stack)
    wait_until("attributes after the first hours", lambda: succeeded(instance, "attributes_job"), stack)
    wait_until("every run to finish", lambda: settled(instance), stack)
    before = {job: len(succeeded(instance, job)) for job in ("hourly_job", "daily_job", "attributes_job")}

    # Table maintenance on the store, as its daily schedule runs it: compaction commits through
    # delta-rs's conditional writes and vacuum deletes objects (retention 0: nothing else runs
    # now). The second batch's runs then write to compacted, vacuumed tables.
    files_before, files_after, deleted = maintained(stack, env)
    assert files_after < files_before and deleted > 0, (files_before, files_after, deleted)

    # A second batch of loads: the sensor runs the new hours, then the days they touched
    # (late events among them) and attributes again, each waited for (the instance may be
    # quiet for a while between a run and the sensor tick that follows it).
    assert write_loads(events, source, hour(6), hour(10)) > 0
    assert upload(source, SOURCE) > 0
    for job, what in (("hourly_job", "the sensor's run of the new hours"),
                      ("daily_job", "the days the new hours touched"), ("attributes_job", "attributes again")):
        wait_until(what, lambda: len(succeeded(instance, job)) > before[job], stack)
    wait_until("every run to finish", lambda: settled(instance), stack)
    assert not instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.FAILURE]))

    # Nothing was written on a local disk for the warehouse, and no staged write or set was left behind.
    assert objects_under(f"{WAREHOUSE}/base_events")
    assert objects_under(f"{WAREHOUSE}/_staging") == []
    assert not list(REPO.glob(f"{BUCKET}*")) and not Path(WAREHOUSE).exists()

    # Local mode over the same source (its local copy) gives the same tables.
    assert_tables_equal_a_local_run(WAREHOUSE, NOW, {**env, "INCREMENTAL_SOURCE_PATH": str(source)},
                                    monkeypatch, tmp_path / "local_warehouse")


def maintained(stack: Stack, env: dict[str, str]) -> tuple[int, int, int]:
    """`incremental-assets maintain` with the runs' environment (a driver on the cluster, the
    warehouse on the store): files before and after, and files deleted."""
    done = subprocess.run([sys.executable, "-m", "incremental_assets.cli", "maintain", "--now", NOW.isoformat()],
                          env={**stack.dagster_env(env), "INCREMENTAL_VACUUM_RETENTION_HOURS": "0",
                               "INCREMENTAL_VACUUM_MIN_RETENTION_HOURS": "0"},
                          capture_output=True, text=True, timeout=MAINTENANCE_TIMEOUT_SECONDS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.search(r"^done: (\d+) -> (\d+) files in \d+ tables, (\d+) deleted from disk$", done.stdout, re.M)
    assert found, done.stdout[-3000:]
    return int(found[1]), int(found[2]), int(found[3])


# Two processes commit to one manifest on the object store: each claims and closes its own
# items, and both claim one shared item, all at the same moment.
_COMMITTER = textwrap.dedent("""
    import os, sys, time
    from resources.manifest import ItemLockedError, ManifestStore
    from incremental_assets.planning.processing_manifest import State
    store, name, go = ManifestStore(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, go - time.time()))
    never_finished = lambda lock: None
    try:
        store.claim(["shared/item"], application="test", run_id=name, run_finished=never_finished)
        print("won shared/item")
    except ItemLockedError:
        print("lost shared/item")
    for n in range(6):
        item = f"{name}/{n}"
        store.claim([item], application="test", run_id=name, run_finished=never_finished)
        store.close([item], run_id=name, state=State.PROCESSED, application="test")
""")


def test_two_processes_committing_to_the_manifest_on_the_object_store_lose_nothing(tmp_path, monkeypatch, request):
    stack = Stack(directory=tmp_path / "stack")
    request.addfinalizer(stack.down)
    stack.start_object_store()
    for name, value in stack.object_store_env().items():
        monkeypatch.setenv(name, value)
    manifest = f"s3://{BUCKET}/warehouse/processing_manifest"
    ManifestStore(manifest).skip(["warm/up"], note="creates the table before the race")
    go = time.time() + 8  # both start their first commit at this instant
    children = [subprocess.Popen([sys.executable, "-c", _COMMITTER, manifest, name, str(go)], cwd=REPO,
                                 env={**os.environ, **stack.object_store_env()},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for name in ("run-a", "run-b")]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    assert sorted(line for out in outputs for line in out.splitlines() if "shared/item" in line) == [
        "lost shared/item", "won shared/item"], outputs

    states = ManifestStore(manifest).states()
    for name in ("run-a", "run-b"):
        for n in range(6):
            assert states[f"{name}/{n}"].status is ItemStatus.READY, (name, n)
            assert [r.state.name for r in states[f"{name}/{n}"].records] == ["PROCESSING", "PROCESSED"]
    assert states["shared/item"].status is ItemStatus.LOCKED
    assert len(states["shared/item"].records) == 1  # one claim landed, not two
    # Every record committed is there once: the warm-up, the winning claim, 2 x 6 x 2.
    assert len(ManifestStore(manifest).records()) == 1 + 1 + 24
