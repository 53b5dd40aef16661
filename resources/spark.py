"""Spark session: local by default, one per process, pointable at a cluster.

Local default: `local[*]`, UTC session time zone, Arrow on, quiet logs, few shuffle partitions.

Point it at a cluster without touching code:
- `INCREMENTAL_SPARK_MASTER=spark://host:7077` (or `yarn`, `k8s://...`) sets `spark.master`;
- `SPARK_REMOTE=sc://host:15002` (PySpark's own variable) or `INCREMENTAL_SPARK_REMOTE`
  uses Spark Connect instead of a local JVM;
- `INCREMENTAL_SPARK_CONF="spark.executor.memory=8g;spark.sql.shuffle.partitions=400"` adds
  any other Spark setting (semicolon-separated `key=value` pairs).
In Dagster, the same keys can be given as `spark_config` of the `pyspark` resource.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any, Mapping

from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

_LOCK = threading.Lock()
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties").as_uri()

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "incremental-assets",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "true",
    # The default of 200 shuffle partitions is tuned for clusters; locally it only adds tasks.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    # Whole-stage code for ~70-column rows exceeds the JVM's 8000-byte JIT limit and would
    # run interpreted; above this limit Spark uses per-operator code instead (wide steps
    # such as base_events ran about 30% faster with it in the benchmark).
    "spark.sql.codegen.hugeMethodLimit": "8000",
    "spark.driver.memory": "6g",
    # Every broadcast join builds a hashed relation of at least one memory page, and a run does
    # many small ones; with Spark's default page (up to 64 MB) a long-lived driver filled its
    # heap with them until tasks could no longer get memory. Small pages keep that in check.
    "spark.buffer.pageSize": "2m",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    # Delta-rs writes INT64 microsecond timestamps; keep Spark's Parquet output the same.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG4J_CONFIG}",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}


def _parse_conf_list(text: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(
                f"INCREMENTAL_SPARK_CONF: expected 'key=value' pairs separated by ';', got {item!r}"
            )
        key, value = item.split("=", 1)
        conf[key.strip()] = value.strip()
    return conf


def spark_config_from_env(overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The Spark settings this process uses: local defaults, then environment, then overrides."""
    conf = dict(LOCAL_DEFAULTS)
    remote = os.environ.get("INCREMENTAL_SPARK_REMOTE") or os.environ.get("SPARK_REMOTE")
    master = os.environ.get("INCREMENTAL_SPARK_MASTER")
    if master:
        conf["spark.master"] = master
    conf.update(_parse_conf_list(os.environ.get("INCREMENTAL_SPARK_CONF", "")))
    conf.update({k: str(v) for k, v in (overrides or {}).items()})
    if remote or "spark.remote" in conf:
        # Spark Connect: the server owns master, memory and JVM options.
        conf["spark.remote"] = conf.get("spark.remote") or remote
        for key in ("spark.master", "spark.driver.memory", "spark.driver.extraJavaOptions",
                    "spark.executor.extraJavaOptions"):
            conf.pop(key, None)
    return conf


def get_spark(overrides: Mapping[str, Any] | None = None):
    """Return this process's Spark session, creating it on first use.

    Settings given after the session exists are applied only where Spark allows it
    at runtime (SQL settings); a second session is never started.
    """
    # PySpark turns collected timestamps into naive datetimes in the *process* time zone;
    # UTC everywhere makes those values mean the same instants the tables hold.
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()
    with _LOCK:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        conf = spark_config_from_env(overrides)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        if "spark.remote" not in conf:
            session.sparkContext.setLogLevel(os.environ.get("INCREMENTAL_SPARK_LOG_LEVEL", "ERROR"))
        return session


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy resource with this project's defaults.

    The session starts on first use (steps that never touch Spark start no JVM) and is
    shared by every step and IO manager in the process.
    """

    def _init_session(self) -> None:  # dagster-pyspark's hook, called by .spark_session
        if self._spark_session is None:
            self._spark_session = get_spark(self.spark_config)


def as_utc(value):
    """A datetime collected from Spark (naive, UTC) as a timezone-aware UTC datetime."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)

