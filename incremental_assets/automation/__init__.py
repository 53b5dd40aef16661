"""Every Dagster job, sensor and schedule of the code location: the asset jobs and the
sensors that launch them, table maintenance, the manifest admin job and the plan job."""

from incremental_assets.automation.hourly_sensor import hourly_load_sensor
from incremental_assets.automation.jobs import ASSET_JOBS, attributes_job, daily_job, hourly_job
from incremental_assets.automation.late_days_sensors import (
    attributes_after_failure_sensor,
    attributes_schedule,
    attributes_sensor,
    late_days_sensor,
)
from incremental_assets.automation.maintenance_job import maintenance_job, maintenance_schedule
from incremental_assets.automation.manifest_admin import manifest_admin_job
from incremental_assets.automation.plan_job import plan_job

JOBS = [*ASSET_JOBS, manifest_admin_job, maintenance_job, plan_job]
SENSORS = [hourly_load_sensor, late_days_sensor, attributes_sensor, attributes_after_failure_sensor]
SCHEDULES = [attributes_schedule, maintenance_schedule]

__all__ = ["ASSET_JOBS", "JOBS", "SCHEDULES", "SENSORS", "attributes_job", "attributes_sensor", "daily_job",
           "hourly_job", "hourly_load_sensor", "late_days_sensor", "maintenance_job", "manifest_admin_job",
           "plan_job"]
