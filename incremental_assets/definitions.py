"""The code location: every asset, check, job, sensor and resource, one instance per resource key.

The composition root: nothing in the product imports it except `runner`, which executes its
jobs in a process of its own (the CLI, the demo, the benchmark, tests).
"""

from dagster import Definitions, in_process_executor, with_source_code_references

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.external import EXTERNAL_ASSETS
from incremental_assets.assets.hourly import HOURLY_ASSET_DEFS
from incremental_assets.automation import JOBS, SCHEDULES, SENSORS
from incremental_assets.checks import CHECKS
from resources.manifest_io_manager import ManifestIOManager
from resources.spark import SparkResource
from resources.warehouse import WarehouseResource

# One Spark session per process: steps run in the run's process (a JVM per step would cost
# seconds each and memory), and every resource below shares the same session.
spark = SparkResource(spark_config={})
# Every setting the environment gives shows in the UI, a text setting as its variable.
warehouse = WarehouseResource.from_environment(pyspark=spark)

defs = Definitions(
    # Code references: the UI links each asset to the file and line of its definition.
    assets=with_source_code_references([
        *HOURLY_ASSET_DEFS,
        daily_aggregates, attributes, *EXTERNAL_ASSETS]),
    asset_checks=CHECKS,
    jobs=JOBS,
    sensors=SENSORS,
    schedules=SCHEDULES,
    resources={
        "pyspark": spark,
        "warehouse": warehouse,
        "manifest_io": ManifestIOManager(warehouse=warehouse),
    },
    executor=in_process_executor,
)
