"""What the reliability tests share: their settings, table snapshots, child processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
from deltalake import DeltaTable

from tests.delta_reads import read_table

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")

LAKE_START = date(2026, 1, 5)
FIRST_RUN = datetime(2026, 1, 5, 1, tzinfo=timezone.utc)  # load hour 00:00
SECOND_RUN = datetime(2026, 1, 5, 6, tzinfo=timezone.utc)  # load hours 01:00 .. 05:00: killed or raced
SETTINGS = {
    "INCREMENTAL_START_DATE": "2026-01-05",
    "INCREMENTAL_LOOKBACK_WINDOW_HOURS": "0",
    "INCREMENTAL_ATTRIBUTES_AS_OF": "2026-01-07",
}
CHILD_SPARK_CONF = ("spark.master=local[1];spark.ui.enabled=false;spark.sql.shuffle.partitions=1;"
                    "spark.driver.memory=1g")
CHILD_TIMEOUT = 600  # seconds; the machine may be shared with other Spark runs
MANIFEST = "processing_manifest"
# Written at run time, so never equal between two runs.
# Run ids and times, the source fingerprint (file names differ between two sources written
# separately with the same rows), the source version an hour was read at (one run over
# everything reads every hour at the last version; hour by hour reads each at its own) and the
# source's table id (each source written separately is a table of its own).
VOLATILE_COLUMNS = ("last_rebuilt_at", "last_rebuilt_run_id", "processed_at", "run_id", "append_id", "queued_at",
                    "source_fingerprint", "source_version", "source_table_id")


def quiet(*_):
    pass


def use_settings(mp: pytest.MonkeyPatch, source: str, warehouse: Path, **extra: str) -> None:
    for key, value in {**SETTINGS, **extra}.items():
        mp.setenv(key, value)
    mp.setenv("INCREMENTAL_SOURCE_PATH", str(source))
    mp.setenv("INCREMENTAL_WAREHOUSE", str(warehouse))


def make_dagster_home(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return path


def run_in_process(until: datetime, source: str, warehouse: Path, *, dagster_home: Path | None = None,
                   instance=None, echo=quiet, **extra: str):
    """incremental_assets.runner.run_until in this process (the test session's Spark)."""
    from dagster import DagsterInstance

    from incremental_assets.runner import run_until

    with pytest.MonkeyPatch.context() as mp:
        use_settings(mp, source, warehouse, **extra)
        if dagster_home is None:
            return run_until(until, instance=instance or DagsterInstance.ephemeral(), echo=echo)
        mp.setenv("DAGSTER_HOME", str(dagster_home))
        with DagsterInstance.get() as instance:
            return run_until(until, instance=instance, echo=echo)


def copy_warehouse(template: Path, to: Path) -> Path:
    shutil.copytree(template, to)
    return to


# -- tables -----------------------------------------------------------------------------

def canonical(table) -> pd.DataFrame:
    """A table's rows in a form two runs can be compared in: columns and rows sorted, as text.
    Ledger rows of load hours without data are left out: a run records the empty hours its
    range happens to cover, and which ones that are depends on how the runs were cut."""
    df = table.to_pandas() if not isinstance(table, pd.DataFrame) else table
    if "source_fingerprint" in df.columns:
        df = df[df["source_fingerprint"] != ""]
    df = df.drop(columns=[c for c in VOLATILE_COLUMNS if c in df.columns])
    df = df[sorted(df.columns)].astype(str)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def snapshot(warehouse: Path) -> dict[str, pd.DataFrame]:
    """Every output table of a warehouse (not the manifest), read with delta-rs."""
    return {p.name: canonical(read_table(p))
            for p in sorted(Path(warehouse).iterdir())
            if p.name != MANIFEST and DeltaTable.is_deltatable(str(p))}


def same(a: pd.DataFrame | None, b: pd.DataFrame | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return list(a.columns) == list(b.columns) and a.equals(b)


def assert_same_tables(actual: dict[str, pd.DataFrame], expected: dict[str, pd.DataFrame],
                       names=None) -> None:
    names = sorted(expected) if names is None else names
    assert set(actual) >= set(names), f"missing tables: {set(names) - set(actual)}"
    for name in names:
        pd.testing.assert_frame_equal(actual[name], expected[name], obj=name)


# -- child processes ----------------------------------------------------------------------

@dataclass
class Child:
    process: subprocess.Popen
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = CHILD_TIMEOUT) -> int:
        return self.process.wait(timeout)

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def describe(self) -> str:
        return f"exit {self.process.returncode}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def child_env(source: str, warehouse: Path, dagster_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INCREMENTAL_")}
    env.update(SETTINGS, **extra)
    env.update(INCREMENTAL_SOURCE_PATH=str(source), INCREMENTAL_WAREHOUSE=str(warehouse),
               DAGSTER_HOME=str(dagster_home), INCREMENTAL_SPARK_CONF=CHILD_SPARK_CONF,
               PYSPARK_PYTHON=sys.executable)  # Python workers (UDFs) run in this virtualenv too
    return env


@contextmanager
def child_process(args: list[str], env: dict[str, str], logs: Path) -> Iterator[Child]:
    """The driver script in its own process group; the whole group (its JVM, Python workers)
    is killed on the way out, whatever happened."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "stdout.txt", logs / "stderr.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen([sys.executable, str(DRIVER), *args], env=env, cwd=REPO,
                                   stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        yield Child(process, out, err)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)


def wait_for(predicate, *, timeout: float, what: str, child: Child | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if child is not None and child.process.poll() is not None:
            raise AssertionError(f"child ended while waiting for {what}: {child.describe()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def write_source(spark, path, hours, *, mode="error") -> set[str]:
    """Two valid events in each load hour `hours` of 2026-01-05 at `path`; returns their event ids."""
    from incremental_assets.sources.schema import conform_to_atomic
    from incremental_assets.sources.writer import write_source_table

    rows = [(f"e-{h}-{i}", f"u{i}", f"s-{h}-{i}", f"2026-01-05 {h:02d}:{10 * i:02d}:00",
             f"2026-01-05 {h:02d}:{10 * i + 5:02d}:00") for h in hours for i in range(2)]
    df = spark.createDataFrame(rows, "event_id string, domain_userid string, domain_sessionid string, "
                                     "derived_tstamp string, load_tstamp string")
    write_source_table(conform_to_atomic(df).coalesce(1), str(path), mode=mode)
    return {r[0] for r in rows}
