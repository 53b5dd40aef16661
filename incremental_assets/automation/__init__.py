"""Every Dagster job, sensor and schedule of the code location: the asset jobs and the
sensors that launch them, table maintenance, and the operator's jobs: manifest admin, plan, apply
(with the sensor that launches a plan's runs) and forget."""

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
from incremental_assets.automation.operator_jobs import apply_job, apply_plan_sensor, forget_job
from incremental_assets.automation.plan_job import plan_job

JOBS = [*ASSET_JOBS, manifest_admin_job, maintenance_job, plan_job, apply_job, forget_job]
SENSORS = [hourly_load_sensor, late_days_sensor, attributes_sensor, attributes_after_failure_sensor,
           apply_plan_sensor]
SCHEDULES = [attributes_schedule, maintenance_schedule]

__all__ = ["ASSET_JOBS", "JOBS", "SCHEDULES", "SENSORS", "apply_job", "apply_plan_sensor", "attributes_job",
           "attributes_sensor", "daily_job", "forget_job", "hourly_job", "hourly_load_sensor", "late_days_sensor",
           "maintenance_job", "manifest_admin_job", "plan_job"]
