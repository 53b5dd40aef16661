"""The code location: every asset, job, sensor and resource, one instance per resource key."""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from incremental_assets.assets.daily import attributes, daily_aggregates
from incremental_assets.assets.hourly import HOURLY_ASSETS
from incremental_assets.jobs import JOBS
from resources.manifest_io_manager import ManifestIOManager
from resources.spark import SparkResource
from resources.warehouse import WarehouseResource

# One Spark session per process: steps run in the run's process (a JVM per step would cost
# seconds each and memory), and every resource below shares the same session.
spark = SparkResource(spark_config={})
warehouse = WarehouseResource(pyspark=spark)

defs = Definitions(
    assets=[*HOURLY_ASSETS, daily_aggregates, attributes],
    jobs=JOBS,
    resources={
        "pyspark": spark,
        "warehouse": warehouse,
        "manifest_io": ManifestIOManager(warehouse=warehouse),
    },
    executor=in_process_executor,
)
