"""Dagster's PostgreSQL storage with connections kept open (deploy/dagster.yaml names it).

dagster-postgres opens a new connection for every statement outside the webserver (SQLAlchemy's
NullPool): each event a run writes, each run or tag read, each sensor query pays a connection,
which is a new server process (and a TLS handshake and authentication on a remote server). A
run writes several events per partition and asset, so that was most of Dagster's bookkeeping
(docs/performance.md has the measures).

`PooledPostgresStorage` is `DagsterPostgresStorage` (same config, tables and migrations) whose
run, event log and schedule storages each keep one connection open per process, plus up to
`MAX_OVERFLOW` more while several threads of the process (the daemon's) use it at once, closed
when returned. A kept connection is checked before use and replaced after `RECYCLE_SECONDS`,
so a server restart or an idle timeout costs a reconnect, not an error. The webserver replaces
these engines with its own (`optimize_for_webserver`), as with the stock storage.

Connections per process: 3 idle, 3 + 3 x MAX_OVERFLOW at most. The daemon, the webserver, the
code server and each running run (max_concurrent_runs) are processes: size the server's
max_connections (100 by default) or a pooler in front of it accordingly.
"""

from __future__ import annotations

from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config

from resources.storage_tables import remembering_present_tables

MAX_OVERFLOW = 10
RECYCLE_SECONDS = 1800


def pooled_engine(postgres_url: str, token_provider=None):
    """An engine that keeps one connection open (autocommit, as dagster-postgres uses)."""
    return create_pg_engine(postgres_url, token_provider, isolation_level="AUTOCOMMIT", pool_size=1,
                            max_overflow=MAX_OVERFLOW, pool_pre_ping=True, pool_recycle=RECYCLE_SECONDS)


class PooledPostgresStorage(DagsterPostgresStorage):
    """DagsterPostgresStorage whose three storages keep their connection between statements."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True, inst_data=None,
                 token_provider=None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=token_provider)
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            # The same replacement dagster-postgres makes for the webserver (optimize_for_webserver).
            storage._engine.dispose()
            storage._engine = pooled_engine(postgres_url, token_provider)
        # At every materialization it stores, Dagster asks the server whether the asset_event_tags
        # table exists (for databases not yet migrated), inside the transaction that holds the
        # kept connection: each ask opened a connection of its own, about half of a
        # materialization's cost. A table that exists does not go away while the process runs.
        events = self._event_log_storage
        events.has_table = remembering_present_tables(events.has_table)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "PooledPostgresStorage":
        # The stock class builds a DagsterPostgresStorage here, whatever the subclass.
        return cls(pg_url_from_config(config_value), config_value.get("should_autocreate_tables", True),
                   inst_data=inst_data, token_provider=get_token_provider_from_config(config_value))
