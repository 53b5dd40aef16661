"""Dagster's SQLite storage with its event log's connections kept: the local instance's (`make
demo` and `make ui` write its dagster.yaml, `local_instance_yaml`, into a new $DAGSTER_HOME; an
existing one is left as it is). Production's is PostgreSQL, resources/postgres_storage.py.

Dagster's SQLite event log builds an engine and opens a connection for every statement, and
for every asset check event asks the index database whether a table exists, through one more
connection. A run writes several events per partition and asset, so a 7-day backfill spent
about a third of its time there (docs/performance.md has the measures).

`KeptSqliteStorage` is `DagsterSqliteStorage` (same config, files, tables and migrations) whose
event log keeps one connection per database file: the index's, and those of the last
`RUN_DATABASES_KEPT` runs it wrote or read (each run has a database of its own), the others
closed when evicted. Statements still take the storage's lock one at a time, and each commits
as before: other processes (the daemon, the webserver, other runs) see what it wrote as soon as
with the stock storage; a kept connection holds no lock between statements.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

from resources.storage_tables import remembering_present_tables

# Open run databases per process: a run writes to its own, and a webserver or daemon reads many.
RUN_DATABASES_KEPT = 8
MAX_OVERFLOW = 4


def kept_engine(conn_string: str) -> Engine:
    """An engine that keeps one connection to a SQLite file open between statements (statements
    go one at a time: the storage's lock); a database's first set-up (Alembic) opens a few more
    at once, closed when returned."""
    return create_engine(conn_string, poolclass=QueuePool, pool_size=1, max_overflow=MAX_OVERFLOW,
                         connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})


class KeptConnectionsEventLogStorage(SqliteEventLogStorage):
    """SqliteEventLogStorage whose connections outlive a statement (see the module's docstring)."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        super().__init__(base_dir, inst_data=inst_data)
        self.has_table = remembering_present_tables(self.has_table)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # Dagster's own, with the engine kept: the same lock, initialisation and transaction.
        with self._db_lock:
            engine = self._engines.pop(shard, None) or kept_engine(self.conn_string_for_shard(shard))
            self._engines[shard] = engine  # the most recently used last
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            self._close_least_recently_used()
            with engine.connect() as conn, conn.begin():
                yield conn

    def _close_least_recently_used(self) -> None:
        runs = [shard for shard in self._engines if shard != INDEX_SHARD_NAME]
        for shard in runs[:max(0, len(runs) - RUN_DATABASES_KEPT)]:
            self._engines.pop(shard).dispose()

    def _close_all(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        self._close_all()  # before the files go: a kept connection would write to a deleted one
        super().wipe()

    def dispose(self) -> None:
        self._close_all()
        super().dispose()


class KeptSqliteStorage(DagsterSqliteStorage):
    """DagsterSqliteStorage whose event log keeps its connections between statements."""

    def __init__(self, base_dir: str, inst_data=None):
        # DagsterSqliteStorage's own, with the event log storage replaced (building the stock
        # one first would initialise its index database twice).
        self.base_dir = base_dir
        self._run_storage = SqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = KeptConnectionsEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = SqliteScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "KeptSqliteStorage":
        # The stock class builds a DagsterSqliteStorage here, whatever the subclass; its
        # `from_local` (which creates the directory) builds `cls`.
        return cls.from_local(inst_data=inst_data, **config_value)


def local_instance_yaml(home: Path | str) -> str:
    """The dagster.yaml of a local instance at `home`: its runs and events in SQLite files under
    it (where Dagster's default puts them), through `KeptSqliteStorage`; no telemetry."""
    storage = {"custom": {"module": __name__, "class": KeptSqliteStorage.__name__,
                          "config": {"base_dir": str(Path(home).resolve())}}}
    return yaml.safe_dump({"storage": storage, "telemetry": {"enabled": False}}, sort_keys=False)
