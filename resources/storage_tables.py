"""What Dagster's SQL storages may remember between statements (resources/postgres_storage.py,
resources/sqlite_storage.py)."""

from __future__ import annotations

from collections.abc import Callable


def remembering_present_tables(has_table: Callable[[str], bool]) -> Callable[[str], bool]:
    """`has_table` that asks the database again only about tables it has not found yet: Dagster
    asks at every materialization or check event it stores (for databases not yet migrated), and
    a table that exists does not go away while the process runs."""
    present: set[str] = set()

    def has_table_remembered(table_name: str) -> bool:
        if table_name not in present and has_table(table_name):
            present.add(table_name)
        return table_name in present

    return has_table_remembered
