"""Table maintenance: hourly writes leave many small files, and every replace leaves the
files it removed on disk. Compaction rewrites the small files of recent partitions into few, and
those of older partitions where that at least halves them (a rebuild's days, late events'
files: planning.compaction); vacuum deletes the files no version within
`vacuum_retention_hours` references, and files of writes that died before their commit.
Readers see the same rows before and after; only the states of attributes that neither the
declaration nor the attributes table holds any more are dropped first. Run by
`maintenance_job` (automation/, on a daily schedule) and `incremental-assets maintain`.
"""

from datetime import date, datetime, timedelta

from incremental_assets.names import ALL_TABLES, ATTRIBUTE_STATES
from incremental_assets.planning.compaction import OLDER_PARTITION_MIN_FILES, partitions_to_compact
from incremental_assets.planning.default_attributes import from_states
from incremental_assets.settings import Settings
from incremental_assets.state.day_ledger import recorded_attribute_keys
from resources.tables import TableStore
from resources.tables.interface import COMPACTED_FILE_BYTES, MaintenanceResult


def recent_partitions_from(settings: Settings, now: datetime) -> date:
    """The first partition day compacted: the last `maintenance_recent_days` days, today included."""
    return now.date() - timedelta(days=settings.maintenance_recent_days - 1)


def describe_scope(settings: Settings, now: datetime) -> str:
    """What maintenance at `now` compacts and vacuums, in a line for its log."""
    return (f"compacting partitions from {recent_partitions_from(settings, now)}, and older ones where "
            f"that at least halves their small files ({OLDER_PARTITION_MIN_FILES} or more); "
            f"vacuum retention {settings.vacuum_retention_hours} h")


def maintain_tables(settings: Settings, tables: TableStore, now: datetime,
                    echo=lambda line: None) -> list[MaintenanceResult]:
    """Compact, then vacuum, every table the warehouse holds; one result per table."""
    recent_from = recent_partitions_from(settings, now).isoformat()
    dropped = drop_undeclared_states(settings, tables)
    if dropped:
        echo(f"  {ATTRIBUTE_STATES}: states no declared attribute reads dropped: {', '.join(dropped)}")
    results = []
    for name in ALL_TABLES:
        if not tables.exists(name):
            continue
        files = tables.file_bytes_by_partition(name)
        partitions = None if files is None else partitions_to_compact(
            files, recent_from=recent_from, target_bytes=COMPACTED_FILE_BYTES)
        files_before = tables.describe(name)["num_files"]
        compacted = tables.compact(name, partitions=partitions)
        vacuumed = tables.vacuum(name, retention_hours=settings.vacuum_retention_hours)
        result = MaintenanceResult(name, files_before, tables.describe(name)["num_files"], compacted, vacuumed,
                                   partitions_compacted=None if partitions is None else len(partitions))
        where = "" if partitions is None else f" in {len(partitions)} partitions"
        echo(f"  {name}: {result.files_before} -> {result.files_after} files "
             f"({result.files_compacted} compacted{where}, {result.files_vacuumed} deleted from disk)")
        results.append(result)
    return results


def drop_undeclared_states(settings: Settings, tables: TableStore) -> list[str]:
    """Delete the states no declared attribute reads, once the attributes table holds only
    declared attributes. While it holds others (the declaration changed since its last run),
    nothing is dropped: the declaration may change back to the attributes the table holds, whose
    states must then still be there."""
    if not tables.exists(ATTRIBUTE_STATES):
        return []
    declared = settings.declared_attributes()
    if not (recorded_attribute_keys(settings) or set()) <= {d.key for d in declared}:
        return []
    needed = {d.state_key for d in from_states(declared)}
    present = {row[0] for row in tables.read(ATTRIBUTE_STATES, columns=["attribute"]).distinct().collect()}
    dropped = sorted(present - needed)
    if dropped:
        tables.delete_where_in(ATTRIBUTE_STATES, "attribute", dropped)
    return dropped
