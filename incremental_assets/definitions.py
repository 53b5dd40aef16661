"""The code location: every asset, check, job, sensor and resource, one instance per resource key.

The composition root: nothing in the product imports it except `runner`, which executes its
jobs in a process of its own (the CLI, the demo, the benchmark, tests).
"""

from datetime import timedelta

from dagster import (
    Definitions,
    FreshnessPolicy,
    apply_freshness_policy,
    in_process_executor,
    map_asset_specs,
    with_source_code_references,
)

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.external import EXTERNAL_ASSETS
from incremental_assets.assets.hourly import HOURLY_ASSET_DEFS
from incremental_assets.automation import ASSET_JOBS, SCHEDULES, SENSORS
from incremental_assets.checks import CHECKS
from incremental_assets.maintenance import maintenance_job, maintenance_schedule
from incremental_assets.operations import manifest_admin_job
from resources.manifest_io_manager import ManifestIOManager
from resources.spark import SparkResource
from resources.warehouse import WarehouseResource

# One Spark session per process: steps run in the run's process (a JVM per step would cost
# seconds each and memory), and every resource below shares the same session.
spark = SparkResource(spark_config={})
warehouse = WarehouseResource(pyspark=spark)

# With the sensor on, each closed load hour with data is processed within minutes; no new
# materialization for hours means no new source data or a stuck pipeline (the daemon
# evaluates this; the UI shows it on each hourly asset).
HOURLY_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(hours=6), warn_window=timedelta(hours=2))

defs = Definitions(
    # Code references: the UI links each asset to the file and line of its definition.
    assets=with_source_code_references([
        *map_asset_specs(lambda spec: apply_freshness_policy(spec, HOURLY_FRESHNESS), HOURLY_ASSET_DEFS),
        daily_aggregates, attributes, *EXTERNAL_ASSETS]),
    asset_checks=CHECKS,
    jobs=[*ASSET_JOBS, manifest_admin_job, maintenance_job],
    sensors=SENSORS,
    schedules=[*SCHEDULES, maintenance_schedule],
    resources={
        "pyspark": spark,
        "warehouse": warehouse,
        "manifest_io": ManifestIOManager(warehouse=warehouse),
    },
    executor=in_process_executor,
)
