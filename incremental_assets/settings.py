"""Every pipeline variable, validated in one place.

Values come from, in increasing priority: the defaults below, environment variables
`INCREMENTAL_<NAME>` (lists comma-separated), and Dagster config of the `settings`
resource (launchpad or run config). A bad value raises `SettingsError` naming the setting,
the value and what is accepted, before anything is read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import runpy
import typing
from dataclasses import dataclass, fields, replace
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from incremental_assets.names import TABLE_ENGINES, check_identifier
from incremental_assets.planning.attribute_declarations import (
    VERSIONS_COLUMN,
    AttributeDeclaration,
    AttributeDeclarationError,
    DeclarationFile,
    declarations,
    parse_declaration_file,
)
from incremental_assets.planning.default_attributes import (
    AS_OF_COLUMN,
    DEFAULT_ATTRIBUTES,
    KEY_COLUMN,
    with_defaults,
)
from incremental_assets.planning.windows import parse_duration

ENV_PREFIX = "INCREMENTAL_"
RUN_TYPES = ("incremental", "full", "last_n_days")


# The settings that shape base_events, the sessions and filtered_events (docs/rules.md 1-5).
HOURLY_RULES = ("start_date", "app_ids", "event_names", "days_late_allowed", "dedupe_lookback_days",
                "allow_null_dvce_tstamps", "max_session_days", "session_lookback_days")


class SettingsError(ValueError):
    """A setting has a value the pipeline cannot run with."""


_RESERVED_COLUMNS = (KEY_COLUMN, AS_OF_COLUMN, VERSIONS_COLUMN)


@lru_cache(maxsize=16)
def _yaml_declared(text: str, where: str) -> tuple[AttributeDeclaration, ...]:
    """A YAML declaration's attributes, with the defaults it takes: parsed once per text (a run
    asks for them several times; 50 attributes take about 80 ms to parse and validate)."""
    declared = parse_declaration_file(text, where=where, reserved=_RESERVED_COLUMNS)
    return with_defaults(declared.attributes, declared.defaults, where)


# What a setting left unset means, as the settings metadata shows it (an empty text read as "no value").
UNSET_MEANS = {"end_date": "(none: the partitions run to now)",
               "attributes_as_of": "(none: each run's date)",
               "attributes_file": "(none: the default attributes only)"}


@dataclass(frozen=True)
class Settings:
    # Snowplow's variable names, without the `snowplow__` prefix.
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # Not Snowplow's: the last load day processed, and where the partitions end (a finished
    # history, a demo). None: they run to now.
    end_date: date | None = None
    backfill_limit_days: int = 30
    # Not Snowplow's: the most load hours one hourly run processes. Longer ranges (a full
    # rebuild, a catch-up after an outage) run as several runs, oldest first, so a run's
    # memory follows this many hours of data, not the whole range (one 30-day run of 10M
    # events exhausted a 6 GB driver; 7 days of them ran).
    max_hours_per_run: int = 168
    # Not Snowplow's: the most values (rows x columns) each of a run's wide sets (its source
    # rows, kept copies, filtered rows) holds in memory as a checkpoint; a window whose source
    # files hold more writes them as Parquet files under the warehouse's `_staging/` instead
    # (resources.materialized). 50M: about 400,000 rows of the atomic columns, 0.5 GB a set.
    checkpoint_values_max: int = 50_000_000
    lookback_window_hours: float = 0.0  # reconciliation re-runs exactly the hours that changed
    max_session_days: int = 3
    days_late_allowed: int = 3
    dedupe_lookback_days: int = 30
    allow_null_dvce_tstamps: bool = True  # Snowplow's default is false (see docs/rules.md)
    session_lookback_days: int = 730
    reprocess_days: int = 1
    min_rows_to_process: int = 1
    app_ids: tuple[str, ...] = ()  # empty: every app id
    event_names: tuple[str, ...] = ()  # empty: every event name
    run_type: str = "incremental"
    attributes_as_of: date | None = None  # None: today (UTC) when the run starts
    # The team's declared attributes (a YAML file, or a Python file's ATTRIBUTES; docs/rules.md 8),
    # after the default declaration's, or instead of them (`defaults: false`).
    attributes_file: str = ""
    grace_period: str = "PT0S"
    abstinent_period: str = "PT0S"
    warehouse: str = "warehouse"
    source_path: str = "sample_lake/events"
    table_engine: str = "delta-rs"  # the measured default; see docs/deployment.md, "Delta engine"
    # A local warehouse path that is one shared filesystem on every host of a Spark cluster.
    warehouse_shared: bool = False
    # Operations (not Snowplow's): automatic release of FAILED manifest items, sensor cadence,
    # and how old a PROCESSING lock may get before the stale-lock check warns.
    auto_resolve_failures: bool = False
    # Whether the sensors and schedules start running when an instance first loads the code
    # location: off for a development instance (`make ui`), on for the production one
    # (deploy/dagster.yaml's stack sets it). An operator's start or stop in the UI wins.
    automation_running: bool = False
    # Who the catalog names as the owner of every asset: e-mail addresses or `team:<name>`.
    asset_owners: tuple[str, ...] = ("team:data",)
    sensor_interval_seconds: int = 300
    max_lock_age_hours: float = 6.0
    # Table maintenance: partitions of the last this many days are compacted; files that no
    # version of the last this many hours references are deleted (time travel stays possible
    # within it, and no run may last longer).
    maintenance_recent_days: int = 3
    vacuum_retention_hours: int = 168
    # The smallest retention vacuum accepts: a run or reader still using a file older than the
    # retention would lose it. Lower it knowingly (a test warehouse nothing else reads).
    vacuum_min_retention_hours: int = 24

    # -- derived values -------------------------------------------------------------
    @property
    def warehouse_path(self) -> Path:
        return Path(self.warehouse).expanduser().resolve()

    @property
    def warehouse_root(self) -> str:
        """The warehouse as the table store addresses it: a URI, or an absolute local path."""
        return canonical_location(self.warehouse.rstrip("/")) if "://" in self.warehouse else str(self.warehouse_path)

    @property
    def source(self) -> str:
        if "://" in self.source_path:
            return canonical_location(self.source_path)
        return str(Path(self.source_path).expanduser().resolve())

    def table_path(self, name: str) -> str:
        """Where table `name` lives; names are fixed identifiers, never user input."""
        try:
            check_identifier(name, "table name")
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        return f"{self.warehouse_root}/{name}"

    @property
    def end_hour(self) -> datetime | None:
        """The end (excluded) of the load hours processed: midnight after end_date."""
        if self.end_date is None:
            return None
        return datetime.combine(self.end_date + timedelta(days=1), time(), tzinfo=timezone.utc)

    @property
    def session_lookback(self) -> timedelta:
        """How far before a load hour a touched session's earlier events are looked up."""
        return timedelta(days=self.session_lookback_days)

    @property
    def dedupe_lookback(self) -> timedelta:
        """A copy of an event loaded less than this after a better copy is a duplicate."""
        return timedelta(days=self.dedupe_lookback_days)

    def rules_digest(self) -> str:
        """A digest of the settings that shape the load-hour tables: an hour processed under
        other rules is processed again (see planning.reconcile). With `app_ids` set, the app
        ids are not part of it: the hour ledger records them per hour (planning.app_units), so
        adding an app runs its rows alone."""
        rules = {name: getattr(self, name) for name in HOURLY_RULES if not (self.app_ids and name == "app_ids")}
        return hashlib.sha1(json.dumps(rules, default=str, sort_keys=True).encode()).hexdigest()[:12]

    def rules_digest_with_app_ids(self) -> str:
        """The digest as ledger rows written before app ids were recorded per hour hold it (the
        app ids inside): such a row matching it was processed for exactly today's `app_ids`."""
        rules = {name: getattr(self, name) for name in HOURLY_RULES}
        return hashlib.sha1(json.dumps(rules, default=str, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def grace(self) -> timedelta:
        return _fixed_duration("grace_period", self.grace_period)

    @property
    def abstinent(self) -> timedelta:
        return _fixed_duration("abstinent_period", self.abstinent_period)

    def as_of_date(self, now: datetime) -> date:
        return self.attributes_as_of or now.astimezone(timezone.utc).date()

    def declared_attributes(self) -> tuple[AttributeDeclaration, ...]:
        """The attributes of `attributes`: the default declaration, then those of `attributes_file`
        (without the defaults when it says so); an error names the file."""
        if not self.attributes_file:
            return DEFAULT_ATTRIBUTES
        file = Path(self.attributes_file).expanduser()
        try:
            text = file.read_text()
        except OSError as exc:
            raise AttributeDeclarationError(
                f"attributes_file={self.attributes_file!r} cannot be read: {exc.strerror}") from exc
        if file.suffix == ".py":
            entries, defaults = _python_declarations(file)
            where = f"{file}: ATTRIBUTES"
            declared = DeclarationFile(declarations(entries, where=where, reserved=_RESERVED_COLUMNS), defaults)
            return with_defaults(declared.attributes, declared.defaults, where)
        return _yaml_declared(text, str(file))

    def describe(self) -> dict[str, str]:
        """Settings as strings, for metadata and the CLI."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(value) or "(all)"
            elif isinstance(value, datetime):
                value = value.isoformat()
            out[f.name] = UNSET_MEANS.get(f.name, "(none)") if value in (None, "") else str(value)
        return out

    # -- construction ---------------------------------------------------------------
    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> "Settings":
        """Defaults, then `INCREMENTAL_*` environment variables, then `overrides`."""
        environ = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        names = {f.name for f in fields(cls)}
        for name in names:
            env_name = ENV_PREFIX + name.upper()
            if env_name in environ and environ[env_name] != "":
                raw[name] = environ[env_name]
        for name, value in (overrides or {}).items():
            if name not in names:
                raise SettingsError(
                    f"unknown setting {name!r}; known settings: {', '.join(sorted(names))}")
            if value is not None:
                raw[name] = value
        return cls.from_values(raw)

    @classmethod
    def from_values(cls, raw: Mapping[str, Any]) -> "Settings":
        parsed = {name: _PARSERS[name](name, value) for name, value in raw.items()}
        settings = replace(cls(), **parsed)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.end_date is not None and self.end_date < self.start_date.date():
            raise SettingsError(f"end_date={self.end_date} is not accepted; it must be on or after "
                                f"start_date={self.start_date.date()}")
        _at_least("backfill_limit_days", self.backfill_limit_days, 1)
        _at_least("max_hours_per_run", self.max_hours_per_run, 1)
        _at_least("checkpoint_values_max", self.checkpoint_values_max, 0)
        _at_least("lookback_window_hours", self.lookback_window_hours, 0)
        _at_least("max_session_days", self.max_session_days, 1)
        _at_least("days_late_allowed", self.days_late_allowed, 0)
        _at_least("dedupe_lookback_days", self.dedupe_lookback_days, 1)
        _at_least("session_lookback_days", self.session_lookback_days, 1)
        _at_least("reprocess_days", self.reprocess_days, 0)
        _at_least("min_rows_to_process", self.min_rows_to_process, 1)
        _at_least("sensor_interval_seconds", self.sensor_interval_seconds, 30)
        _at_least("max_lock_age_hours", self.max_lock_age_hours, 0)
        _at_least("maintenance_recent_days", self.maintenance_recent_days, 1)
        _at_least("vacuum_min_retention_hours", self.vacuum_min_retention_hours, 0)
        if self.vacuum_retention_hours < self.vacuum_min_retention_hours:
            raise SettingsError(
                f"vacuum_retention_hours={self.vacuum_retention_hours} is not accepted; it must be >= "
                f"vacuum_min_retention_hours={self.vacuum_min_retention_hours}: vacuum would delete files "
                "that a run still reading or writing may need (lower vacuum_min_retention_hours only "
                "where nothing else uses the warehouse)")
        if self.run_type not in RUN_TYPES:
            raise SettingsError(
                f"run_type={self.run_type!r} is not accepted; use one of {', '.join(RUN_TYPES)}")
        if self.table_engine not in TABLE_ENGINES:
            raise SettingsError(
                f"table_engine={self.table_engine!r} is not accepted; use one of "
                f"{', '.join(TABLE_ENGINES)}")
        _fixed_duration("grace_period", self.grace_period)
        try:
            self.declared_attributes()
        except AttributeDeclarationError as exc:
            raise SettingsError(str(exc)) from exc
        _fixed_duration("abstinent_period", self.abstinent_period)
        for name in ("app_ids", "event_names"):
            for item in getattr(self, name):
                if not item or any(c in item for c in "\n\r\x00"):
                    raise SettingsError(f"{name} contains an empty or control-character value {item!r}")
        for owner in self.asset_owners:
            if not (re.fullmatch(r"team:[A-Za-z0-9_.-]+", owner) or re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", owner)):
                raise SettingsError(f"asset_owners contains {owner!r}; an owner is an e-mail address or "
                                    "team:<name> (letters, digits, _ . -)")
        for name in ("warehouse", "source_path"):
            value = getattr(self, name)
            if not value or "\x00" in value:
                raise SettingsError(f"{name}={value!r} is not a usable path")
        if "://" not in self.warehouse and self.warehouse_path.exists() \
                and not self.warehouse_path.is_dir():
            raise SettingsError(
                f"warehouse={self.warehouse!r} is a file; it must be a directory (or not exist yet)")


def canonical_location(uri: str) -> str:
    """A warehouse or source location as every engine names it: `s3a://b/p` becomes `s3://b/p`,
    the spelling delta-rs, pyarrow and Spark (through S3A, resources/object_store.py) all
    accept, so one table has one name."""
    return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri


def _at_least(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise SettingsError(f"{name}={value!r} is not accepted; it must be >= {minimum}")


def _fixed_duration(name: str, text: str) -> timedelta:
    try:
        duration = parse_duration(text)
        result = duration.to_timedelta()
    except ValueError as exc:
        raise SettingsError(
            f"{name}={text!r} is not accepted: {exc}. Use an ISO 8601 duration of fixed "
            "length such as PT1H, P1D or P0DT7H") from None
    if result < timedelta(0):
        raise SettingsError(f"{name}={text!r} is negative; it must be >= PT0S")
    return result


def _parse_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"{name}={value!r} is not a whole number")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not a whole number") from None


def _parse_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise SettingsError(f"{name}={value!r} is not a number")
    try:
        result = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not a number") from None
    if result != result or result in (float("inf"), float("-inf")):
        raise SettingsError(f"{name}={value!r} is not a finite number")
    return result


def _parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={value!r} is not accepted; use true or false")


def _parse_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SettingsError(f"{name}={value!r} is not a list; give comma-separated values")
    return tuple(str(item).strip() for item in items if str(item).strip())


def _parse_str(name: str, value: Any) -> str:
    return str(value).strip()


def parse_utc_datetime(name: str, value: Any) -> datetime:
    """A date or ISO datetime; naive values are UTC."""
    if isinstance(value, datetime):
        result = value
    elif isinstance(value, date):
        result = datetime.combine(value, time())
    else:
        text = str(value).strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            result = datetime.fromisoformat(text)
        except ValueError:
            raise SettingsError(
                f"{name}={value!r} is not a date; use YYYY-MM-DD or an ISO 8601 datetime") from None
    if result.tzinfo is None:
        result = result.replace(tzinfo=timezone.utc)
    return result.astimezone(timezone.utc)


def _parse_date_or_none(name: str, value: Any) -> date | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "today", "none")):
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    return parse_utc_datetime(name, value).date()


# How a raw value (environment text, Dagster config) becomes each field's type.
_PARSER_BY_TYPE: dict[Any, Callable[[str, Any], Any]] = {
    datetime: parse_utc_datetime,
    int: _parse_int,
    float: _parse_float,
    bool: _parse_bool,
    str: _parse_str,
    tuple[str, ...]: _parse_list,
    date | None: _parse_date_or_none,
}
_PARSERS = {name: _PARSER_BY_TYPE[kind] for name, kind in typing.get_type_hints(Settings).items()}


def _python_declarations(file: Path) -> tuple[Any, Any]:
    """The `ATTRIBUTES` a Python declaration file defines (the same entries as the YAML file's
    list, built by code: e.g. one count per event and period) and its `DEFAULTS` (True unless
    set, as the YAML file's `defaults`). The file is the team's own code, run as it is whenever
    the settings are read; an error in it names the file."""
    try:
        namespace = runpy.run_path(str(file), run_name="incremental_attributes")
    except Exception as exc:  # the team's code: any error it raises is a bad declaration file
        raise AttributeDeclarationError(f"{file}: the Python file failed: {type(exc).__name__}: {exc}") from exc
    if "ATTRIBUTES" not in namespace:
        raise AttributeDeclarationError(f"{file}: a Python declaration file must define ATTRIBUTES, "
                                        "a list of attribute declarations (as in the YAML file's 'attributes')")
    defaults = namespace.get("DEFAULTS", True)
    if not isinstance(defaults, bool):
        raise AttributeDeclarationError(f"{file}: DEFAULTS {defaults!r} is not accepted; use True or False")
    return namespace["ATTRIBUTES"], defaults
