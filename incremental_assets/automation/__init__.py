"""What the daemon runs by itself: the asset jobs and the sensors that launch them."""

from incremental_assets.automation.hourly_sensor import hourly_load_sensor
from incremental_assets.automation.jobs import ASSET_JOBS, attributes_job, daily_job, hourly_job
from incremental_assets.automation.late_days_sensors import attributes_schedule, attributes_sensor, late_days_sensor

SENSORS = [hourly_load_sensor, late_days_sensor, attributes_sensor]
SCHEDULES = [attributes_schedule]

__all__ = ["ASSET_JOBS", "SCHEDULES", "SENSORS", "attributes_job", "attributes_sensor", "daily_job", "hourly_job",
           "hourly_load_sensor", "late_days_sensor"]
