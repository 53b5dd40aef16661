"""Where the benchmark's Dagster instances keep their runs and events.

- `sqlite` (the default): Dagster's files under each instance's home, through the storage
  class of the local instance `make demo` and `make ui` write (resources/sqlite_storage.py:
  the event log's connections kept open).
- `postgres`: one PostgreSQL server for the whole benchmark, from the OS's binaries as
  `make stack-up` starts it but with fsync on, as a production server runs; each instance gets
  a fresh database. This is what production runs on (deploy/dagster.yaml).

The two differ only in Dagster's own bookkeeping: every partition of a run is an event (planned,
materialized, checked), each written in a transaction of its own. The PostgreSQL instances use
the storage class deploy/dagster.yaml names (resources/postgres_storage.py: connections kept
open; dagster-postgres alone opens one per statement).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from dagster import DagsterInstance

from deploy.stack import Stack, deployed_storage
from resources.sqlite_storage import local_instance_yaml

KINDS = ("postgres", "sqlite")


class DagsterStorage:
    """Use as `with DagsterStorage(kind, directory) as storage:`; the server (postgres) runs
    inside the block."""

    def __init__(self, kind: str, directory: Path):
        if kind not in KINDS:
            raise ValueError(f"Dagster storage must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self._stack = Stack(directory=directory) if kind == "postgres" else None

    def __enter__(self) -> "DagsterStorage":
        if self._stack is not None:
            if shutil.which("initdb") is None:
                raise RuntimeError("the benchmark keeps Dagster's runs in PostgreSQL, as production does, and "
                                   "PostgreSQL's server binaries (initdb, pg_ctl) are not on PATH: install them, "
                                   "or pass --dagster-storage sqlite")
            self._stack.directory.mkdir(parents=True, exist_ok=True)
            self._stack.start_postgres(fsync=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._stack is not None:
            self._stack.down()

    def describe(self) -> str:
        return ("PostgreSQL (a database per instance, fsync on)" if self.kind == "postgres"
                else "SQLite (files under each instance's home)")

    def home(self, path: Path) -> Path:
        """A new, empty Dagster home at `path` whose dagster.yaml points at this storage; a
        process started with DAGSTER_HOME=path uses the same instance."""
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        if self._stack is None:
            (path / "dagster.yaml").write_text(local_instance_yaml(path))
            return path
        url = self._stack.fresh_database(re.sub(r"[^a-z0-9_]", "_", path.name.lower()))
        (path / "dagster.yaml").write_text(yaml.safe_dump(deployed_storage(url)) + "telemetry:\n  enabled: false\n")
        return path

    def instance(self, path: Path):
        """The Dagster instance of a new home at `path` (see `home`)."""
        return DagsterInstance.from_config(str(self.home(path)))
