"""Table maintenance: hourly writes leave many small files, and every replace leaves the
files it removed on disk. Compaction rewrites the small files of recent partitions into few
(older partitions were compacted when they were recent); vacuum deletes the files no version
within `vacuum_retention_hours` references, and files of writes that died before their commit.
Readers see the same rows before and after. Run by `maintenance_job` (automation/, on a daily
schedule) and `incremental-assets maintain`.
"""

from datetime import date, datetime, timedelta

from incremental_assets.names import ALL_TABLES
from incremental_assets.settings import Settings
from resources.tables import TableStore
from resources.tables.interface import MaintenanceResult


def recent_partitions_from(settings: Settings, now: datetime) -> date:
    """The first partition day compacted: the last `maintenance_recent_days` days, today included."""
    return now.date() - timedelta(days=settings.maintenance_recent_days - 1)


def maintain_tables(settings: Settings, tables: TableStore, now: datetime,
                    echo=lambda line: None) -> list[MaintenanceResult]:
    """Compact, then vacuum, every table the warehouse holds; one result per table."""
    partitions_from = recent_partitions_from(settings, now).isoformat()
    results = []
    for name in ALL_TABLES:
        if not tables.exists(name):
            continue
        files_before = tables.describe(name)["num_files"]
        compacted = tables.compact(name, partitions_from=partitions_from)
        vacuumed = tables.vacuum(name, retention_hours=settings.vacuum_retention_hours)
        result = MaintenanceResult(name, files_before, tables.describe(name)["num_files"], compacted, vacuumed)
        echo(f"  {name}: {result.files_before} -> {result.files_after} files "
             f"({result.files_compacted} compacted, {result.files_vacuumed} deleted from disk)")
        results.append(result)
    return results
