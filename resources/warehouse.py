"""The `warehouse` resource: validated settings, the Delta table store and the manifest.

Every field is an optional override of a setting; unset fields come from the environment
(`INCREMENTAL_<NAME>`) or the defaults in `incremental_assets.settings`. Overrides are
validated like everything else: a bad value fails before anything is read or written.
"""


from typing import Any, Optional

from dagster import ConfigurableResource, InitResourceContext, ResourceDependency
from pydantic import PrivateAttr

from incremental_assets.settings import Settings
from resources.manifest import ManifestStore
from resources.spark import SparkResource
from resources.tables import TableStore, table_store


class WarehouseResource(ConfigurableResource):
    """Settings, tables and manifest for one warehouse. A field left empty here takes its value
    from INCREMENTAL_<NAME> or the default; every materialization's `settings` metadata shows
    the values its run used."""

    pyspark: ResourceDependency[SparkResource]
    start_date: Optional[str] = None
    backfill_limit_days: Optional[int] = None
    max_hours_per_run: Optional[int] = None
    lookback_window_hours: Optional[float] = None
    max_session_days: Optional[int] = None
    days_late_allowed: Optional[int] = None
    dedupe_lookback_days: Optional[int] = None
    allow_null_dvce_tstamps: Optional[bool] = None
    session_lookback_days: Optional[int] = None
    reprocess_days: Optional[int] = None
    min_rows_to_process: Optional[int] = None
    app_ids: Optional[list[str]] = None
    event_names: Optional[list[str]] = None
    run_type: Optional[str] = None
    attributes_as_of: Optional[str] = None
    grace_period: Optional[str] = None
    abstinent_period: Optional[str] = None
    warehouse: Optional[str] = None
    source_path: Optional[str] = None
    table_engine: Optional[str] = None
    auto_resolve_failures: Optional[bool] = None
    automation_running: Optional[bool] = None
    sensor_interval_seconds: Optional[int] = None
    max_lock_age_hours: Optional[float] = None
    maintenance_recent_days: Optional[int] = None
    vacuum_retention_hours: Optional[int] = None
    vacuum_min_retention_hours: Optional[int] = None
    warehouse_shared: Optional[bool] = None

    _settings: Any = PrivateAttr(default=None)
    _tables: Any = PrivateAttr(default=None)

    def overrides(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items()
                if name in Settings.__dataclass_fields__ and value is not None}

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Validate at resource init: a bad setting fails the run before any step computes.
        self._settings = Settings.load(self.overrides())

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.load(self.overrides())
        return self._settings

    @property
    def spark(self):
        return self.pyspark.spark_session

    @property
    def tables(self) -> TableStore:
        if self._tables is None:
            self._tables = table_store(self.spark, self.settings.warehouse_root, self.settings.table_engine,
                                       shared=self.settings.warehouse_shared)
        return self._tables

    @property
    def manifest(self) -> ManifestStore:
        return ManifestStore.of(self.settings)
