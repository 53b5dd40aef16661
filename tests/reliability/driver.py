"""The child process of the reliability tests: patch one point of the pipeline, then run it.

    python tests/reliability/driver.py [--kill POINT [--target NAME]] [--slow SECONDS]
        [--barrier DIR] (--hours FIRST LAST | -- CLI ARGS ...)

Kill points (the process SIGKILLs itself, like `kill -9` or the OOM killer would):
  spark-job         from inside a Spark task reading the source for the hourly step
  before-processed  after asset NAME's data commits, before its PROCESSED record
  delta-commit      after table NAME's data files are written, before its commit is published
  pending-write     while the daily ledger's pending counts are committed
  manifest-commit   while the manifest commits the hourly step's PROCESSED records
--slow holds the hourly step for SECONDS after it claimed its items (a long computation).
--barrier: once Spark is up, create DIR/ready-<pid> and wait for DIR/go (so two processes
start their runs at the same moment).
--hours runs only hourly_job over the hourly partitions FIRST..LAST; otherwise the
`incremental-assets` CLI runs with the given arguments.
Nothing here is imported by the product: the patches live only in this process.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from pathlib import Path


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_in_spark_job() -> None:
    """Every source read of base_events gets a filter whose Python UDF kills this driver."""
    from pyspark.sql import functions as F

    import incremental_assets.steps.hourly_compute as hourly

    driver_pid = os.getpid()

    def kill_driver(_value):
        os.kill(driver_pid, signal.SIGKILL)
        time.sleep(60)  # the task never finishes: the driver is gone
        return True

    kill_udf = F.udf(kill_driver, "boolean")
    real_read_source = hourly.read_source

    def read_source(*args, **kwargs):
        return real_read_source(*args, **kwargs).where(kill_udf(F.col("event_id")))

    hourly.read_source = read_source


def kill_before_processed(asset: str) -> None:
    from incremental_assets.planning.processing_manifest import State
    from resources.manifest import ManifestStore
    from resources.manifest_items import split_item_id

    real_close = ManifestStore.close

    def close(self, items, *, state, **kwargs):
        if state is State.PROCESSED and any(split_item_id(item)[0] == asset for item in items):
            die()
        return real_close(self, items, state=state, **kwargs)

    ManifestStore.close = close


def take_back_last_commit(path: str) -> None:
    """Rename a Delta table's newest log entry back to the temporary name a writer uses before
    the atomic rename that publishes it: its data files stay on disk, unpublished."""
    log = Path(path) / "_delta_log"
    newest = max(log.glob("[0-9]*.json"))
    newest.rename(log / f"_commit_{uuid.uuid4()}.json.tmp")


def kill_in_delta_commit(table: str) -> None:
    """Table `table`'s next write runs, then its commit is taken back and the process dies: the
    data files are on disk, the commit was never published."""
    from resources.tables.delta_rs import DeltaRsTableStore

    def killing(real):
        def write(self, name, *args, **kwargs):
            result = real(self, name, *args, **kwargs)
            if name == table:
                take_back_last_commit(self.path(name))
                die()
            return result
        return write

    for method in ("replace", "replace_keys", "overwrite", "append", "merge"):
        setattr(DeltaRsTableStore, method, killing(getattr(DeltaRsTableStore, method)))


def kill_in_pending_write() -> None:
    """The daily ledger's pending counts are written, then taken back, and the process dies."""
    import incremental_assets.state.day_ledger as ledger
    from incremental_assets.names import DAY_LEDGER
    from incremental_assets.settings import Settings

    real = ledger.record_pending

    def record_pending(settings: Settings, new_pending):
        real(settings, new_pending)
        if new_pending:
            take_back_last_commit(settings.table_path(DAY_LEDGER))
            die()

    ledger.record_pending = record_pending


def kill_in_manifest_commit() -> None:
    """The processing manifest's commit of the hourly step's PROCESSED records is written, then
    taken back, and the process dies."""
    import resources.manifest as manifest

    real = manifest.write_deltalake

    def write_deltalake(target, data, **kwargs):
        real(target, data, **kwargs)
        if "PROCESSED" in data.column("state").to_pylist() and any(
                item.startswith("base_events/") for item in data.column("item_id").to_pylist()):
            take_back_last_commit(target if isinstance(target, str) else target.table_uri.removeprefix("file://"))
            die()

    manifest.write_deltalake = write_deltalake


def slow_hourly_step(seconds: float) -> None:
    """The hourly step holds its claim for `seconds` before it computes (a long computation)."""
    import incremental_assets.steps.hourly_compute as hourly

    real_validate = hourly.validate

    def validate(*args, **kwargs):
        time.sleep(seconds)
        return real_validate(*args, **kwargs)

    hourly.validate = validate


def wait_at_barrier(directory: Path, timeout: float = 600) -> None:
    (directory / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("driver: no go signal at the barrier")
        time.sleep(0.05)


def run_hours(first: str, last: str) -> int:
    from dagster import DagsterInstance

    from incremental_assets.runner import execute_job

    with DagsterInstance.get() as instance:
        run = execute_job("hourly_job", instance=instance, partitions=(first, last), echo=print)
    print(f"{run.job} run {run.run_id}: {'success' if run.success else 'failure'}")
    return 0 if run.success else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kill", choices=["spark-job", "before-processed", "delta-commit", "pending-write",
                                           "manifest-commit"])
    parser.add_argument("--target", default="")
    parser.add_argument("--slow", type=float, default=0)
    parser.add_argument("--barrier", type=Path)
    parser.add_argument("--hours", nargs=2, metavar=("FIRST", "LAST"))
    parser.add_argument("cli_args", nargs="*")
    args = parser.parse_args(argv)

    from resources.spark import get_spark

    get_spark()  # start Spark (and import the code location) before any timing matters
    import incremental_assets.definitions  # noqa: F401

    if args.kill == "spark-job":
        kill_in_spark_job()
    elif args.kill == "before-processed":
        kill_before_processed(args.target)
    elif args.kill == "delta-commit":
        kill_in_delta_commit(args.target)
    elif args.kill == "pending-write":
        kill_in_pending_write()
    elif args.kill == "manifest-commit":
        kill_in_manifest_commit()
    if args.slow:
        slow_hourly_step(args.slow)
    if args.barrier:
        wait_at_barrier(args.barrier)
    if args.hours:
        return run_hours(*args.hours)
    from incremental_assets.cli import main as cli_main

    return cli_main(args.cli_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
