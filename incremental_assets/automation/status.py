"""Whether the sensors and schedules start running when an instance first loads the code
location: the `automation_running` setting (off by default, so that `make ui` on a development
instance launches nothing by itself; the production stack turns it on). Once an operator starts
or stops one in the UI, the instance keeps that choice."""

from dagster import DefaultScheduleStatus, DefaultSensorStatus

from incremental_assets.partitions import LOAD_SETTINGS

SENSOR_STATUS = DefaultSensorStatus.RUNNING if LOAD_SETTINGS.automation_running else DefaultSensorStatus.STOPPED
SCHEDULE_STATUS = DefaultScheduleStatus.RUNNING if LOAD_SETTINGS.automation_running else DefaultScheduleStatus.STOPPED
