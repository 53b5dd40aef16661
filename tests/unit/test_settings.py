from datetime import date, datetime, timedelta, timezone

import pytest

from incremental_assets.settings import Settings, SettingsError


def test_defaults_are_valid():
    settings = Settings.load(environ={})
    assert settings.backfill_limit_days == 30 and settings.app_ids == () and settings.table_engine == "delta-rs"


def test_environment_variables_and_lists():
    settings = Settings.load(environ={
        "INCREMENTAL_MAX_SESSION_DAYS": "3", "INCREMENTAL_EVENT_NAMES": "page_view, page_ping,transaction",
        "INCREMENTAL_START_DATE": "2024-03-02", "INCREMENTAL_LOOKBACK_WINDOW_HOURS": "1.5",
        "INCREMENTAL_ATTRIBUTES_AS_OF": "2024-04-01", "INCREMENTAL_AUTO_RESOLVE_FAILURES": "yes"})
    assert settings.event_names == ("page_view", "page_ping", "transaction")
    assert settings.start_date == datetime(2024, 3, 2, tzinfo=timezone.utc)
    assert settings.lookback_window_hours == 1.5 and settings.attributes_as_of == date(2024, 4, 1)
    assert settings.auto_resolve_failures is True


def test_overrides_win_over_environment():
    settings = Settings.load({"reprocess_days": 5}, environ={"INCREMENTAL_REPROCESS_DAYS": "2"})
    assert settings.reprocess_days == 5


@pytest.mark.parametrize("name, value, words", [
    ("backfill_limit_days", "0", "backfill_limit_days=0 is not accepted; it must be >= 1"),
    ("lookback_window_hours", "-1", "lookback_window_hours=-1.0 is not accepted"),
    ("start_date", "2024-13-45", "start_date='2024-13-45' is not a date"),
    ("table_engine", "duckdb", "table_engine='duckdb' is not accepted; use one of auto, delta-rs, delta-spark"),
    ("run_type", "weekly", "run_type='weekly' is not accepted"),
    ("grace_period", "1 hour", "grace_period='1 hour' is not accepted"),
    ("abstinent_period", "P1M", "abstinent_period='P1M' is not accepted"),
    ("max_session_days", "three", "max_session_days='three' is not a whole number"),
    ("min_rows_to_process", "0", "min_rows_to_process=0 is not accepted"),
    ("auto_resolve_failures", "maybe", "auto_resolve_failures='maybe' is not accepted"),
    ("vacuum_retention_hours", "0", "vacuum_retention_hours=0 is not accepted; it must be >= "
                                    "vacuum_min_retention_hours=24"),
    ("vacuum_retention_hours", "23", "vacuum_retention_hours=23 is not accepted"),
])
def test_bad_values_name_the_setting_and_what_is_accepted(name, value, words):
    with pytest.raises(SettingsError) as info:
        Settings.load(environ={f"INCREMENTAL_{name.upper()}": value})
    assert words in str(info.value)


def test_a_retention_below_the_default_minimum_needs_the_minimum_lowered():
    settings = Settings.load(environ={"INCREMENTAL_VACUUM_RETENTION_HOURS": "0",
                                      "INCREMENTAL_VACUUM_MIN_RETENTION_HOURS": "0"})
    assert settings.vacuum_retention_hours == 0
    assert Settings.load(environ={"INCREMENTAL_VACUUM_RETENTION_HOURS": "24"}).vacuum_retention_hours == 24


def test_unknown_setting_in_overrides_is_refused():
    with pytest.raises(SettingsError, match="unknown setting 'max_session_day'"):
        Settings.load({"max_session_day": 3}, environ={})


def test_a_warehouse_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "not_a_dir"
    file.write_text("x")
    with pytest.raises(SettingsError, match="is a file"):
        Settings.load(environ={"INCREMENTAL_WAREHOUSE": str(file)})


def test_durations_give_timedeltas():
    settings = Settings.load(environ={"INCREMENTAL_GRACE_PERIOD": "P0DT7H"})
    assert settings.grace == timedelta(hours=7) and settings.abstinent == timedelta(0)


# How a setting's type appears in Dagster config, which has no date types: ISO text.
CONFIG_TYPE = {"datetime": "str", "date | None": "str", "tuple[str, ...]": "list[str]"}


def test_the_warehouse_resource_mirrors_every_setting_with_its_type():
    import typing

    from resources.warehouse import WarehouseResource

    setting_types = typing.get_type_hints(Settings)
    resource_fields = {name: f for name, f in WarehouseResource.model_fields.items() if name != "pyspark"}
    assert set(setting_types) == set(resource_fields)
    for name, kind in setting_types.items():
        text = kind.__name__ if isinstance(kind, type) else str(kind).replace("datetime.", "")
        expected = CONFIG_TYPE.get(text, text)
        # Every resource field is optional: unset means "the environment or the default".
        annotation = resource_fields[name].annotation
        assert typing.get_origin(annotation) is typing.Union and type(None) in typing.get_args(annotation), name
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        actual = inner.__name__ if isinstance(inner, type) else str(inner)
        assert actual == expected, (name, actual, expected)


def test_the_warehouse_resource_carries_what_the_environment_gives_so_the_ui_shows_it(monkeypatch):
    from dagster import EnvVar, build_resources

    from resources.spark import SparkResource
    from resources.warehouse import WarehouseResource

    environ = {"INCREMENTAL_WAREHOUSE": "/data/warehouse", "INCREMENTAL_MAX_HOURS_PER_RUN": "24",
               "INCREMENTAL_APP_IDS": "web, mobile", "INCREMENTAL_ALLOW_NULL_DVCE_TSTAMPS": "false"}
    resource = WarehouseResource.from_environment(SparkResource(spark_config={}), environ)
    # A text setting is bound to its variable (the UI names it); others carry their parsed value.
    assert isinstance(resource.warehouse, EnvVar) and resource.warehouse.env_var_name == "INCREMENTAL_WAREHOUSE"
    assert (resource.max_hours_per_run, resource.app_ids, resource.allow_null_dvce_tstamps) == (24, ["web", "mobile"],
                                                                                               False)
    assert resource.source_path is None and resource.backfill_limit_days is None  # not given: the default
    description = WarehouseResource.model_fields["backfill_limit_days"].description
    assert "Default 30" in description and "INCREMENTAL_BACKFILL_LIMIT_DAYS" in description
    # The variable is read when the resource starts (Dagster's init) or is used directly.
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", "/data/moved")
    assert resource.settings.warehouse == "/data/moved"
    with build_resources({"warehouse": resource, "pyspark": SparkResource(spark_config={})}) as started:
        assert started.warehouse.settings.warehouse == "/data/moved"
        assert started.warehouse.settings.max_hours_per_run == 24


def test_the_settings_metadata_says_what_an_unset_setting_means():
    # An empty text in the UI read as "no value" while the run had one in force.
    shown = Settings.load(environ={}).describe()
    assert shown["end_date"] == "(none: the partitions run to now)"
    assert shown["attributes_as_of"] == "(none: each run's date)"
    assert shown["attributes_file"] == "(none: the default attributes only)"
    assert "" not in shown.values()
    shown = Settings.load(environ={"INCREMENTAL_END_DATE": "2026-01-11", "INCREMENTAL_ATTRIBUTES_AS_OF": "2026-01-11"})
    assert (shown.describe()["end_date"], shown.describe()["attributes_as_of"]) == ("2026-01-11", "2026-01-11")
