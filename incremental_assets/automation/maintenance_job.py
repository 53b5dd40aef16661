"""The table maintenance job (incremental_assets.operator.maintenance) and its daily schedule."""

from datetime import datetime, timezone

from dagster import OpExecutionContext, Output, ScheduleDefinition, job, op

from incremental_assets.automation.status import SCHEDULE_STATUS
from incremental_assets.names import HOURLY_POOL, MAINTENANCE_JOB
from incremental_assets.operator.maintenance import describe_scope, maintain_tables
from resources.warehouse import WarehouseResource


# In the writers' pool: compaction and vacuum wait for the hourly step's slot instead of
# racing it (each would only retry its commit, but a vacuum beside a long write is what a
# too-short retention turns into lost files).
@op(name="maintain_tables", description="Compact small files and vacuum every table of the warehouse.",
    pool=HOURLY_POOL)
def maintain_tables_op(context: OpExecutionContext, warehouse: WarehouseResource):
    settings, now = warehouse.settings, datetime.now(timezone.utc)
    context.log.info(f"maintenance: {describe_scope(settings, now)}")
    results = maintain_tables(settings, warehouse.tables, now, echo=context.log.info)
    yield Output(None, metadata={
        "tables": len(results),
        "files_before": sum(r.files_before for r in results),
        "files_after": sum(r.files_after for r in results),
        "files_compacted": sum(r.files_compacted for r in results),
        "files_deleted_from_disk": sum(r.files_vacuumed for r in results),
    })


@job(name=MAINTENANCE_JOB, description="Table maintenance: compaction of small files and vacuum, every table.")
def maintenance_job():
    maintain_tables_op()


maintenance_schedule = ScheduleDefinition(
    name="maintenance_schedule", job=maintenance_job, cron_schedule="30 3 * * *", execution_timezone="UTC",
    default_status=SCHEDULE_STATUS,
    description="Table maintenance once a day, at a quiet hour (UTC).")
