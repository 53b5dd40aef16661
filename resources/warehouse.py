"""The `warehouse` resource: validated settings, the Delta table store and the manifest.

Every field is an optional override of a setting; unset fields come from the environment
(`INCREMENTAL_<NAME>`) or the defaults in `incremental_assets.settings`. Overrides are
validated like everything else: a bad value fails before anything is read or written.
The code location builds it with `from_environment`, so that the UI shows every setting the
environment gives (a text setting as its environment variable), and each field's description
names its default.
"""

import os
from typing import Any, Mapping, Optional

from dagster import ConfigurableResource, EnvVar, InitResourceContext, ResourceDependency
from pydantic import Field, PrivateAttr

from incremental_assets.settings import ENV_PREFIX, Settings
from resources.manifest import ManifestStore
from resources.spark import SparkResource
from resources.tables import TableStore
from resources.tables.stores import table_store

_DEFAULTS = Settings().describe()


def setting(name: str) -> Any:
    """A resource field for setting `name`: empty unless given, described with its default."""
    default = _DEFAULTS[name] or "none"
    return Field(default=None, description=f"Default {default}, or {ENV_PREFIX}{name.upper()} when set.")


def _resolved(value: Any) -> Any:
    """A field's value: an EnvVar the resource was built with, read from the environment (Dagster
    resolves them when it initializes the resource; this covers the resource used directly)."""
    return value.get_value() if isinstance(value, EnvVar) else value


class WarehouseResource(ConfigurableResource):
    """Settings, tables and manifest for one warehouse. A field left empty here takes its value
    from the environment variable INCREMENTAL_NAME (the field's name in capitals) or the default;
    every materialization's `settings` metadata shows the values its run used."""

    pyspark: ResourceDependency[SparkResource]
    start_date: Optional[str] = setting("start_date")
    end_date: Optional[str] = setting("end_date")
    backfill_limit_days: Optional[int] = setting("backfill_limit_days")
    max_hours_per_run: Optional[int] = setting("max_hours_per_run")
    checkpoint_values_max: Optional[int] = setting("checkpoint_values_max")
    lookback_window_hours: Optional[float] = setting("lookback_window_hours")
    max_session_days: Optional[int] = setting("max_session_days")
    days_late_allowed: Optional[int] = setting("days_late_allowed")
    dedupe_lookback_days: Optional[int] = setting("dedupe_lookback_days")
    allow_null_dvce_tstamps: Optional[bool] = setting("allow_null_dvce_tstamps")
    session_lookback_days: Optional[int] = setting("session_lookback_days")
    reprocess_days: Optional[int] = setting("reprocess_days")
    min_rows_to_process: Optional[int] = setting("min_rows_to_process")
    app_ids: Optional[list[str]] = setting("app_ids")
    event_names: Optional[list[str]] = setting("event_names")
    run_type: Optional[str] = setting("run_type")
    attributes_as_of: Optional[str] = setting("attributes_as_of")
    attributes_file: Optional[str] = setting("attributes_file")
    grace_period: Optional[str] = setting("grace_period")
    abstinent_period: Optional[str] = setting("abstinent_period")
    warehouse: Optional[str] = setting("warehouse")
    source_path: Optional[str] = setting("source_path")
    table_engine: Optional[str] = setting("table_engine")
    auto_resolve_failures: Optional[bool] = setting("auto_resolve_failures")
    automation_running: Optional[bool] = setting("automation_running")
    asset_owners: Optional[list[str]] = setting("asset_owners")
    sensor_interval_seconds: Optional[int] = setting("sensor_interval_seconds")
    max_lock_age_hours: Optional[float] = setting("max_lock_age_hours")
    maintenance_recent_days: Optional[int] = setting("maintenance_recent_days")
    vacuum_retention_hours: Optional[int] = setting("vacuum_retention_hours")
    vacuum_min_retention_hours: Optional[int] = setting("vacuum_min_retention_hours")
    warehouse_shared: Optional[bool] = setting("warehouse_shared")

    _settings: Any = PrivateAttr(default=None)
    _tables: Any = PrivateAttr(default=None)

    @classmethod
    def from_environment(cls, pyspark: SparkResource,
                         environ: Mapping[str, str] | None = None) -> "WarehouseResource":
        """The resource with each setting the environment gives: a text setting as its EnvVar
        (read again when a run starts), any other as the value it parses to (the environment
        was validated when the code location loaded it)."""
        environ = os.environ if environ is None else environ
        given = {name for name in Settings.__dataclass_fields__ if environ.get(ENV_PREFIX + name.upper())}
        parsed = Settings.load(environ=environ)
        values: dict[str, Any] = {}
        for name in given:
            if cls.model_fields[name].annotation == Optional[str]:
                values[name] = EnvVar(ENV_PREFIX + name.upper())
            else:
                value = getattr(parsed, name)
                values[name] = list(value) if isinstance(value, tuple) else value
        return cls(pyspark=pyspark, **values)

    def overrides(self) -> dict[str, Any]:
        values = {name: _resolved(value) for name, value in self.__dict__.items()
                  if name in Settings.__dataclass_fields__}
        return {name: value for name, value in values.items() if value is not None}

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
